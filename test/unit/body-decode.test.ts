/**
 * parseJsonBody decodes with Node's UTF-8 validator and Buffer#toString instead of a fatal
 * TextDecoder (half the cost). The answer must be the decoder's exactly: the same text for every
 * valid body, one leading BOM dropped and no more, and not_utf8 for every invalid one (overlong
 * forms, encoded surrogates, code points past U+10FFFF, truncated sequences, stray continuation
 * bytes). Bodies are a JSON string of bytes drawn from pieces that reach each of those cases,
 * behind zero to two BOMs, so the decoded text itself is compared (the string's value): a decode
 * that kept the BOM, dropped two, accepted what the decoder refuses or decoded a character
 * otherwise turns this red.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parseJsonBody } from '../../src/request/body.js';
import { referenceDecode, referenceParse } from './json-oracle.js';

const BOM = [0xef, 0xbb, 0xbf];
const piece = fc.constantFrom(
  BOM, // inside a string: U+FEFF, a character like any other
  [0x7b], [0x7d], [0x61], [0x20],
  [0xc3, 0xa9], // é
  [0xe2, 0x82, 0xac], // €
  [0xf0, 0x9f, 0x98, 0x80], // 😀
  [0xed, 0xa0, 0xbd], // an encoded (lone) surrogate: invalid
  [0xc0, 0xaf], // overlong '/': invalid
  [0xe0, 0x80, 0xaf], // overlong: invalid
  [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF: invalid
  [0xe2, 0x82], // truncated
  [0x80], // stray continuation
  [0xff], [0xfe],
);
/** `{"s":"…"}` around the pieces, behind 0-2 BOMs. */
const body = fc
  .tuple(fc.integer({ min: 0, max: 2 }), fc.array(piece, { maxLength: 12 }))
  .map(([boms, ps]) => Buffer.from([...Array<number[]>(boms).fill(BOM).flat(), ...Buffer.from('{"s":"'), ...ps.flat(), ...Buffer.from('"}')]));

test('the decode answers what a fatal TextDecoder answers, BOMs and bad bytes included', () => {
  let decoded = 0;
  fc.assert(
    fc.property(body, (b) => {
      const want = referenceParse(b);
      assert.deepEqual(parseJsonBody(b), want);
      if (want.ok) decoded++;
    }),
    { numRuns: 5000 },
  );
  // Most bodies must decode, so that the decoded text, not only the refusal, is compared.
  assert.ok(decoded >= 400, `only ${decoded} of 5000 bodies decoded`);
});

test('one leading BOM is dropped, a second one stays (and makes the body not JSON)', () => {
  const bom = Buffer.from(BOM);
  const json = Buffer.from('{"a":1}');
  assert.deepEqual(parseJsonBody(Buffer.concat([bom, json])), { ok: true, value: { a: 1 } });
  assert.deepEqual(parseJsonBody(Buffer.concat([bom, bom, json])), { ok: false, reason: 'not_json' });
  assert.equal(referenceDecode(Buffer.concat([bom, bom, json])), '\ufeff{"a":1}');
  assert.deepEqual(parseJsonBody(bom), { ok: false, reason: 'not_json' });
});

test('a body of a valid prefix and one bad byte is not_utf8, wherever the byte is', () => {
  const good = Buffer.from(`{"content":"${'é€😀'.repeat(50)}"}`);
  for (let at = 0; at <= good.length; at += 7) {
    const bad = Buffer.concat([good.subarray(0, at), Buffer.from([0xff]), good.subarray(at)]);
    assert.deepEqual(parseJsonBody(bad), { ok: false, reason: 'not_utf8' });
  }
});
