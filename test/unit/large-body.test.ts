/**
 * Large bodies are parsed piecewise (src/request/large-body.ts): each long string literal on its
 * own and the rest as a skeleton with placeholders. The answers must be the whole-body parse's,
 * exactly: the same values with keys in the same order, and the same refusals (not_json,
 * not_object, too_complex). Bodies here are generated as JSON text, past the size where the
 * piecewise way starts, with long literals in values and keys, escapes of every kind (quotes,
 * backslashes, surrogate pairs and lone surrogates, \u0000), strings that spell a placeholder,
 * `__proto__` and repeated keys, whitespace before colons, BOMs, nesting at the depth limit, and
 * then, in a third of them, one damaging edit (a bad escape, a raw control character, a stray
 * bracket or quote, a cut) mostly in a long literal, where only the literal's own parse can see it.
 *
 * Red when: a long key is replaced (its object gets a placeholder key), a placeholder is found in
 * a short string the body spelled (no \u0000 guard), `__proto__` is assigned (Object.prototype's
 * setter drops the value), a literal's text is taken without its own parse (escapes left in, bad
 * ones let through), or brackets are counted other than as the reference walk over the text (json-oracle.ts) counts them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { MAX_JSON_DEPTH, parseJsonBody, type ParsedBody } from '../../src/request/body.js';
import { LONG_LITERAL_BYTES, parsePiecewise, PIECEWISE_MIN_BYTES } from '../../src/request/large-body.js';
import { referenceParse as oracle } from './json-oracle.js';

/** Equal answers: same refusal, or values equal with keys in the same order and plain prototypes. */
function assertSame(got: ParsedBody, want: ParsedBody, what: string): void {
  assert.equal(got.ok, want.ok, `${what}: ok`);
  if (!got.ok || !want.ok) {
    assert.deepEqual(got, want, what);
    return;
  }
  assert.equal(JSON.stringify(got.value), JSON.stringify(want.value), `${what}: value`);
  assert.deepEqual(got.value, want.value, what);
  const plain = (v: unknown): void => {
    if (v === null || typeof v !== 'object') return;
    assert.equal(Object.getPrototypeOf(v), Array.isArray(v) ? Array.prototype : Object.prototype, `${what}: prototype`);
    for (const k of Object.keys(v)) plain((v as Record<string, unknown>)[k]);
  };
  plain(got.value);
}

const bomOf = (bytes: Buffer) => (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0);

/** Short pieces of text that reach every kind of escape and character class. */
const piece = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 6 }),
  fc.string({ unit: 'binary', maxLength: 6 }),
  fc.constantFrom('"', '\\', '\\"', '\n', '\r', '\t', '\u0000', '\u0001', '\u001f', '\ud83d', '\ude00', '\ud83d\ude00', 'é', '€', '\u2028', '/', '{', '[', ']', '}', ':'),
);
/** A string of text: mostly filler, the pieces somewhere in it. */
const text = (min: number, max: number) =>
  fc.tuple(fc.array(piece, { maxLength: 5 }), fc.integer({ min, max }), fc.nat(), fc.constantFrom('a', 'hello world\n', 'é')).map(([ps, n, at, fill]) => {
    const filler = fill.repeat(Math.ceil(n / fill.length)).slice(0, n);
    const cut = at % (filler.length + 1);
    return filler.slice(0, cut) + ps.join('') + filler.slice(cut);
  });
/** Strings that spell what a placeholder is, or what the skeleton looks for. */
const spelled = fc.constantFrom('\u00000', '\u00001', '\u0000', 'x\u0000', '\\u0000');
const shortString = fc.oneof(fc.string({ maxLength: 8 }), spelled, text(0, 40)).map((s) => JSON.stringify(s));
const longString = text(LONG_LITERAL_BYTES - 10, 40_000).map((s) => JSON.stringify(s));
const ws = fc.constantFrom('', '', ' ', '\n', '\t \r\n');
const key = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('model', 'messages', 'content', 'role', 'user', '__proto__', 'a').map((k) => JSON.stringify(k)) },
  { weight: 1, arbitrary: shortString },
  { weight: 1, arbitrary: longString },
);
const scalar = fc.constantFrom('1', '-2.5e3', 'true', 'false', 'null', '0');
const { value } = fc.letrec<{ value: string; arr: string; obj: string }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', maxDepth: 4 }, shortString, longString, longString, scalar, tie('arr'), tie('obj')),
  arr: fc.array(fc.tuple(ws, tie('value'), ws), { maxLength: 4 }).map((items) => `[${items.map(([a, v, b]) => a + v + b).join(',')}]`),
  obj: fc
    .array(fc.tuple(key, ws, tie('value'), fc.boolean()), { maxLength: 5 })
    // Repeated keys: an entry is sometimes written twice, the later value winning in both parses.
    .map((entries) => `{${entries.flatMap(([k, w, v, twice]) => (twice ? [`${k}${w}:${v}`, `${k}:"again"`] : [`${k}${w}:${v}`])).join(',')}}`),
}));

