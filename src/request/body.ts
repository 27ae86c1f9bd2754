/**
 * Parses an OpenAI-compatible JSON body defensively. Untrusted input: it must never throw, and it
 * reports why a body was not usable so the caller can pick the configured answer.
 */
import { isUtf8 } from 'node:buffer';

export type ParsedBody =
  | { ok: true; value: Record<string, unknown> }
  | { ok: false; reason: 'empty' | 'not_utf8' | 'not_json' | 'not_object' | 'too_complex' };

/**
 * Deepest JSON nesting read. Real OpenAI bodies (tool and response schemas included) stay far
 * below it; past it V8's JSON.parse costs microseconds per level, so an 8 MiB body of `[` would
 * block the event loop (every stream's routing) for seconds. Such a body is not parsed at all.
 */
export const MAX_JSON_DEPTH = 128;
/**
 * Most objects and arrays read in one body. A real chat has a few per message; 8 MiB of `[],`
 * would be millions, each a heap object: seconds of parsing and GC and over 100 MB of heap.
 */
export const MAX_JSON_CONTAINERS = 100_000;

/**
 * A body its transport already decoded (full duplex joins its chunks only to decode them, see
 * decodeJoined): parseJsonBody reads it as it reads the bytes, with the same answers.
 */
export interface DecodedBody {
  /** Its size in bytes, as `Buffer#length` (the limits and size estimates read this). */
  readonly length: number;
  /** What decodeUtf8 answers for its bytes: the text, one leading BOM dropped; undefined when not UTF-8. */
  readonly text: string | undefined;
}

export function parseJsonBody(body: Buffer | DecodedBody | undefined): ParsedBody {
  if (!body || body.length === 0) return { ok: false, reason: 'empty' };
  const bytes = body instanceof Uint8Array ? body : undefined;
  const text = bytes ? decodeUtf8(bytes) : (body as DecodedBody).text;
  if (text === undefined) return { ok: false, reason: 'not_utf8' };
  if (tooComplex(text)) return { ok: false, reason: 'too_complex' };
  let value: unknown;
  try {
    // JSON.parse is iterative in V8 for arrays/objects, but deeply nested input can still throw
    // RangeError; both land here.
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { ok: false, reason: 'not_object' };
  return { ok: true, value: value as Record<string, unknown> };
}

/**
 * The body as text, or undefined when it is not valid UTF-8: exactly what a fatal
 * `TextDecoder('utf-8')` (BOM not ignored) answers, which the tests hold it to. Node's native
 * validator and `Buffer#toString` cost about half of TextDecoder's decode (whose fatal mode goes
 * through a try/catch and a wrapper per call): 0.5 us per request at 2 KB. Like TextDecoder, one
 * leading BOM is dropped (JSON.parse refuses it; clients that write one mean plain JSON).
 */
export function decodeUtf8(body: Buffer): string | undefined {
  if (!isUtf8(body)) return undefined;
  const bom = body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf;
  return body.toString('utf8', bom ? 3 : 0);
}

/**
 * One pass over the decoded text counting brackets outside strings: too deep or too many
 * containers. Strings (nearly all of a prompt) are skipped with `indexOf`, natively, to their
 * closing quote: the first one not escaped by an odd run of backslashes. Malformed JSON is only
 * miscounted, never slow. Walking the text rather than the bytes costs the same (2 KB to 400 KB
 * bodies, within 3%) and serves both body forms: the bytes are decoded first anyway.
 */
function tooComplex(text: string): boolean {
  let depth = 0;
  let containers = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let end = i;
      for (;;) {
        end = text.indexOf('"', end + 1);
        if (end < 0) return false;
        let slashes = 0;
        while (text.charCodeAt(end - 1 - slashes) === 0x5c) slashes++;
        if (slashes % 2 === 0) break;
      }
      i = end;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_JSON_DEPTH || ++containers > MAX_JSON_CONTAINERS) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/**
 * Bodies up to this size are joined in one buffer kept for the purpose (decodeJoined): 1 MiB holds
 * the large prompts that are common (agents' 100-500 KB) and bounds what an idle process keeps.
 */
export const REUSED_JOIN_BYTES = 1024 * 1024;
let joinBuffer = Buffer.alloc(0);

/**
 * What decodeUtf8 answers for the chunks joined, as a DecodedBody. The join is only read by the
 * decode, synchronously, so it is made in one buffer reused by every call rather than in a fresh
 * one: a fresh 400 KB buffer is memory the process has to fault in and V8 counts against its
 * external-memory budget (a full collection is due each time that grows by 64 MB), for bytes
 * read once and dropped. Bodies past REUSED_JOIN_BYTES are joined in a fresh buffer, as before.
 */
export function decodeJoined(chunks: readonly Buffer[]): DecodedBody {
  let bytes = 0;
  for (const c of chunks) bytes += c.length;
  if (bytes > REUSED_JOIN_BYTES) return { length: bytes, text: decodeUtf8(Buffer.concat(chunks, bytes)) };
  if (joinBuffer.length < bytes) joinBuffer = Buffer.allocUnsafe(Math.min(REUSED_JOIN_BYTES, Math.max(bytes, 2 * joinBuffer.length)));
  let at = 0;
  for (const c of chunks) {
    joinBuffer.set(c, at);
    at += c.length;
  }
  return { length: bytes, text: decodeUtf8(joinBuffer.subarray(0, bytes)) };
}

/** A string field, or undefined when absent or of another type (bodies are untrusted). */
export function stringField(obj: Record<string, unknown>, name: string): string | undefined {
  const v = obj[name];
  return typeof v === 'string' ? v : undefined;
}

/** A nested object field, or undefined. */
export function objectField(obj: Record<string, unknown>, name: string): Record<string, unknown> | undefined {
  const v = obj[name];
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}
