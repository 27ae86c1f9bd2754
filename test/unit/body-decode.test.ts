/**
 * parseJsonBody decodes with Node's UTF-8 validator and Buffer#toString instead of a fatal
 * TextDecoder (half the cost). The answer must be the decoder's exactly: the same text for every
 * valid body, one leading BOM dropped and no more, and not_utf8 for every invalid one (overlong
 * forms, encoded surrogates, code points past U+10FFFF, truncated sequences, stray continuation
 * bytes). The bytes are drawn from pieces that reach each of those cases, so a decodeUtf8 that
 * kept the BOM, dropped two, or accepted what the decoder refuses turns this red.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { decodeUtf8, parseJsonBody } from '../../src/request/body.js';

const oracle = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });
function reference(b: Uint8Array): string | undefined {
  try {
    return oracle.decode(b);
  } catch {
    return undefined;
  }
}

const piece = fc.constantFrom(
  [0xef, 0xbb, 0xbf], // BOM
  [0x7b], [0x7d], [0x22], [0x61], [0x00], [0x5c],
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
const bytes = fc.array(piece, { maxLength: 12 }).map((ps) => Buffer.from(ps.flat()));

test('decodeUtf8 answers what a fatal TextDecoder answers, BOMs and bad bytes included', () => {
  fc.assert(
    fc.property(bytes, (b) => {
      assert.equal(decodeUtf8(b), reference(b));
    }),
    { numRuns: 5000 },
  );
});

test('one leading BOM is dropped, a second one stays (and makes the body not JSON)', () => {
  const bom = Buffer.from([0xef, 0xbb, 0xbf]);
  const json = Buffer.from('{"a":1}');
  assert.deepEqual(parseJsonBody(Buffer.concat([bom, json])), { ok: true, value: { a: 1 } });
  assert.deepEqual(parseJsonBody(Buffer.concat([bom, bom, json])), { ok: false, reason: 'not_json' });
  assert.equal(decodeUtf8(Buffer.concat([bom, bom, json])), '\ufeff{"a":1}');
  assert.equal(decodeUtf8(bom), '');
});

test('a body of a valid prefix and one bad byte is not_utf8, wherever the byte is', () => {
  const good = Buffer.from(`{"content":"${'é€😀'.repeat(50)}"}`);
  for (let at = 0; at <= good.length; at += 7) {
    const bad = Buffer.concat([good.subarray(0, at), Buffer.from([0xff]), good.subarray(at)]);
    assert.deepEqual(parseJsonBody(bad), { ok: false, reason: 'not_utf8' });
  }
});
