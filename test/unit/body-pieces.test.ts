/**
 * A body longer than a piece is read piece by piece (src/request/body.ts, PieceParser) instead of
 * being decoded whole and handed to JSON.parse. With the piece size lowered to a few bytes, every
 * body fast-check makes takes that path, and must come out exactly as the whole-body path reads
 * it (TextDecoder + JSON.parse, the oracle): the same reason when refused, and when accepted the
 * same value, with keys in the same order (JSON.stringify compares that), repeated keys and
 * `__proto__` as JSON.parse leaves them. Strings are cut between characters and escapes, so the
 * generators lean on what a wrong cut breaks: multi-byte UTF-8, surrogates, backslash runs,
 * \u escapes, and raw control characters that JSON forbids inside strings.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { parseJsonBody, PIECE_BYTES } from '../../src/request/body.js';

const WHOLE = Number.MAX_SAFE_INTEGER;

function same(body: Buffer, pieceBytes: number): void {
  const whole = parseJsonBody(body, WHOLE);
  const pieces = parseJsonBody(body, pieceBytes);
  assert.equal(pieces.ok, whole.ok, `${JSON.stringify(body.toString('latin1'))} at ${pieceBytes}`);
  if (!whole.ok || !pieces.ok) {
    assert.deepEqual(pieces, whole, JSON.stringify(body.toString('latin1')));
    return;
  }
  assert.deepEqual(pieces.value, whole.value);
  assert.equal(JSON.stringify(pieces.value), JSON.stringify(whole.value));
  assert.deepEqual(Object.keys(pieces.value), Object.keys(whole.value));
  assert.equal(Object.getPrototypeOf(pieces.value), Object.prototype);
  assert.equal(Object.hasOwn(pieces.value, '__proto__'), Object.hasOwn(whole.value, '__proto__'));
}

/** Characters that a cut in the wrong place breaks. */
const unit = fc.constantFrom('a', ' ', 'é', '€', '😀', '\ud83d', '\ude00', '"', '\\', '\\\\', '\u0000', '\n', '\u001f', '/', 'u', '0', 'xyzxyzxyz');
const text = fc.string({ unit, maxLength: 80 });
const value = fc.letrec((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    text,
    fc.double(),
    fc.integer(),
    fc.constantFrom(true, false, null),
    fc.array(tie('v'), { maxLength: 5 }),
    fc.dictionary(fc.oneof(text, fc.constantFrom('__proto__', 'model', '0', '10', 'constructor')), tie('v'), { maxKeys: 5 }),
  ),
})).v;
const object = fc.dictionary(fc.oneof(text, fc.constantFrom('__proto__', 'messages', '1')), value, { maxKeys: 6 });
const pieceBytes = fc.integer({ min: 16, max: 64 });
/** JSON text with whitespace between tokens, repeated keys and `\u` escapes the way other encoders write them. */
const styled = fc.tuple(object, fc.constantFrom(0, 1, '\t', ' \r\n'), fc.boolean(), fc.boolean()).map(([o, indent, escapeAll, repeat]) => {
  let s = JSON.stringify(o, null, indent);
  if (escapeAll) s = s.replace(/[^\x20-\x7e]/gu, (c) => [...c].map((u) => `\\u${u.charCodeAt(0).toString(16).padStart(4, '0')}`).join(''));
  if (repeat && s.startsWith('{"')) s = `{"dup":1,${s.slice(1).replace(/^}$/, '"dup":2}')}`.replace(/,}$/, '}');
  return s;
});

