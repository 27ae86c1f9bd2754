import type { JoinedBody } from './body.js';

/**
 * What kvgate knows about one HTTP request, free of any proxy protocol. The ext_proc transport
 * fills it from Envoy's messages; the simulator and benchmarks build it directly.
 */
export interface RequestInfo {
  method: string;
  /** The path without its query string. */
  path: string;
  /** Lower-case names; the first value of a repeated header (what Envoy's routing uses too). */
  headers: ReadonlyMap<string, string>;
  /**
   * The whole body when the gate buffers it; undefined when it decides on headers alone. Its
   * bytes, or (full duplex) its chunks joined and parsed at once: `length` is its size in bytes either way.
   */
  body?: Buffer | JoinedBody;
  /**
   * The body's size in bytes when it is known but was not read: a body Envoy cut at its buffer
   * (BUFFERED_PARTIAL), sized by its content-length. The load terms count its prompt by it.
   */
  unreadBodyBytes?: number;
}

/** Strips a query string and fragment from a `:path` value. */
export function pathOnly(rawPath: string): string {
  const cut = rawPath.search(/[?#]/);
  return cut === -1 ? rawPath : rawPath.slice(0, cut);
}
