/**
 * Envoy header maps → plain request facts. Envoy sends values in `raw_value` (bytes) and they may
 * not be UTF-8; we decode as latin1 so every byte sequence maps to one stable string and nothing
 * can throw. Names arrive lower-case; the first value of a repeated header wins, as in Envoy routing.
 */
import type { Config } from '../config/schema.js';
import { DESTINATION_HEADER } from './endpoint-picker.js';
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
    out.set(name, raw && raw.length > 0 ? latin1(raw) : (h.value ?? ''));
  }
  return out;
}

/**
 * The bytes as latin1, read in place: `Buffer.from(bytes)` copied every header value (a buffer
 * apiece, on every request) only to read it once.
 */
function latin1(raw: Uint8Array): string {
  return (Buffer.isBuffer(raw) ? raw : Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength)).toString('latin1');
}

/**
 * Every request header kvgate may set to steer Envoy's routing. A client must never choose its
 * worker, so a client-sent copy of any of these never survives: kvgate overwrites the one it sets
 * and removes the rest (test/security/routing-headers.test.ts checks each). Add new outputs here.
 */
export function routingOutputHeaders(config: Config): string[] {
  // The header the configured protocol routes on (envoy/*.yaml strips the same one from clients).
  return config.routing.protocol === 'endpoint_picker' ? [DESTINATION_HEADER] : [config.routing.header];
}

/**
 * The routing output headers a client sent, looking at every header (not only the first
 * MAX_HEADERS that are read): a spoofed one hidden behind a header flood must not survive either.
 */
export function spoofedRoutingHeaders(map: HeaderMap | null | undefined, config: Config): string[] {
  const outputs = routingOutputHeaders(config);
  // In order of first appearance, each once; almost always none (no set, no copy built then).
  let found: string[] | undefined;
  const list = map?.headers;
  if (!list) return [];
  for (let i = 0; i < list.length; i++) {
    const key = list[i]!.key;
    if (typeof key !== 'string') continue;
    const name = key.toLowerCase();
    if (outputs.includes(name) && !found?.includes(name)) (found ??= []).push(name);
  }
  return found ?? [];
}

export function requestInfoFromHeaders(headers: Map<string, string>): RequestInfo {
  return {
    method: headers.get(':method') ?? '',
    path: pathOnly(headers.get(':path') ?? ''),
    headers,
  };
}
