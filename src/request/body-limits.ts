/**
 * What a body's parse answers, and the limits on what it reads: shared by the whole-body parse
 * (body.ts) and the piecewise one for large bodies (large-body.ts), which must refuse the same bodies.
 */

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

/** A parsed JSON document as a body: an object, or `not_object` (arrays, strings, numbers, null). */
export function asBody(value: unknown): ParsedBody {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { ok: false, reason: 'not_object' };
  return { ok: true, value: value as Record<string, unknown> };
}
