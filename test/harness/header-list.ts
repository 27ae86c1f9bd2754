/**
 * An ordered, multi-valued header map with byte values, shaped like Envoy's HeaderMapImpl:
 * lower-case keys, values as raw bytes (Envoy forwards non-UTF-8 values untouched in
 * `raw_value`), and the two different "set" semantics Envoy uses:
 *  - setCopy: replace the FIRST occurrence (others stay) or add — what ext_proc uses for
 *    `append: false` (MutationUtils::applyHeaderMutations → headers.setCopy);
 *  - replaceAll: remove every occurrence, then add — what setReferenceKey does (header_mutation's
 *    OVERWRITE_IF_EXISTS_OR_ADD).
 */
import type { HeaderMapInput as HeaderMap } from '../../src/extproc/messages.js';

export type HeaderInputValue = string | Buffer;
export type HeaderInput = Record<string, HeaderInputValue | HeaderInputValue[]>;

function toBytes(v: HeaderInputValue): Buffer {
  return Buffer.isBuffer(v) ? Buffer.from(v) : Buffer.from(v, 'utf8');
}

export class HeaderList {
  private readonly items: Array<[string, Buffer]> = [];

  static from(input: HeaderInput | undefined): HeaderList {
    const list = new HeaderList();
    for (const [k, v] of Object.entries(input ?? {})) {
      for (const one of Array.isArray(v) ? v : [v]) list.add(k, one);
    }
    return list;
  }

  /** Reads a proto HeaderMap the way Envoy does: `raw_value` only (`value` is ignored). */
  static fromProto(map: HeaderMap | null | undefined): HeaderList {
    const list = new HeaderList();
    for (const h of map?.headers ?? []) list.add(h.key ?? '', Buffer.from(h.raw_value ?? Buffer.alloc(0)));
    return list;
  }

  clone(): HeaderList {
    const c = new HeaderList();
    for (const [k, v] of this.items) c.items.push([k, Buffer.from(v)]);
    return c;
  }

  get size(): number {
    return this.items.length;
  }

  /** HeaderMapImpl::byteSize (source/common/http/header_map_impl.cc): the bytes of every name and value, pseudo-headers included. */
  get byteSize(): number {
    let n = 0;
    for (const [k, v] of this.items) n += Buffer.byteLength(k) + v.length;
    return n;
  }

  has(name: string): boolean {
    const key = name.toLowerCase();
    return this.items.some(([k]) => k === key);
  }

  /** First value as UTF-8, or undefined when absent. */
  get(name: string): string | undefined {
    return this.getRaw(name)[0]?.toString('utf8');
  }

  getAll(name: string): string[] {
    return this.getRaw(name).map((b) => b.toString('utf8'));
  }

  getRaw(name: string): Buffer[] {
    const key = name.toLowerCase();
    return this.items.filter(([k]) => k === key).map(([, v]) => v);
  }

  /** addCopy: one more value, after the existing ones. */
  add(name: string, value: HeaderInputValue): void {
    this.items.push([name.toLowerCase(), toBytes(value)]);
  }

  /**
   * setCopy: drop every occurrence, then add one at the end (header_map_impl.cc
   * `HeaderMapImpl::setCopy`: `remove(key); addCopy(key, value);` since the runtime guard
   * `http_set_copy_replace_all_headers` and the first-occurrence path were removed).
   */
  setCopy(name: string, value: HeaderInputValue): void {
    this.replaceAll(name, value);
  }

  /** setReferenceKey: drop every occurrence, then add one. */
  replaceAll(name: string, value: HeaderInputValue): void {
    this.remove(name);
    this.add(name, value);
  }

  /** Removes every occurrence; returns how many were removed. */
  remove(name: string): number {
    const key = name.toLowerCase();
    let removed = 0;
    for (let i = this.items.length - 1; i >= 0; i--) {
      if (this.items[i]?.[0] === key) {
        this.items.splice(i, 1);
        removed++;
      }
    }
    return removed;
  }

  removeIf(pred: (name: string) => boolean): void {
    for (let i = this.items.length - 1; i >= 0; i--) {
      const item = this.items[i];
      if (item && pred(item[0])) this.items.splice(i, 1);
    }
  }

  entries(): Array<[string, Buffer]> {
    return this.items.map(([k, v]) => [k, Buffer.from(v)]);
  }

  /** Every value as UTF-8, grouped by name (insertion order of first occurrence). */
  toRecord(): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    for (const [k, v] of this.items) (out[k] ??= []).push(v.toString('utf8'));
    return out;
  }

  /** Envoy's headersToProto: every header, key lower-case, value in `raw_value` only. */
  toProto(): HeaderMap {
    return { headers: this.items.map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) };
  }
}
