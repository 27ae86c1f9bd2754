/**
 * Session ids are stored and logged as 128 bits of SHA-256 of their UTF-8 bytes. The one-shot
 * digest that computes them must give what a Hash object gives (stored keys in Redis outlive a
 * process upgrade): a published vector, and a Hash object as the oracle on ids with non-ASCII
 * characters and lone surrogates (both encode a lone surrogate as U+FFFD). Hashing another
 * encoding (latin1, UTF-16) or another digest turns this red.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import fc from 'fast-check';
import { hashSessionId } from '../../src/request/hashing.js';

test('a published SHA-256 vector, truncated to 128 bits', () => {
  assert.equal(hashSessionId('abc'), 'ba7816bf8f01cfea414140de5dae2223');
});

test('the same digest as a Hash object, for any id', () => {
  const id = fc.string({ unit: fc.constantFrom('a', 'Z', '0', '-', 'é', '€', '😀', '\ud83d', '\ude00', '\u0000', 'ÿ'), maxLength: 40 });
  fc.assert(
    fc.property(id, (s) => {
      assert.equal(hashSessionId(s), createHash('sha256').update(s).digest('hex').slice(0, 32));
    }),
    { numRuns: 2000 },
  );
});
