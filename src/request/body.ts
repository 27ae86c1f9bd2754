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

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/**
 * Largest piece of a body decoded and parsed in one go. A body, object, array or string longer
 * than this is read piece by piece (see PieceParser), so no string kvgate makes from a body is
 * longer than this many bytes' worth: V8 puts a string past 128 KB in its large-object space, and
 * allocating one there (a 400 KB body decoded whole) costs about as much as parsing the body.
 */
export const PIECE_BYTES = 96 * 1024;

/**
 * The body as JSON.parse of its UTF-8 text reads it (a leading BOM dropped, as TextDecoder does),
 * or why not. `pieceBytes` is for tests: lowered, small bodies take the piecewise path too.
 */
export function parseJsonBody(body: Buffer | undefined, pieceBytes = PIECE_BYTES): ParsedBody {
  if (!body || body.length === 0) return { ok: false, reason: 'empty' };
  if (body.length <= pieceBytes) return parseWhole(body);
  // The same checks in the same order as parseWhole: UTF-8 (isUtf8 accepts exactly what the
  // fatal decoder does; a test holds them to it), nesting, then the JSON itself.
  if (!isUtf8(body)) return { ok: false, reason: 'not_utf8' };
  if (tooComplex(body)) return { ok: false, reason: 'too_complex' };
  const start = body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  const value = new PieceParser(body, Math.max(MIN_PIECE_BYTES, pieceBytes)).document(start);
  if (value === INVALID) return { ok: false, reason: 'not_json' };
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { ok: false, reason: 'not_object' };
  return { ok: true, value: value as Record<string, unknown> };
}

function parseWhole(body: Buffer): ParsedBody {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return { ok: false, reason: 'not_utf8' };
  }
  if (tooComplex(body)) return { ok: false, reason: 'too_complex' };
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

/** A piece must hold the longest escape (6 bytes) and UTF-8 sequence (4) with room to spare. */
const MIN_PIECE_BYTES = 16;
const INVALID: unique symbol = Symbol('invalid JSON');
type Parsed = unknown;

/**
 * Reads a JSON text too long to decode whole, giving exactly what JSON.parse gives (or INVALID
 * where JSON.parse throws), from pieces no longer than `pieceBytes`:
 *  - a value that fits in a piece is decoded and handed to JSON.parse as it is;
 *  - a longer object or array is walked here, member by member (JSON's grammar between values
 *    is a few characters: braces, brackets, commas, colons, whitespace); members that fit in a
 *    piece are parsed together, as many as fit, and a longer one is read the same way again;
 *  - a longer string is cut between characters and between escapes, each cut parsed by JSON.parse
 *    as a string of its own, and the results joined.
 * Where a value ends is found with the depth scan's string skipping, exact on valid JSON; on
 * invalid JSON it may be wrong, but the pieces and the grammar between them always tile the
 * text, so a text is accepted only when every part of it is valid: exactly when JSON.parse
 * accepts the whole. Objects are built as JSON.parse builds them (a repeated key keeps its first
 * place and its last value; `__proto__` is an ordinary key).
 */
class PieceParser {
  constructor(
    private readonly b: Buffer,
    private readonly pieceBytes: number,
  ) {}

  document(start: number): Parsed | typeof INVALID {
    const n = this.b.length;
    const at = this.ws(start, n);
    const end = this.valueEnd(at, n);
    if (end < 0) return INVALID;
    const value = this.value(at, end);
    if (value === INVALID || this.ws(end, n) !== n) return INVALID;
    return value;
  }

  private ws(i: number, limit: number): number {
    const b = this.b;
    while (i < limit) {
      const c = b[i]!;
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
      i++;
    }
    return i;
  }

  /** The value in [s, e), found by valueEnd. */
  private value(s: number, e: number): Parsed | typeof INVALID {
    if (e - s <= this.pieceBytes) return parsePiece(this.b.toString('utf8', s, e));
    const c = this.b[s];
    if (c === 0x7b) return this.object(s, e);
    if (c === 0x5b) return this.array(s, e);
    if (c === 0x22) return this.string(s, e);
    return parsePiece(this.b.toString('utf8', s, e));
  }

