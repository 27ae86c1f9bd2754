/**
 * The set_metadata filter as the harness imitates it, on the request's dynamic metadata
 * (dynamic-metadata.ts keeps that metadata and builds metadata_context from it).
 */
import type { DynamicMetadata } from './dynamic-metadata.js';
import type { SetMetadataEntry } from './envoy-config.js';

/**
 * The set_metadata filter (untyped): a namespace not yet present is set; one already present is
 * merged into, key by key (Struct MergeFrom replaces map entries), only with allow_overwrite.
 */
export function applySetMetadata(md: DynamicMetadata, entries: readonly SetMetadataEntry[]): void {
  for (const e of entries) {
    if (!md.has(e.namespace) || e.allowOverwrite) md.merge(e.namespace, structuredClone(e.value));
  }
}
