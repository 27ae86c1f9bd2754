/**
 * Dynamic metadata as Envoy keeps it per request (namespace → Struct), and its encoding as
 * google.protobuf.Struct for metadata_context. protobufjs ships its own well-known types, so the
 * Value fields are camelCase (stringValue, ...) even though the rest of the messages keep proto case.
 */
import type { PbStruct, PbValue } from '../../src/extproc/messages.js';
import type { SetMetadataEntry } from './envoy-config.js';

export type DynamicMetadata = Map<string, Record<string, unknown>>;

export function toPbStruct(o: Record<string, unknown>): PbStruct {
  const fields: Record<string, PbValue> = {};
  for (const [k, v] of Object.entries(o)) fields[k] = toPbValue(v);
  return { fields };
}

function toPbValue(v: unknown): PbValue {
  if (v === null || v === undefined) return { nullValue: 0 };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toPbValue) } };
  if (typeof v === 'object') return { structValue: toPbStruct(v as Record<string, unknown>) };
  return { stringValue: String(v) };
}

/**
 * The set_metadata filter (untyped): a namespace not yet present is set; one already present is
 * merged into, key by key (Struct MergeFrom replaces map entries), only with allow_overwrite.
 */
export function applySetMetadata(md: DynamicMetadata, entries: readonly SetMetadataEntry[]): void {
  for (const e of entries) {
    const existing = md.get(e.namespace);
    if (!existing) md.set(e.namespace, structuredClone(e.value));
    else if (e.allowOverwrite) md.set(e.namespace, { ...existing, ...structuredClone(e.value) });
  }
}

/**
 * metadata_context as Filter::addDynamicMetadata builds it: each forwarding namespace present in
 * the request's dynamic metadata (the connection fallback is not imitated).
 */
export function metadataContext(md: DynamicMetadata, namespaces: readonly string[]): { filter_metadata: Record<string, PbStruct> } {
  const filter_metadata: Record<string, PbStruct> = {};
  for (const ns of namespaces) {
    const v = md.get(ns);
    if (v) filter_metadata[ns] = toPbStruct(v);
  }
  return { filter_metadata };
}