  /** End (exclusive) of the value starting at i, within limit; -1 when there is none. */
  private valueEnd(i: number, limit: number): number {
    const b = this.b;
    if (i >= limit) return -1;
    const c = b[i]!;
    if (c === 0x22) {
      const q = closingQuote(b, i);
      return q < 0 || q >= limit ? -1 : q + 1;
    }
    if (c === 0x7b || c === 0x5b) {
      let depth = 0;
      for (let j = i; j < limit; j++) {
        const d = b[j]!;
        if (d === 0x22) {
          j = closingQuote(b, j);
          if (j < 0 || j >= limit) return -1;
        } else if (d === 0x7b || d === 0x5b) depth++;
        else if ((d === 0x7d || d === 0x5d) && --depth === 0) return j + 1;
      }
      return -1;
    }
    // A number or literal: up to what may follow a value.
    let j = i;
    while (j < limit) {
      const d = b[j]!;
      if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break;
      j++;
    }
    return j;
  }

  /**
   * Where the run of whole members (or elements) starting at i ends: the whole rest when it fits
   * in a piece, else the last comma between members within a piece of i; -1 when the first one
   * alone is longer than a piece. One pass over the bytes, strings skipped natively.
   */
  private runEnd(i: number, last: number): number {
    if (last - i <= this.pieceBytes) return last;
    const b = this.b;
    const stop = i + this.pieceBytes;
    let depth = 0;
    let cut = -1;
    for (let j = i; j < stop; j++) {
      const c = b[j]!;
      if (c === 0x22) {
        j = closingQuote(b, j);
        if (j < 0 || j >= stop) break;
      } else if (c === 0x2c) {
        if (depth === 0) cut = j;
      } else if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) depth--;
    }
    return cut;
  }

  /**
   * An object longer than a piece. Its members are read in runs, as many as fit in a piece, each
   * run by one JSON.parse (`{` run `}`): an object of a million tiny members costs a few dozen
   * calls. A member longer than a piece is read on its own, its value the same way again.
   */
  private object(s: number, e: number): Parsed | typeof INVALID {
    const b = this.b;
    const last = e - 1; // the closing brace's place
    if (b[last] !== 0x7d) return INVALID;
    const out: Record<string, unknown> = {};
    let i = this.ws(s + 1, last);
    if (i === last) return out;
    for (;;) {
      let end = this.runEnd(i, last);
      if (end >= 0) {
        const run = parsePiece(`{${b.toString('utf8', i, end)}}`);
        if (run === INVALID) return INVALID;
        const o = run as Record<string, unknown>;
        for (const k of Object.keys(o)) put(out, k, o[k]);
      } else {
        if (b[i] !== 0x22) return INVALID;
        const keyEnd = this.valueEnd(i, last);
        if (keyEnd < 0) return INVALID;
        const key = this.value(i, keyEnd);
        if (typeof key !== 'string') return INVALID;
        i = this.ws(keyEnd, last);
        if (b[i] !== 0x3a) return INVALID;
        i = this.ws(i + 1, last);
        end = this.valueEnd(i, last);
        if (end < 0) return INVALID;
        const value = this.value(i, end);
        if (value === INVALID) return INVALID;
        put(out, key, value);
        end = this.ws(end, last);
      }
      if (end === last) return out;
      if (b[end] !== 0x2c) return INVALID;
      i = this.ws(end + 1, last);
      if (i === last) return INVALID; // a comma before the closing brace
    }
  }

  /** An array longer than a piece: its elements read in runs, as an object's members are. */
  private array(s: number, e: number): Parsed | typeof INVALID {
    const b = this.b;
    const last = e - 1;
    if (b[last] !== 0x5d) return INVALID;
    // The runs and the long elements, in order, joined once at the end: pushing elements one at
    // a time grows the array over and over (3x JSON.parse's time for a million token ids).
    const parts: unknown[][] = [];
    let i = this.ws(s + 1, last);
    if (i === last) return [];
    for (;;) {
      let end = this.runEnd(i, last);
      if (end >= 0) {
        const run = parsePiece(`[${b.toString('utf8', i, end)}]`);
        if (run === INVALID) return INVALID;
        parts.push(run as unknown[]);
      } else {
        end = this.valueEnd(i, last);
        if (end < 0) return INVALID;
        const value = this.value(i, end);
        if (value === INVALID) return INVALID;
        parts.push([value]);
        end = this.ws(end, last);
      }
      if (end === last) return joined(parts);
      if (b[end] !== 0x2c) return INVALID;
      i = this.ws(end + 1, last);
      if (i === last) return INVALID; // a comma before the closing bracket
    }
  }

  /** A string longer than a piece: its inside cut where no character or escape is split. */
  private string(s: number, e: number): Parsed | typeof INVALID {
    const b = this.b;
    const end = e - 1; // the closing quote
    let out = '';
    for (let from = s + 1; from < end; ) {
      const to = end - from <= this.pieceBytes ? end : cutBefore(b, from, from + this.pieceBytes);
      const piece = parsePiece(`"${b.toString('utf8', from, to)}"`);
      if (typeof piece !== 'string') return INVALID;
      out += piece;
      from = to;
    }
    return out;
  }
}