describe('reading a body piece by piece', () => {
  test('gives what decoding whole and JSON.parse give, for valid JSON of any shape', () => {
    fc.assert(fc.property(styled, pieceBytes, (s, n) => same(Buffer.from(s), n)), { numRuns: 1500 });
  });

  test('refuses exactly what the whole-body path refuses: a byte changed, inserted or cut', () => {
    fc.assert(
      fc.property(styled, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom('set', 'insert', 'cut'), pieceBytes, (s, at, byte, how, n) => {
        const b = Buffer.from(s);
        const i = at % b.length;
        const mutated =
          how === 'set' ? Buffer.concat([b.subarray(0, i), Buffer.from([byte]), b.subarray(i + 1)])
          : how === 'insert' ? Buffer.concat([b.subarray(0, i), Buffer.from([byte]), b.subarray(i)])
          : b.subarray(0, i);
        same(mutated, n);
      }),
      { numRuns: 3000 },
    );
  });

  test('whitespace JSON does not allow, and brackets swapped for another kind, are refused alike', () => {
    const gap = fc.constantFrom(' ', '\t', '\n', '\r', '\f', '\v', '\u00a0', '\u2028', '\ufeff', '\u0000', '');
    const spaced = fc.tuple(styled, fc.array(gap, { minLength: 1, maxLength: 40 })).map(([s, gaps]) => {
      let k = 0;
      // Between tokens: after each structural character outside strings (good enough: inside a
      // string the same gap is a character, which both paths read alike).
      return s.replace(/[{}[\],:]/g, (c) => c + gaps[k++ % gaps.length]);
    });
    const swapped = fc.tuple(styled, fc.nat(), fc.constantFrom('{', '}', '[', ']')).map(([s, at, c]) => {
      const places = [...s.matchAll(/[{}[\]]/g)].map((m) => m.index);
      if (places.length === 0) return s;
      const i = places[at % places.length]!;
      return s.slice(0, i) + c + s.slice(i + 1);
    });
    fc.assert(fc.property(fc.oneof(spaced, swapped), pieceBytes, (s, n) => same(Buffer.from(s), n)), { numRuns: 3000 });
  });

  test('agrees on arbitrary bytes and JSON-alphabet noise (UTF-8 validity, BOM, nesting)', () => {
    const noise = fc.string({ unit: fc.constantFrom('{', '}', '[', ']', '"', '\\', ',', ':', ' ', '1', '-', 'e', '.', 'u', 'null', 'true', '\\u00', 'é', '😀', '\u0000', '\t'), maxLength: 200 });
    const bytes = fc.oneof(
      fc.uint8Array({ minLength: 17, maxLength: 300 }).map((b) => Buffer.from(b)),
      noise.map((s) => Buffer.from(`{"a":"${s}"}`)),
      noise.map((s) => Buffer.from(s)),
      styled.map((s) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(s)])),
      styled.map((s) => Buffer.from(`\ufeff\ufeff${s}`)),
      fc.tuple(styled, fc.constantFrom([0xc3], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82], [0xc0, 0xaf], [0xff])).map(([s, bad]) => Buffer.concat([Buffer.from(s.slice(0, -1)), Buffer.from(bad), Buffer.from(s.slice(-1))])),
      fc.integer({ min: 120, max: 140 }).map((d) => Buffer.from(`{"x":${'['.repeat(d)}${']'.repeat(d)}}`)),
    );
    fc.assert(fc.property(bytes, pieceBytes, (b, n) => same(b, n)), { numRuns: 3000 });
  });

  test('long strings are cut between escapes and characters, however the backslashes run', () => {
    const run = fc.array(fc.constantFrom('\\\\', '\\"', '\\n', '\\u00e9', '\\ud83d\\ude00', '\\ud83d', 'é', '😀', '€', 'ab'), { minLength: 20, maxLength: 200 }).map((p) => p.join(''));
    fc.assert(fc.property(run, pieceBytes, (inside, n) => same(Buffer.from(`{"k":"${inside}","t":["${inside}"]}`), n)), { numRuns: 2000 });
  });

  test('a real-size chat body comes out the same at the default piece size', () => {
    const big = 'lorem ipsum "quoted" \\ back\nslash é€😀 '.repeat(12_000);
    const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'system', content: big }, { role: 'user', content: [{ type: 'text', text: big.slice(7) }] }], user: 'u' }));
    assert.ok(body.length > 4 * PIECE_BYTES);
    same(body, PIECE_BYTES);
  });
});
