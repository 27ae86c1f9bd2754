/**
 * Full duplex joins a body's chunks only to parse them, in one buffer reused by every request
 * (joinAndParse), and hands the request layer the parse; BUFFERED hands it the bytes. Every answer
 * must be the bytes': parseJsonBody's answer for the join however the body was cut (a character
 * split across two, three or four chunks, a BOM split), not_utf8 exactly when the joined bytes are
 * not UTF-8 (an invalid sequence split across chunks, a character cut off by the end of the
 * stream, a stray continuation byte opening a chunk), too_complex included (one walker serves
 * both; the depth rules themselves are property-tested in test/faults/request-properties.test.ts).
 * Each body is joined right after a longer one, so bytes left in the reused buffer by an earlier
 * body would show, and the earlier body's parse is checked again after the buffer's reuse; bodies
 * past the reused buffer's size, and large ones parsed piecewise, are checked too.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { joinAndParse, MAX_JSON_DEPTH, parseJsonBody, REUSED_JOIN_BYTES } from '../../src/request/body.js';
import { PIECEWISE_MIN_BYTES } from '../../src/request/large-body.js';
import { referenceDecode } from './json-oracle.js';

/** A longer body joined first, so the reused buffer holds other bytes past the next body's end. */
const before = Buffer.from(`{"filler":"${'\u00e9\u20ac'.repeat(40)}${'x'.repeat(200)}"}`);
function joined(chunks: readonly Buffer[]) {
  const earlier = joinAndParse([before.subarray(0, 7), before.subarray(7)]);
  const seen = JSON.stringify(earlier.parsed);
  const out = joinAndParse(chunks);
  assert.equal(JSON.stringify(earlier.parsed), seen, 'an earlier parse changed when the buffer was reused');
  assert.deepEqual(earlier.parsed, parseJsonBody(before));
  return out;
}
/** What a join must be: the bytes' length and their parse in one piece. */
const whole = (bytes: Buffer) => ({ length: bytes.length, parsed: bytes.length === 0 ? { ok: false, reason: 'empty' } : parseJsonBody(bytes) });

/** `bytes` cut at the given points (sorted; repeated points make empty chunks). */
function cut(bytes: Buffer, points: readonly number[]): Buffer[] {
  const at = points.map((p) => p % (bytes.length + 1)).sort((a, b) => a - b);
  return [0, ...at].map((from, i, all) => bytes.subarray(from, all[i + 1] ?? bytes.length));
}

