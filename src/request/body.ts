/**
 * Parses an OpenAI-compatible JSON body defensively. Untrusted input: it must never throw, and it
 * reports why a body was not usable so the caller can pick the configured answer.
 */
import { isAscii, isUtf8 } from 'node:buffer';
import { asBody, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, type ParsedBody } from './body-limits.js';
import { parsePiecewise, PIECEWISE_MIN_BYTES } from './large-body.js';

export { MAX_JSON_DEPTH, type ParsedBody };

/**
 * A body its transport joined from chunks (full duplex) and parsed at once, while the buffer it
 * was joined in (reused by the next join) still held it: parseJsonBody answers that parse, which
 * is what it answers for the same bytes in one piece.
 */
export interface JoinedBody {
  /** Its size in bytes, as `Buffer#length` (the limits and size estimates read this). */
  readonly length: number;
  readonly parsed: ParsedBody;
}

export function parseJsonBody(body: Buffer | JoinedBody | undefined): ParsedBody {
  if (!body || body.length === 0) return { ok: false, reason: 'empty' };
  return body instanceof Uint8Array ? parseBytes(body) : body.parsed;
}

/**
 * The bytes' parse. Large bodies are parsed piecewise (large-body.ts: no string of the whole body,
 * the same answers); the rest, and any the piecewise way declines, as one decoded text.
 */
function parseBytes(bytes: Buffer): ParsedBody {
  const start = bomLength(bytes);
  const size = bytes.length - start;
  // One character past U+00FF makes V8 store the whole string two bytes a character, so a body of
  // half the size may already be a large object. isAscii is the cheap test (a few µs at 64 KiB);
  // a body of Latin-1 letters only (é), stored one byte a character, takes the piecewise parse
  // too, at a little cost and with the same answers.
  if (size >= PIECEWISE_MIN_BYTES || (size >= PIECEWISE_MIN_BYTES / 2 && !isAscii(bytes))) {
    if (!isUtf8(bytes)) return { ok: false, reason: 'not_utf8' };
    // Declined (a shape the piecewise parse leaves to the whole-body one): already known UTF-8.
    return parsePiecewise(bytes, start) ?? parseText(bytes.toString('utf8', start));
  }
  const text = decodeUtf8(bytes);
  return text === undefined ? { ok: false, reason: 'not_utf8' } : parseText(text);
}

/** The whole-body parse of a body's text (decodeUtf8's answer): the answers the piecewise way is held to. */
export function parseText(text: string): ParsedBody {
  if (tooComplex(text)) return { ok: false, reason: 'too_complex' };
  let value: unknown;
  try {
    // JSON.parse is iterative in V8 for arrays/objects, but deeply nested input can still throw
    // RangeError; both land here.
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  return asBody(value);
}

/**
 * The body as text, or undefined when it is not valid UTF-8: exactly what a fatal
 * `TextDecoder('utf-8')` (BOM not ignored) answers, which the tests hold it to. Node's native
 * validator and `Buffer#toString` cost about half of TextDecoder's decode (whose fatal mode goes
 * through a try/catch and a wrapper per call): 0.5 us per request at 2 KB. Like TextDecoder, one
 * leading BOM is dropped (JSON.parse refuses it; clients that write one mean plain JSON).
 */
export function decodeUtf8(body: Buffer): string | undefined {
  return isUtf8(body) ? body.toString('utf8', bomLength(body)) : undefined;
}

/** 3 when the bytes open with a UTF-8 BOM, else 0. */
function bomLength(body: Buffer): number {
  return body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
}

/**
 * One pass over the decoded text counting brackets outside strings: too deep or too many
 * containers. Strings (nearly all of a prompt) are skipped with `indexOf`, natively, to their
 * closing quote: the first one not escaped by an odd run of backslashes. Malformed JSON is only
 * miscounted, never slow. The piecewise parse of large bodies (large-body.ts) walks their bytes
 * the same way, so the two refuse the same bodies.
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
 * Bodies up to this size are joined in one buffer kept for the purpose (joinAndParse): 1 MiB holds
 * the large prompts that are common (agents' 100-500 KB) and bounds what an idle process keeps.
 */
export const REUSED_JOIN_BYTES = 1024 * 1024;
let joinBuffer = Buffer.alloc(0);

/**
 * The chunks joined and parsed, as a JoinedBody. The join is only read by the parse, synchronously
 * (the parsed value holds strings of its own, none of the buffer), so it is made in one buffer
 * reused by every call rather than in a fresh one: a fresh 400 KB buffer is memory the process has
 * to fault in and V8 counts against its external-memory budget (a full collection is due each time
 * that grows by 64 MB), for bytes read once and dropped. Bodies past REUSED_JOIN_BYTES are joined
 * in a fresh buffer, as before.
 */
export function joinAndParse(chunks: readonly Buffer[]): JoinedBody {
  let bytes = 0;
  for (const c of chunks) bytes += c.length;
  if (bytes === 0) return { length: 0, parsed: { ok: false, reason: 'empty' } };
  if (bytes > REUSED_JOIN_BYTES) return { length: bytes, parsed: parseBytes(Buffer.concat(chunks, bytes)) };
  if (joinBuffer.length < bytes) joinBuffer = Buffer.allocUnsafe(Math.min(REUSED_JOIN_BYTES, Math.max(bytes, 2 * joinBuffer.length)));
  let at = 0;
  for (const c of chunks) {
    joinBuffer.set(c, at);
    at += c.length;
  }
  return { length: bytes, parsed: parseBytes(joinBuffer.subarray(0, bytes)) };
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
