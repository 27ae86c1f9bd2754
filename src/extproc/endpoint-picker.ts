/**
 * The Gateway API Inference Extension endpoint-picker protocol, on top of ext_proc
 * (Gateway API Inference Extension, docs/proposals/004-endpoint-picker-protocol):
 *
 *  - the picker answers with the chosen `ip:port` in the request header
 *    `x-gateway-destination-endpoint` AND in dynamic metadata `envoy.lb` under the same key, with
 *    the same value (the spec forbids them to differ); the proxy's ORIGINAL_DST cluster connects
 *    to it;
 *  - the proxy may restrict the choice with a subset hint in
 *    `metadata_context.filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"]`
 *    (a list of `ip:port`); nothing eligible is a 503;
 *  - shedding is a 429;
 *  - on the response path the proxy reports the endpoint that actually served the request in
 *    `metadata_context.filter_metadata["envoy.lb"]["x-gateway-destination-endpoint-served"]`.
 */
import { isIP } from 'node:net';
import type { WorkerConfig } from '../config/schema.js';
import type { MetadataContext, PbStruct, PbValue } from './messages.js';
import { canonicalEndpoint } from '../util/endpoint-address.js';

export const DESTINATION_HEADER = 'x-gateway-destination-endpoint';
export const LB_NAMESPACE = 'envoy.lb';
export const SUBSET_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';
export const SERVED_KEY = 'x-gateway-destination-endpoint-served';

/** Most subset entries read; a longer list is cut here (the fleet is far smaller). */
const MAX_SUBSET = 4096;

/** The dynamic metadata that goes with a destination header. */
export function destinationMetadata(endpoint: string): PbStruct {
  return {
    fields: {
      [LB_NAMESPACE]: { structValue: { fields: { [DESTINATION_HEADER]: { stringValue: endpoint } } } },
    },
  };
}

function field(md: MetadataContext | null | undefined, namespace: string, key: string): PbValue | undefined {
  const ns = md?.filter_metadata?.[namespace];
  const v = ns?.fields?.[key];
  return v ?? undefined;
}

function strings(v: PbValue | undefined): string[] | undefined {
  if (!v) return undefined;
  if (typeof v.stringValue === 'string') {
    // Tolerate the comma-separated form some proxies use for endpoint lists.
    return v.stringValue.split(',').map((s) => s.trim()).filter(Boolean);
  }
  if (v.listValue && Array.isArray(v.listValue.values)) {
    // A list entry may itself be a comma-separated list, as GIE's reference picker reads it
    // (pkg/lwepp/handlers/request.go splits each entry on commas).
    return v.listValue.values
      .slice(0, MAX_SUBSET)
      .flatMap((x) => (typeof x?.stringValue === 'string' ? x.stringValue.split(',').map((s) => s.trim()).filter(Boolean) : []));
  }
  return undefined;
}

/** The proxy's subset hint: the endpoints it allows, or undefined when it sent none. */
export function subsetHint(md: MetadataContext | null | undefined): string[] | undefined {
  return strings(field(md, SUBSET_NAMESPACE, SUBSET_KEY));
}

/** The endpoint the proxy reports as having served the request, if it reported one. */
export function servedEndpoint(md: MetadataContext | null | undefined): string | undefined {
  // The first valid entry is the one that served when a list is reported.
  return strings(field(md, LB_NAMESPACE, SERVED_KEY))?.[0];
}

/** Worker ids whose address is in `endpoints`. */
export function workersAt(workers: readonly WorkerConfig[], endpoints: readonly string[]): Set<string> {
  // Config addresses are canonical (config/schema.ts); the proxy's may be spelled otherwise. An
  // entry without a port allows every port of that IP, as GIE's reference picker and llm-d's
  // scheduler read it (the spec's form is ip:port; they match on the IP).
  const wanted = new Set(endpoints.map(canonicalEndpoint));
  const hosts = new Set(endpoints.flatMap((e) => { const ip = bareIp(e); return ip === undefined ? [] : [ip]; }));
  return new Set(
    workers.filter((w) => w.address !== undefined && (wanted.has(w.address) || (hosts.size > 0 && hosts.has(hostOf(w.address))))).map((w) => w.id),
  );
}

/** `e` as a canonical host when it is an IP with no port (`10.0.0.1`, `fd00::1`, `[fd00::1]`), else undefined. */
function bareIp(e: string): string | undefined {
  const inner = e.startsWith('[') && e.endsWith(']') ? e.slice(1, -1) : e;
  const v = isIP(inner);
  if (v === 0) return undefined;
  return hostOf(canonicalEndpoint(v === 6 ? `[${inner}]:1` : `${inner}:1`));
}

/** The host part of a canonical ip:port (`[fd00::1]` for IPv6). */
function hostOf(address: string): string {
  return address.slice(0, address.lastIndexOf(':'));
}

/** The worker configured at `endpoint`, if any. */
export function workerAt(workers: readonly WorkerConfig[], endpoint: string): WorkerConfig | undefined {
  const exact = workers.find((w) => w.address === endpoint);
  if (exact) return exact;
  const canonical = canonicalEndpoint(endpoint);
  return canonical === endpoint ? undefined : workers.find((w) => w.address === canonical);
}