/** Arrays joined into one (a few thousand at a time: each is one argument of concat). */
function joined(parts: unknown[][]): unknown[] {
  if (parts.length === 1) return parts[0]!;
  let out: unknown[] = [];
  for (let i = 0; i < parts.length; i += 4096) out = out.concat(...parts.slice(i, i + 4096));
  return out;
}

/** Sets a member as JSON.parse does: a repeated key keeps its place, `__proto__` is an own member. */
function put(out: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(out, key, { value, writable: true, enumerable: true, configurable: true });
  else out[key] = value;
}

function parsePiece(text: string): Parsed | typeof INVALID {
  try {
    return JSON.parse(text) as Parsed;
  } catch {
    return INVALID;
  }
}

/** The closing quote of the string opening at i (the first quote not escaped by an odd backslash run), or -1. */
function closingQuote(b: Buffer, i: number): number {
  // The first bytes are read here: indexOf is a native call, costly for a million short strings.
  const inline = Math.min(b.length, i + 32);
  for (let j = i + 1; j < inline; j++) {
    if (b[j] !== 0x22) continue;
    let slashes = 0;
    while (b[j - 1 - slashes] === 0x5c) slashes++;
    if (slashes % 2 === 0) return j;
  }
  let end = Math.max(i, inline - 1);
  for (;;) {
    end = b.indexOf(0x22, end + 1);
    if (end < 0) return -1;
    let slashes = 0;
    while (b[end - 1 - slashes] === 0x5c) slashes++;
    if (slashes % 2 === 0) return end;
  }
}

/**
 * Where to cut a string's inside at or before p, reading from `from` (where the previous cut
 * left it: between characters and escapes): not inside a UTF-8 sequence (the body is valid UTF-8
 * by now) and not inside an escape (`\x`, or `\uXXXX`; escapes begin at backslashes after an even
 * run of them, counted from `from`). Always past `from` for pieces of MIN_PIECE_BYTES or more.
 */
function cutBefore(b: Buffer, from: number, p: number): number {
  while ((b[p]! & 0xc0) === 0x80) p--;
  for (let q = Math.max(from, p - 5); q < p; q++) {
    if (b[q] !== 0x5c) continue;
    let run = 0;
    while (q - 1 - run >= from && b[q - 1 - run] === 0x5c) run++;
    if (run % 2 === 1) continue; // this backslash is escaped: an escape's second character
    const len = b[q + 1] === 0x75 ? 6 : 2;
    if (q + len > p) return q;
    q += len - 1;
  }
  return p;
}

/**
 * One pass over the bytes counting brackets outside strings: too deep or too many containers.
 * Strings (nearly all of a prompt's bytes) are skipped with `indexOf`, natively, to their closing
 * quote: the first one not escaped by an odd run of backslashes. Multi-byte UTF-8 never contains
 * ASCII bytes, so reading bytes is exact; malformed JSON is only miscounted, never slow.
 */
function tooComplex(body: Buffer): boolean {
  let depth = 0;
  let containers = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c === 0x22) {
      let end = i;
      for (;;) {
        end = body.indexOf(0x22, end + 1);
        if (end < 0) return false; // unterminated: JSON.parse will refuse it
        let slashes = 0;
        while (body[end - 1 - slashes] === 0x5c) slashes++;
        if (slashes % 2 === 0) break;
      }
      i = end;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_JSON_DEPTH || ++containers > MAX_JSON_CONTAINERS) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
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
