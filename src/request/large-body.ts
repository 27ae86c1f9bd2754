/**
 * Large bodies parsed without one string of the whole body.
 *
 * Why: V8 puts any string of more than about 128 KiB in its large-object space, on pages mapped
 * for it alone and unmapped when it dies, so every page of it is a fresh page fault. Decoding a
 * 400 KB body into one string costs ~100 faults, 270-300 µs on a virtual machine, most of the
 * decode; parsing it then costs the same again whenever one string value is that large. Yet such a
 * body is nearly all a few long string values (the conversation's messages), each below that size.
 *
 * How: the scan every body gets (json-scan.ts: brackets counted outside string literals) also
 * lists the long literals in a value's place. Each long literal in a value's place is parsed on its
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
 * - Too deep or too many containers: the same scan as every other body's, so the same bodies are
 *   refused, before anything is parsed; an unterminated string is `not_json`, as it is for them.
 *
 * test/unit/large-body.test.ts holds this to the whole-body parse on generated bodies of every
 * shape, valid and not.
 */
import { asBody, type ParsedBody } from './body-limits.js';
import { scanJson } from './json-scan.js';

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

/**
 * The whole-body parse's answer for `bytes` (valid UTF-8, read from `start`, past a BOM), or
 * undefined when this way declines and the caller must parse the whole text: when the body has no
 * long literal, or its skeleton spells a placeholder. It declines only after the scan has passed
 * the whole body, so the caller's parse needs no scan of its own.
 */
export function parsePiecewise(bytes: Buffer, start: number): ParsedBody | undefined {
  // [start, end) of each long literal in a value's place, quotes included.
  const spans: number[] = [];
  const scan = scanJson(bytes, start, { minBytes: LONG_LITERAL_BYTES, spans });
  if (scan === 'too_complex') return { ok: false, reason: 'too_complex' };
  if (scan === 'unterminated') return { ok: false, reason: 'not_json' };
  if (spans.length === 0) return undefined;
  let skeleton = '';
  let from = start;
  for (let k = 0; k < spans.length; k += 2) {
    const text = bytes.toString('utf8', from, spans[k]);
    if (text.includes('\\u0000')) return undefined;
    skeleton += `${text}"\\u0000${k >> 1}"`;
    from = spans[k + 1]!;
  }
  const rest = bytes.toString('utf8', from);
  if (rest.includes('\\u0000')) return undefined;
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
  if (parsed.ok) swapIn(parsed.value, values);
  return parsed;
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