/**
 * A top-level body at least PIECEWISE_MIN_BYTES long, or half that (the size from which a body
 * that is not all ASCII goes piecewise): an object padded with messages of filler.
 */
const body = fc
  .tuple(
    fc.constantFrom(PIECEWISE_MIN_BYTES, PIECEWISE_MIN_BYTES / 2),
    fc.oneof({ weight: 6, arbitrary: value }, { weight: 1, arbitrary: fc.constant('') }),
    fc.array(longString, { minLength: 1, maxLength: 4 }),
    fc.constantFrom('object', 'object', 'object', 'array', 'string', 'deep'),
    fc.integer({ min: MAX_JSON_DEPTH - 3, max: MAX_JSON_DEPTH + 1 }),
    fc.boolean(),
  )
  .map(([size, extra, turns, shape, depth, bom]) => {
    const pad = Math.max(0, Math.ceil((size - turns.join('').length) / 30_000));
    const messages = [...turns, ...Array.from({ length: pad }, (_, i) => JSON.stringify('x'.repeat(30_000 + i)))];
    const msgs = `[${messages.map((c) => `{"role":"user","content":${c}}`).join(',')}]`;
    let t: string;
    if (shape === 'array') t = `[${extra || 'null'},${msgs}]`;
    else if (shape === 'string') t = messages[0]!.repeat(1) + ' '.repeat(Math.max(0, size - messages[0]!.length));
    else if (shape === 'deep') t = `{"x":${'['.repeat(depth)}${msgs}${']'.repeat(depth)},"messages":${msgs}}`;
    else t = `{"model":"m",${extra ? `"extra":${extra},` : ''}"messages":${msgs}}`;
    return (bom ? '\ufeff' : '') + t;
  });

/** One damaging edit: mostly inside a long literal (where most of the text is), sometimes at a structural character. */
const edit = fc.option(
  fc.tuple(fc.nat(), fc.boolean(), fc.constantFrom('\\x', '\\u12', '\\', '"', '\u0001', '\n', '[', ']', '{', '}', ',', ':', 'x', '', '\\u0000', '\\ud800')),
  { freq: 2 },
);
function damaged(t: string, e: [number, boolean, string] | null): string {
  if (!e) return t;
  const [at, structural, insert] = e;
  let pos = at % t.length;
  if (structural) {
    const marks: number[] = [];
    for (let i = 0; i < t.length && marks.length < 400; i++) if ('{}[],:"'.includes(t[i]!)) marks.push(i);
    pos = marks[at % marks.length] ?? pos;
  }
  // '' cuts the body there; anything else is inserted, replacing one character.
  return insert === '' ? t.slice(0, pos) : t.slice(0, pos) + insert + t.slice(pos + 1);
}

test('parseJsonBody answers for a large body what the whole-body parse answers', () => {
  let answered = 0;
  let valid = 0;
  fc.assert(
    fc.property(body, edit, (t, e) => {
      const bytes = Buffer.from(damaged(t, e));
      const want = oracle(bytes);
      assertSame(parseJsonBody(bytes), want, 'parseJsonBody');
      if (want.ok) valid++;
      // parseJsonBody answers these before any parse.
      if (want.ok === false && (want.reason === 'not_utf8' || want.reason === 'empty')) return;
      const direct = parsePiecewise(bytes, bomOf(bytes));
      if (direct === undefined) return;
      answered++;
      assertSame(direct, want, 'parsePiecewise');
    }),
    { numRuns: 400 },
  );
  // The piecewise way must have answered, not declined to the whole-body parse it is compared with.
  assert.ok(answered >= 240, `the piecewise way answered ${answered} of 400`);
  assert.ok(valid >= 100, `only ${valid} of 400 bodies were JSON`);
});

