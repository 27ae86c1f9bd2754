/**
 * Where per-route knobs sit in Envoy's ext_proc call, taken out as plain values; what they mean
 * and whether they are valid is src/config/knobs.ts's business.
 *
 *  - gRPC initial metadata of the `Process` call: Envoy's `grpc_service.initial_metadata` with
 *    `ExtProcPerRoute.overrides.grpc_initial_metadata` of the virtual host and the route merged
 *    over it by key (reference: envoy-ext-proc.md §3.6, §3.7);
 *  - `metadata_context.filter_metadata[<namespace>]` of each ProcessingRequest: the dynamic metadata
 *    namespaces listed in the filter's `metadata_options.forwarding_namespaces.untyped` (§3.5).
 */
import type { Metadata } from '@grpc/grpc-js';
import { isKnobMetadataKey } from '../config/knobs.js';
import type { MetadataContext, PbStruct, PbValue } from './messages.js';

/**
 * The call's text metadata entries that can be knobs (`isKnobMetadataKey`: the only ones
 * readKnobs reads), lower-case keys, first value of each; binary (`-bin`) keys are
 * skipped. Read once per stream, without an entry array per metadata key.
 */
export function knobMetadataEntries(md: Metadata | undefined): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  if (!md) return out;
  const map = md.getMap();
  for (const key of Object.keys(map)) {
    const value = map[key];
    if (typeof value !== 'string') continue;
    const k = key.toLowerCase();
    if (isKnobMetadataKey(k)) out.push([k, value]);
  }
  return out;
}

/** One forwarded namespace of metadata_context as plain values, or undefined when Envoy sent none. */
export function forwardedNamespace(mc: MetadataContext | null | undefined, namespace: string): Record<string, unknown> | undefined {
  const s = mc?.filter_metadata?.[namespace];
  return s ? structToPlain(s) : undefined;
}

/** Struct nesting followed; knobs are flat, deeper values only need to be shown in a log line. */
const MAX_DEPTH = 8;

export function structToPlain(s: PbStruct, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s.fields ?? {})) out[k] = valueToPlain(v, depth + 1);
  return out;
}

function valueToPlain(v: PbValue | null | undefined, depth: number): unknown {
  if (!v || depth > MAX_DEPTH) return null;
  switch (v.kind) {
    case 'stringValue':
      return v.stringValue ?? '';
    case 'numberValue':
      return v.numberValue ?? 0;
    case 'boolValue':
      return v.boolValue ?? false;
    case 'structValue':
      return v.structValue ? structToPlain(v.structValue, depth) : {};
    case 'listValue':
      return (v.listValue?.values ?? []).map((x) => valueToPlain(x, depth + 1));
    default:
      return null;
  }
}
