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
  const out: string[] = [];
  // Tolerate the comma-separated form some proxies use for endpoint lists.
  if (typeof v.stringValue === 'string') return pushEntries(out, v.stringValue);
  if (v.listValue && Array.isArray(v.listValue.values)) {
    // A list entry may itself be a comma-separated list, as GIE's reference picker reads it
    // (pkg/lwepp/handlers/request.go splits each entry on commas).
    for (const x of v.listValue.values.slice(0, MAX_SUBSET)) if (typeof x?.stringValue === 'string') pushEntries(out, x.stringValue);
    return out;
  }
  return undefined;
}

/** The non-empty, trimmed entries of a comma-separated string, appended to `out`. */
function pushEntries(out: string[], s: string): string[] {
  for (const part of s.split(',')) {
    const t = part.trim();
    if (t) out.push(t);
  }
  return out;
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

/**
 * The workers a subset hint names. Config addresses are canonical (config/schema.ts); an entry
 * spelled otherwise is looked up in that form too, and only when it does not match as written (the
 * common case costs one map lookup). An entry without a port allows every port of that IP, as GIE's
 * reference picker and llm-d's scheduler read it (the spec's form is ip:port; they match on the IP).
 */
export function workersAt(workers: readonly WorkerConfig[], endpoints: readonly string[]): Set<string> {
  const index = addressIndex(workers);
  const out = new Set<string>();
  for (const e of endpoints) {
    const w = lookup(index, e);
    if (w) {
      out.add(w.id);
      continue;
    }
    const ip = bareIp(e);
    if (ip !== undefined) for (const id of index.byHost.get(ip) ?? []) out.add(id);
  }
  return out;
}

/** The worker configured at `endpoint`, if any. */
export function workerAt(workers: readonly WorkerConfig[], endpoint: string): WorkerConfig | undefined {
  return lookup(addressIndex(workers), endpoint);
}

interface AddressIndex {
  byAddress: Map<string, WorkerConfig>;
  /** Canonical host (`10.0.0.1`, `[fd00::1]`) → the ids of the workers on it. */
  byHost: Map<string, string[]>;
}

/** Built once per worker list (a config's lists live as long as the config). */
const indexes = new WeakMap<readonly WorkerConfig[], AddressIndex>();

function addressIndex(workers: readonly WorkerConfig[]): AddressIndex {
  let index = indexes.get(workers);
  if (!index) {
    index = { byAddress: new Map(), byHost: new Map() };
    for (const w of workers) {
      if (w.address === undefined) continue;
      index.byAddress.set(w.address, w);
      const host = hostOf(w.address);
      index.byHost.set(host, [...(index.byHost.get(host) ?? []), w.id]);
    }
    indexes.set(workers, index);
  }
  return index;
}

function lookup(index: AddressIndex, endpoint: string): WorkerConfig | undefined {
  return index.byAddress.get(endpoint) ?? index.byAddress.get(canonicalEndpoint(endpoint));
}

/** `e` as a canonical host when it is an IP with no port (`10.0.0.1`, `fd00::1`, `[fd00::1]`), else undefined. */
function bareIp(e: string): string | undefined {
  const inner = e.startsWith('[') && e.endsWith(']') ? e.slice(1, -1) : e;
  const v = isIP(inner);
  if (v === 0) return undefined;
  // canonicalEndpoint takes a host without a port too (isIP has vouched for it).
  return canonicalEndpoint(v === 6 ? `[${inner}]` : inner);
}

/** The host part of a canonical ip:port (`[fd00::1]` for IPv6). */
function hostOf(address: string): string {
  return address.slice(0, address.lastIndexOf(':'));
}
