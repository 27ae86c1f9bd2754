/**
 * Parses an OpenAI-compatible JSON body defensively. Untrusted input: it must never throw, and it
 * reports why a body was not usable so the caller can pick the configured answer.
 */
import { isAscii, isUtf8 } from 'node:buffer';
import { asBody, MAX_JSON_DEPTH, type ParsedBody } from './body-limits.js';
import { scanJson } from './json-scan.js';
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
 * The bytes' parse. Every body is checked as UTF-8 and scanned for its nesting (json-scan.ts)
 * before V8's parser sees it. Large bodies are parsed piecewise (large-body.ts: no string of the
 * whole body, the same answers); the rest, and any the piecewise way declines, as one decoded text.
 */
function parseBytes(bytes: Buffer): ParsedBody {
  // Node's validator and `Buffer#toString` give what a fatal TextDecoder('utf-8') gives (one
  // leading BOM dropped: JSON.parse refuses it, and clients that write one mean plain JSON) at about
  // half its cost, 0.5 µs a request at 2 KB (TextDecoder's fatal mode goes through a try/catch and
  // a wrapper per call); test/unit/body-decode.test.ts holds the two to the same answers.
  if (!isUtf8(bytes)) return { ok: false, reason: 'not_utf8' };
  const start = bomLength(bytes);
  const size = bytes.length - start;
  // One character past U+00FF makes V8 store the whole string two bytes a character, so a body of
  // half the size may already be a large object. isAscii is the cheap test (a few µs at 64 KiB);
  // a body of Latin-1 letters only (é), stored one byte a character, takes the piecewise parse
  // too, at a little cost and with the same answers.
  if (size >= PIECEWISE_MIN_BYTES || (size >= PIECEWISE_MIN_BYTES / 2 && !isAscii(bytes))) {
    // Declined only after a whole scan that refused nothing.
    const piecewise = parsePiecewise(bytes, start);
    if (piecewise) return piecewise;
  } else {
    const scan = scanJson(bytes, start);
    if (scan === 'too_complex') return { ok: false, reason: 'too_complex' };
    if (scan === 'unterminated') return { ok: false, reason: 'not_json' };
  }
  let value: unknown;
  try {
    // JSON.parse is iterative in V8 for arrays/objects, but deeply nested input can still throw
    // RangeError; both land here.
    value = JSON.parse(bytes.toString('utf8', start));
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  return asBody(value);
}

/** 3 when the bytes open with a UTF-8 BOM, else 0. */
function bomLength(body: Buffer): number {
  return body.length >= 3 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
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
