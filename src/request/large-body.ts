/**
 * Large bodies parsed without one string of the whole body.
 *
 * Why: V8 puts any string of more than about 128 KiB in its large-object space, on pages mapped
 * for it alone and unmapped when it dies, so every page of it is a fresh page fault. Decoding a
 * 400 KB body into one string costs ~100 faults, 270-300 µs on a virtual machine, most of the
 * decode; parsing it then costs the same again whenever one string value is that large. Yet such a
 * body is nearly all a few long string values (the conversation's messages), each below that size.
 *
 * How: one pass over the bytes finds every string literal, exactly as `tooComplex` in body.ts
 * walks the text (a quote, then the next quote not escaped by an odd run of backslashes), and
 * counts brackets outside them as it does. Each long literal in a value's place is parsed on its
 * own (`JSON.parse` of the literal's text: the same string the whole body's parse makes of it, its
 * escapes checked the same way); the rest of the body, with a short placeholder string in each
 * long literal's place, is parsed as a whole, and the placeholders are then swapped for their
 * values. The answers are the whole-body parse's, exactly:
 *
 * - If the body is JSON, its literals are where the scan finds them, so the skeleton is JSON too,
 *   with the same keys in the same order, and each literal's own parse gives its value.
 * - If it is not, either the skeleton is not (a placeholder is a string where a string was), or
 *   one long literal's text is not a JSON string: `not_json` either way.
 * - A placeholder is a string beginning with U+0000, which only the escape `\u0000` can put in a
 *   parsed string (a raw NUL is not JSON). The skeleton's own text is checked for it; where it
 *   occurs the body goes the whole-body way, as does an unterminated string.
 * - Keys are never replaced (a literal followed by `:` stays), so no object is rebuilt and its
 *   keys keep their order; a value is swapped in place.
 * - Too deep or too many containers: the count is tooComplex's, on the same brackets in the same
 *   order, so the same bodies are refused, before anything is parsed.
 *
 * test/unit/large-body.test.ts holds this to the whole-body parse on generated bodies of every
 * shape, valid and not.
 */
import { asBody, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, type ParsedBody } from './body-limits.js';

/**
 * Bodies from this size are parsed piecewise: about where the whole body as one string (one byte
 * a character for ASCII) would be a large object. Smaller ASCII bodies gain nothing from it;
 * body.ts also sends bodies from half this size that are not all ASCII, since one character past
 * U+00FF doubles the string's size (a 64 KB prompt with one curly quote: 226 µs whole, 59 µs
 * piecewise, in one process).
 */
export const PIECEWISE_MIN_BYTES = 128 * 1024;
/**
 * String literals of this many bytes or more (quotes included) are parsed on their own; shorter
 * ones stay in the skeleton, where one more parse call each would cost more than it saves.
 */
export const LONG_LITERAL_BYTES = 1024;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The whole-body parse's answer for `bytes` (valid UTF-8, read from `start`, past a BOM), or
 * undefined when this way declines and the caller must parse the whole text.
 */
export function parsePiecewise(bytes: Buffer, start: number): ParsedBody | undefined {
  const n = bytes.length;
  // [start, end) of each long literal in a value's place, quotes included.
  const spans: number[] = [];
  let skeleton = '';
  let from = start;
  let depth = 0;
  let containers = 0;
  for (let i = start; i < n; i++) {
    const c = bytes[i]!;
    if (c === QUOTE) {
      let end = i;
      for (;;) {
        end = bytes.indexOf(QUOTE, end + 1);
        if (end < 0) return undefined; // unterminated: the whole-body way answers it
        let slashes = 0;
        while (bytes[end - 1 - slashes] === BACKSLASH) slashes++;
        if (slashes % 2 === 0) break;
      }
      if (end + 1 - i >= LONG_LITERAL_BYTES && !keyFollows(bytes, end + 1)) {
        const text = bytes.toString('utf8', from, i);
        if (text.includes('\\u0000')) return undefined;
        skeleton += `${text}"\\u0000${spans.length >> 1}"`;
        spans.push(i, end + 1);
        from = end + 1;
      }
      i = end;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_JSON_DEPTH || ++containers > MAX_JSON_CONTAINERS) return { ok: false, reason: 'too_complex' };
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  const rest = bytes.toString('utf8', from, n);
  if (spans.length > 0 && rest.includes('\\u0000')) return undefined;
  skeleton += rest;
  let value: unknown;
  const values: string[] = [];
  try {
    value = JSON.parse(skeleton);
    for (let k = 0; k < spans.length; k += 2) values.push(JSON.parse(bytes.toString('utf8', spans[k], spans[k + 1])) as string);
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  const parsed = asBody(value);
  if (parsed.ok && values.length > 0) swapIn(parsed.value, values);
  return parsed;
}

/** Whether the next byte after whitespace is `:`, which makes the literal before it a key. */
function keyFollows(bytes: Buffer, at: number): boolean {
  let j = at;
  for (;;) {
    const c = bytes[j];
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) j++;
    else return c === 0x3a;
  }
}

/**
 * Replaces each placeholder in the parsed skeleton with its literal's value. A placeholder the
 * parse dropped (a repeated key's earlier value) is never found; the walk stops once the others are.
 */
function swapIn(root: object, values: readonly string[]): void {
  let left = values.length;
  const stack: object[] = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const v: unknown = node[i];
        if (typeof v === 'string') {
          if (v.charCodeAt(0) === 0) {
            node[i] = values[Number(v.slice(1))];
            if (--left === 0) return;
          }
        } else if (v !== null && typeof v === 'object') stack.push(v);
      }
    } else {
      const obj = node as Record<string, unknown>;
      for (const key of Object.keys(obj)) {
        const v = obj[key];
        if (typeof v === 'string') {
          if (v.charCodeAt(0) === 0) {
            // An own data property, so assigning sets it, `__proto__` too (no setter is reached).
            obj[key] = values[Number(v.slice(1))];
            if (--left === 0) return;
          }
        } else if (v !== null && typeof v === 'object') stack.push(v);
      }
    }
  }
}
