/**
 * Block and prefix hashes are named by 16 hex digits, stored in the prefix index, sent to Redis and
 * logged: hex64 must give exactly what `toString(16).padStart(16, '0')` (the formatting it replaced)
 * gives, for every 64-bit value xxhash can return, leading zeros included.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { chainedBlockHashes, hex64, initHashing, seedFor } from '../../src/request/hashing.js';

const reference = (h: bigint): string => h.toString(16).padStart(16, '0');

test('hex64 of the edges of the 64-bit range and of each digit place', () => {
  const edges = [0n, 1n, 15n, 16n, 0xffn, 0xffff_ffffn, 0x1_0000_0000n, 0x7fff_ffff_ffff_ffffn, 0x8000_0000_0000_0000n, 0xffff_ffff_ffff_ffffn];
  for (let i = 0n; i < 64n; i++) edges.push(1n << i, (1n << i) - 1n, 0xffff_ffff_ffff_ffffn ^ (1n << i));
  for (const h of edges) assert.equal(hex64(h), reference(h), `0x${h.toString(16)}`);
});

test('hex64 of any 64-bit value, and of values with leading zero digits', () => {
  fc.assert(
    fc.property(fc.bigInt({ min: 0n, max: 0xffff_ffff_ffff_ffffn }), fc.integer({ min: 0, max: 63 }), (h, shift) => {
      assert.equal(hex64(h), reference(h));
      assert.equal(hex64(h >> BigInt(shift)), reference(h >> BigInt(shift)));
    }),
    { numRuns: 20_000 },
  );
});

test('hex64 of real block hashes (xxhash64 chains over text of every kind)', async () => {
  await initHashing();
  const text = fc.string({ unit: fc.constantFrom('a', ' ', '\n', 'é', '€', '😀', '\ud83d', '\ude00', '\u0000'), maxLength: 400 });
  fc.assert(
    fc.property(text, fc.string({ maxLength: 20 }), (t, model) => {
      for (const h of chainedBlockHashes(t, 8, 64, seedFor(model))) assert.equal(hex64(h), reference(h));
    }),
    { numRuns: 500 },
  );
  // A huge prompt's full chain.
  for (const h of chainedBlockHashes('x€😀'.repeat(100_000), 256, 512, seedFor('m'))) assert.equal(hex64(h), reference(h));
});