/** A large body around one entry: `{"model":"m",ENTRY,"messages":[...filler...]}`. */
function around(entry: string): Buffer {
  const filler = JSON.stringify('y'.repeat(PIECEWISE_MIN_BYTES));
  return Buffer.from(`{"model":"m",${entry},"messages":[{"role":"user","content":${filler}}]}`);
}
const long = (c: string) => JSON.stringify(c.repeat(LONG_LITERAL_BYTES));

test('the cases one by one: each answered piecewise, exactly as the whole body parses', () => {
  const cases: Array<[string, string, ParsedBody['ok'] | 'not_json']> = [
    ['a long key stays a key', `${long('k')}:1`, true],
    ['a long value under __proto__ is an own property, not a prototype', `"__proto__":${long('p')}`, true],
    ['a repeated key: the later long value wins', `"a":${long('1')},"a":${long('2')}`, true],
    ['a repeated key: the later short value wins', `"a":${long('1')},"a":"short"`, true],
    ['whitespace before the colon of a long key', `${long('k')} \n\t:${long('v')}`, true],
    ['escapes in a long value', `"e":${JSON.stringify(`${'q'.repeat(LONG_LITERAL_BYTES)}"\\\n\t\ud83d\ude00\ud800\u2028é`)}`, true],
    ['a long value in an array in an array', `"n":[[${long('a')},1,[${long('b')}]]]`, true],
    ['a bad escape inside a long value', `"e":"${'r'.repeat(LONG_LITERAL_BYTES)}\\x"`, 'not_json'],
    ['a raw control character inside a long value', `"e":"${'r'.repeat(LONG_LITERAL_BYTES)}\u0001"`, 'not_json'],
    ['a long value where a key belongs', `${long('k')},"b":1`, 'not_json'],
  ];
  for (const [what, entry, expect] of cases) {
    const bytes = around(entry);
    const want = oracle(bytes);
    if (expect === 'not_json') assert.deepEqual(want, { ok: false, reason: 'not_json' }, what);
    else assert.equal(want.ok, expect, what);
    const direct = parsePiecewise(bytes, 0);
    assert.ok(direct !== undefined, `${what}: declined`);
    assertSame(direct, want, what);
    assertSame(parseJsonBody(bytes), want, what);
  }
  const proto = parsePiecewise(around(`"__proto__":${long('p')}`), 0);
  assert.ok(proto?.ok, "proto?.ok");
  assert.equal(Object.getOwnPropertyDescriptor(proto.value, '__proto__')?.value, 'p'.repeat(LONG_LITERAL_BYTES));
});

test('a body that spells a placeholder goes the whole-body way; an unterminated string is not_json', () => {
  const spelling = [`"s":"\\u00000","t":${long('v')}`, `"s":${long('v')},"t":"\\u00000"`, `${JSON.stringify('\u0000')}:${long('v')}`];
  // After the last long literal, too.
  const last = Buffer.from(`${around(`"s":${long('v')}`).toString().slice(0, -1)},"t":"\\u00000"}`);
  for (const [what, bytes] of [...spelling.map((e) => [e.slice(0, 20), around(e)] as const), ['after the last', last] as const]) {
    assert.equal(parsePiecewise(bytes, 0), undefined, what);
    assertSame(parseJsonBody(bytes), oracle(bytes), what);
  }
  assert.ok(oracle(last).ok, "oracle(last).ok");
  const open = Buffer.from(`{"a":${long('v')},"b":"${'z'.repeat(PIECEWISE_MIN_BYTES)}`);
  assert.deepEqual(parsePiecewise(open, 0), { ok: false, reason: 'not_json' });
  assert.deepEqual(oracle(open), { ok: false, reason: 'not_json' });
  assert.deepEqual(parseJsonBody(open), { ok: false, reason: 'not_json' });
});

test('too deep or too many containers: refused before anything is parsed, as the whole-body walk refuses', () => {
  for (const depth of [MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1]) {
    const bytes = around(`"d":${'['.repeat(depth - 1)}${long('v')}${']'.repeat(depth - 1)}`);
    const want = oracle(bytes);
    assert.equal(want.ok, depth <= MAX_JSON_DEPTH, `depth ${depth}`);
    assertSame(parsePiecewise(bytes, 0)!, want, `depth ${depth}`);
  }
  const many = around(`"c":[${'[],'.repeat(100_000)}${long('v')}]`);
  assert.deepEqual(parsePiecewise(many, 0), { ok: false, reason: 'too_complex' });
  assert.deepEqual(oracle(many), { ok: false, reason: 'too_complex' });
});
