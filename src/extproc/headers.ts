/**
 * Envoy header maps → plain request facts. Envoy sends values in `raw_value` (bytes) and they may
 * not be UTF-8; we decode as latin1 so every byte sequence maps to one stable string and nothing
 * can throw. Names arrive lower-case; the first value of a repeated header wins, as in Envoy routing.
 */
import { pathOnly, type RequestInfo } from '../request/request.js';
import type { HeaderMap } from './messages.js';

/** Most headers read from one message; more is a header flood and the rest are ignored. */
export const MAX_HEADERS = 512;

export function headerMapToMap(map: HeaderMap | null | undefined): Map<string, string> {
  const out = new Map<string, string>();
  const list = map?.headers ?? [];
  for (let i = 0; i < list.length && i < MAX_HEADERS; i++) {
    const h = list[i]!;
    if (typeof h.key !== 'string' || h.key === '') continue;
    const name = h.key.toLowerCase();
    if (out.has(name)) continue;
    const raw = h.raw_value;
    out.set(name, raw && raw.length > 0 ? Buffer.from(raw).toString('latin1') : (h.value ?? ''));
  }
  return out;
}

export function requestInfoFromHeaders(headers: Map<string, string>): RequestInfo {
  return {
    method: headers.get(':method') ?? '',
    path: pathOnly(headers.get(':path') ?? ''),
    headers,
  };
}
