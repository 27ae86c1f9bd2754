/**
 * The reference parse the body tests hold parseJsonBody to, written independently of the product's
 * (src/request/body.ts, json-scan.ts, large-body.ts): a fatal WHATWG TextDecoder, a bracket count
 * over the decoded text, then V8's `JSON.parse` of the whole text. Kept here so that the product
 * has one walk over a body (over its bytes) and the tests a second, over text, to compare it with.
 */
import { asBody, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, type ParsedBody } from '../../src/request/body-limits.js';

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/** What a fatal TextDecoder makes of the bytes (one leading BOM dropped), or undefined when it throws. */
export function referenceDecode(bytes: Uint8Array): string | undefined {
  try {
    return decoder.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Too deep or too many containers, counted over the text: brackets outside string literals. */
function tooComplex(text: string): boolean {
  let depth = 0;
  let containers = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      // To the next quote not escaped by an odd run of backslashes.
      let end = i + 1;
      for (;;) {
        if (end >= text.length) return false;
        if (text[end] === '\\') end += 2;
        else if (text[end] === '"') break;
        else end++;
      }
      i = end;
    } else if (c === '[' || c === '{') {
      if (++depth > MAX_JSON_DEPTH || ++containers > MAX_JSON_CONTAINERS) return true;
    } else if (c === ']' || c === '}') depth--;
  }
  return false;
}

/** The whole-body parse of a body's text. */
export function referenceParseText(text: string): ParsedBody {
  if (tooComplex(text)) return { ok: false, reason: 'too_complex' };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  return asBody(value);
}

/** The whole-body parse of a body's bytes: what parseJsonBody must answer for them. */
export function referenceParse(bytes: Uint8Array): ParsedBody {
  if (bytes.length === 0) return { ok: false, reason: 'empty' };
  const text = referenceDecode(bytes);
  return text === undefined ? { ok: false, reason: 'not_utf8' } : referenceParseText(text);
}
