/**
 * kvgate's one error type. Every failure that can reach a caller carries a code from the closed
 * set below; `src/extproc/status-map.ts` is the single place that turns a code into what Envoy
 * receives (an HTTP immediate response or a gRPC stream status).
 */

export const ERROR_CODES = [
  /** The request body is not what its path promises (malformed JSON when rejection is configured). */
  'bad_request',
  /** The request body is larger than `limits.max_body_bytes`. */
  'body_too_large',
  /**
   * The body names a model that no pool serves (or not the pool its route is pinned to): answered
   * before any worker is chosen, never sent to a worker of another model.
   */
  'model_not_found',
  /**
   * A Responses request continues a stored response (`previous_response_id`) whose worker is no
   * longer in the request's pool: no worker can serve it, so none is asked.
   */
  'previous_response_not_found',
  /**
   * The worker holding a continued response is down or draining: it is the only one that can
   * serve the request, so the client is told to retry rather than sent where it would fail.
   */
  'previous_response_unavailable',
  /** Every eligible worker is at its in-flight limit: shed now instead of queueing. */
  'overloaded',
  /** No worker can take requests at all (all down or draining). */
  'no_healthy_workers',
  /** Envoy sent ext_proc messages in an order the protocol does not allow. */
  'protocol_violation',
  /** The shared store did not answer in time or is unreachable; callers fall back to local state. */
  'store_unavailable',
  /** The configuration file or a flag is invalid. */
  'invalid_config',
  /** A bug: anything else. */
  'internal',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export class KvgateError extends Error {
  override readonly name = 'KvgateError';
  readonly code: ErrorCode;
  /** Extra, loggable facts (never prompt text or raw session ids). */
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; details?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.details = options?.details ?? {};
  }

  /** Wraps anything thrown into a KvgateError, keeping it as the cause. */
  static from(err: unknown, fallback: ErrorCode = 'internal'): KvgateError {
    if (err instanceof KvgateError) return err;
    const message = err instanceof Error ? err.message : String(err);
    return new KvgateError(fallback, message, { cause: err });
  }
}
