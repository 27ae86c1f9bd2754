/**
 * A request's dynamic metadata (Envoy's StreamInfo filter_metadata: namespace → Struct), and the
 * ext_proc filter's two doors into it (ext_proc.cc, metadata_options):
 *  - every ProcessingRequest carries `metadata_context.filter_metadata` with the namespaces listed
 *    in `metadata_options.forwarding_namespaces.untyped` (none by default);
 *  - a reply's `dynamic_metadata` (a Struct whose top-level keys are namespaces) is written only
 *    for namespaces in `metadata_options.receiving_namespaces.untyped`, and only values that are
 *    Structs; everything else is dropped. A namespace's keys merge into what is there.
 * Values are plain JS here and google.protobuf.Struct (proto-loader's object form) on the wire.
 */
import type { MetadataContext, PbStruct, PbValue } from '../../src/extproc/messages.js';

export type Namespaces = Record<string, Record<string, unknown>>;

export function toPbValue(v: unknown): PbValue {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toPbValue) } };
  if (typeof v === 'object') return { structValue: toPbStruct(v as Record<string, unknown>) };
  throw new Error(`cannot put ${typeof v} in a Struct`);
}

export function toPbStruct(o: Record<string, unknown>): PbStruct {
  return { fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, toPbValue(v)])) };
}

export function fromPbValue(v: PbValue | undefined): unknown {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.listValue) return (v.listValue.values ?? []).map(fromPbValue);
  if (v.structValue) return fromPbStruct(v.structValue);
  return null;
}

export function fromPbStruct(s: PbStruct | null | undefined): Record<string, unknown> {
  return Object.fromEntries(Object.entries(s?.fields ?? {}).map(([k, v]) => [k, fromPbValue(v)]));
}

export class DynamicMetadata {
  private readonly namespaces = new Map<string, Record<string, unknown>>();

  constructor(initial: Namespaces = {}) {
    for (const [ns, v] of Object.entries(initial)) this.merge(ns, v);
  }

  has(namespace: string): boolean {
    return this.namespaces.has(namespace);
  }

  merge(namespace: string, values: Record<string, unknown>): void {
    this.namespaces.set(namespace, { ...this.namespaces.get(namespace), ...values });
  }

  /** metadata_context for the namespaces ext_proc forwards. */
  context(forwarding: readonly string[]): MetadataContext {
    const filter_metadata: Record<string, PbStruct> = {};
    for (const ns of forwarding) {
      const v = this.namespaces.get(ns);
      if (v) filter_metadata[ns] = toPbStruct(v);
    }
    return { filter_metadata };
  }

  /** Applies a reply's dynamic_metadata; returns the namespaces dropped as not receivable. */
  receive(dm: PbStruct | null | undefined, receiving: readonly string[]): string[] {
    const dropped: string[] = [];
    for (const [ns, v] of Object.entries(dm?.fields ?? {})) {
      if (!receiving.includes(ns) || !v.structValue) {
        dropped.push(ns);
        continue;
      }
      this.merge(ns, fromPbStruct(v.structValue));
    }
    return dropped;
  }

  toJSON(): Namespaces {
    return Object.fromEntries(this.namespaces);
  }
}