const piece = fc.constantFrom(
  [0xef, 0xbb, 0xbf], // BOM
  [0x7b], [0x7d], [0x5b], [0x5d], [0x22], [0x61], [0x3a], [0x2c], [0x31], [0x5c], [0x5c, 0x22], [0x00],
  [0xc3, 0xa9], // é
  [0xe2, 0x82, 0xac], // €
  [0xf0, 0x9f, 0x98, 0x80], // 😀
  [0xed, 0xa0, 0xbd], // an encoded (lone) surrogate: invalid
  [0xc0, 0xaf], // overlong '/': invalid
  [0xe0, 0x80, 0xaf], // overlong: invalid
  [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF: invalid
  [0xe2, 0x82], // truncated
  [0xf0, 0x9f, 0x98], // truncated
  [0xc3], // truncated
  [0x80], [0xbf], // stray continuations
  [0xff], [0xfe], [0xf8],
);
const pieceBytes = fc.array(piece, { maxLength: 40 }).map((ps) => Buffer.from(ps.flat()));
/** Mostly valid text with a bad byte now and then: most bodies reach the end valid. */
const mostlyValid = fc
  .tuple(fc.string({ unit: 'binary', maxLength: 60 }), fc.option(fc.tuple(fc.nat(), fc.constantFrom(0x80, 0xc3, 0xed, 0xff)), { freq: 3 }))
  .map(([s, bad]) => {
    const b = Buffer.from(s);
    if (!bad) return b;
    const at = bad[0] % (b.length + 1);
    return Buffer.concat([b.subarray(0, at), Buffer.from([bad[1]]), b.subarray(at)]);
  });
const anyBytes = fc.oneof(pieceBytes, mostlyValid, fc.uint8Array({ maxLength: 24 }).map((u) => Buffer.from(u)));
const points = fc.array(fc.nat(), { maxLength: 8 });

test('joinAndParse: the parse of the bytes in one piece, and their length, for every cut', () => {
  fc.assert(
    fc.property(anyBytes, points, (bytes, at) => {
      assert.deepEqual(joined(cut(bytes, at)), whole(bytes));
    }),
    { numRuns: 20_000 },
  );
});

/** JSON-ish bodies: brackets, strings with escaped quotes and backslashes, and nesting around the depth limit. */
const jsonish = fc.oneof(
  pieceBytes,
  fc.tuple(fc.integer({ min: MAX_JSON_DEPTH - 2, max: MAX_JSON_DEPTH + 2 }), fc.constantFrom('[', '{"a":'), pieceBytes).map(([depth, open, inner]) => {
    const close = open === '[' ? ']' : '}';
    return Buffer.concat([Buffer.from(open.repeat(depth)), Buffer.from('"'), inner, Buffer.from('"'), Buffer.from(close.repeat(depth))]);
  }),
  fc.jsonValue({ maxDepth: 6 }).map((v) => Buffer.from(JSON.stringify({ v, s: 'é"\\😀' }))),
  // Escaped quotes and backslashes before brackets inside a string, near the depth limit: a walk
  // that ends the string at an escaped quote counts the brackets after it.
  fc
    .tuple(fc.integer({ min: MAX_JSON_DEPTH - 3, max: MAX_JSON_DEPTH + 1 }), fc.array(fc.constantFrom('\\"', '\\\\', '\\\\\\"', '[', '{', 'é', 'a'), { maxLength: 12 }))
    .map(([depth, inner]) => Buffer.from(`${'['.repeat(depth)}"${inner.join('')}"${']'.repeat(depth)}`)),
);

test('parseJsonBody of the join answers what it answers for the bytes, too_complex included', () => {
  fc.assert(
    fc.property(jsonish, points, (bytes, at) => {
      assert.deepEqual(parseJsonBody(joined(cut(bytes, at))), parseJsonBody(bytes));
    }),
    { numRuns: 5_000 },
  );
});

test('a character split over two, three or four chunks decodes; a BOM split over three is dropped once', () => {
  const text = 'a😀b€cé';
  const bytes = Buffer.from(JSON.stringify({ s: text }));
  for (let i = 1; i < bytes.length; i++) {
    for (let j = i; j < bytes.length; j++) {
      assert.deepEqual(joined([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]).parsed, { ok: true, value: { s: text } }, `cut at ${i}, ${j}`);
    }
  }
  const emoji = Buffer.from('{"e":"😀"}');
  assert.deepEqual(joined([...emoji].map((b) => Buffer.from([b]))).parsed, { ok: true, value: { e: '😀' } });
  const bom = [Buffer.from([0xef]), Buffer.from([0xbb]), Buffer.from([0xbf, 0x7b, 0x7d])];
  assert.deepEqual(joined(bom), { length: 5, parsed: { ok: true, value: {} } });
  // A second BOM is text: JSON.parse refuses it, as it does in one piece.
  assert.deepEqual(joined([...bom.slice(0, 2), Buffer.from([0xbf, 0xef, 0xbb]), Buffer.from([0xbf, 0x7b, 0x7d])]), { length: 8, parsed: { ok: false, reason: 'not_json' } });
});

test('invalid across a chunk boundary, or incomplete at the end of the stream, is not_utf8 as in one piece', () => {
  const cases: Array<[string, number[][]]> = [
    ['an encoded surrogate split after its lead', [[0x22, 0xed], [0xa0, 0xbd, 0x22]]],
    ['a truncated € followed by ASCII', [[0x22, 0xe2, 0x82], [0x41, 0x22]]],
    ['a stray continuation byte opening a chunk', [[0x22, 0xc3, 0xa9], [0x80, 0x22]]],
    ['a lead byte ending the stream', [[0x22, 0x61], [0xc3]]],
    ['three of 😀 ending the stream', [[0x22], [0xf0, 0x9f], [0x98]]],
    ['an overlong / split', [[0x22, 0xc0], [0xaf, 0x22]]],
    ['an empty chunk between the halves of a bad sequence', [[0xe0], [], [0x80, 0xaf]]],
  ];
  for (const [what, chunks] of cases) {
    const bufs = chunks.map((c) => Buffer.from(c));
    const whole = Buffer.concat(bufs);
    assert.equal(referenceDecode(whole), undefined, `${what}: the join itself is valid`);
    assert.deepEqual(joined(bufs), { length: whole.length, parsed: { ok: false, reason: 'not_utf8' } }, what);
  }
  assert.deepEqual(parseJsonBody(joined([])), { ok: false, reason: 'empty' });
  assert.deepEqual(parseJsonBody(joined([Buffer.alloc(0)])), { ok: false, reason: 'empty' });
});

test('a body past the reused buffer is joined whole, and the buffer still serves the next small one', () => {
  const big = Buffer.from(`{"content":"${'é'.repeat(REUSED_JOIN_BYTES / 2)}${'x'.repeat(100)}"}`);
  assert.ok(big.length > REUSED_JOIN_BYTES, "big.length > REUSED_JOIN_BYTES");
  const cutAt = [big.length >> 2, big.length >> 1, big.length - 3];
  assert.deepEqual(joined(cut(big, cutAt)), whole(big));
  const near = Buffer.from(`{"c":"${'y'.repeat(REUSED_JOIN_BYTES - 8)}"}`);
  assert.equal(near.length, REUSED_JOIN_BYTES);
  assert.deepEqual(joined(cut(near, [5, REUSED_JOIN_BYTES - 5])), whole(near));
  const small = Buffer.from('{"a":"é"}');
  assert.deepEqual(joined(cut(small, [6])), { length: small.length, parsed: { ok: true, value: { a: 'é' } } });
});

test('a large body is parsed piecewise from the reused buffer: its values are its own, not views of the next body', () => {
  const turn = (c: string) => `${c.repeat(40_000)}\n`;
  const large = Buffer.from(JSON.stringify({ model: 'm', messages: [0, 1, 2, 3, 4].map((i) => ({ role: 'user', content: turn('abcde'[i]!) })) }));
  assert.ok(large.length >= PIECEWISE_MIN_BYTES && large.length <= REUSED_JOIN_BYTES, "large.length >= PIECEWISE_MIN_BYTES && large.length <= REUSED_JOIN_BYTES");
  const first = joinAndParse(cut(large, [1000, 90_000]));
  const kept = JSON.stringify(first.parsed);
  assert.deepEqual(first, whole(large));
  // The next join overwrites the buffer the first was parsed from.
  const other = Buffer.from(JSON.stringify({ model: 'n', messages: [{ role: 'user', content: turn('z').repeat(5) }] }));
  assert.deepEqual(joinAndParse(cut(other, [7])), whole(other));
  assert.equal(JSON.stringify(first.parsed), kept);
});
