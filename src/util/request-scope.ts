/**
 * The request a call is made for, handed down explicitly from the transport to the gate and the
 * store: the ids that tie a log line to the request's trace, and the tally of its time in the
 * store. The telemetry layer implements it (src/telemetry/request-telemetry.ts); lower layers only
 * read `logIds` when they write a line about the request and add to `storeUsage` when they time a
 * store call for it.
 *
 * Explicit rather than found through an AsyncLocalStorage context: on Node 20 and 22 an active
 * AsyncLocalStorage runs async hooks on every promise the process makes (about 10 µs of a
 * 2 KB request's ~150 µs on the gate's thread), and a request's context is needed in a handful of
 * places only.
 */
import type { Logger } from 'pino';

/** What one request spent in the store: added to by a store wrapper that times calls. */
export interface StoreUsage {
  seconds: number;
  calls: number;
  errors: Array<{ operation: string; message: string }>;
}

export interface RequestScope {
  /**
   * Bindings that tie a log line to the request's trace (`trace_id`, `span_id`), or undefined
   * while it has none. Read only when a line is written: most requests write none.
   */
  readonly logIds: Readonly<Record<string, string>> | undefined;
  /** What this request spent in the store so far. */
  readonly storeUsage: StoreUsage;
}

export function newStoreUsage(): StoreUsage {
  return { seconds: 0, calls: 0, errors: [] };
}

/**
 * `logger` for a line about `scope`'s request: a child carrying the request's trace ids, or
 * `logger` itself when there is no request or it has no trace. Call it where the line is written,
 * not ahead: a child logger is an object and a serialised string per call. A line at a level that
 * is usually off (debug) goes through `debugLogger` instead.
 */
export function requestLogger(logger: Logger, scope: RequestScope | undefined): Logger {
  const ids = scope?.logIds;
  return ids === undefined ? logger : logger.child(ids);
}

/**
 * `requestLogger` for a debug line, or undefined when debug is off: written
 * `debugLogger(logger, scope)?.debug({...}, msg)`, so that with debug off (the usual case) neither
 * a child logger nor the line's fields are built.
 */
export function debugLogger(logger: Logger, scope: RequestScope | undefined): Logger | undefined {
  return logger.isLevelEnabled('debug') ? requestLogger(logger, scope) : undefined;
}
