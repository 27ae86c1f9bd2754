/**
 * Parses an OpenAI-compatible JSON body defensively. Untrusted input: it must never throw, and it
 * reports why a body was not usable so the caller can pick the configured answer.
 */

export type ParsedBody =
  | { ok: true; value: Record<string, unknown> }
  | { ok: false; reason: 'empty' | 'not_utf8' | 'not_json' | 'not_object' };

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

export function parseJsonBody(body: Buffer | undefined): ParsedBody {
  if (!body || body.length === 0) return { ok: false, reason: 'empty' };
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return { ok: false, reason: 'not_utf8' };
  }
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
