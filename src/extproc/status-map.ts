/**
 * The one place where kvgate's error codes become what Envoy receives. Request-level problems
 * become HTTP immediate responses (the client sees them); protocol problems end the ext_proc
 * stream with a gRPC status (Envoy applies its failure mode). Nothing else maps errors.
 */
import { status as GrpcStatus } from '@grpc/grpc-js';
import type { Config } from '../config/schema.js';
import type { ErrorCode, KvgateError } from '../errors.js';

export interface HttpAnswer {
  status: number;
  retryAfterS?: number;
  /** OpenAI-style error type, so OpenAI clients surface the message. */
  type: string;
}

/**
 * HTTP answer for a request-level error, or undefined for codes that must never reach a client
 * (store trouble and bugs: the gate routes without affinity instead).
 */
export function httpAnswerFor(code: ErrorCode, routing: Pick<Config['routing'], 'shed_status' | 'retry_after_s'>): HttpAnswer | undefined {
  switch (code) {
    case 'bad_request':
      return { status: 400, type: 'invalid_request_error' };
    // 404, as OpenAI and vLLM answer an unknown model, so OpenAI clients raise NotFoundError with
    // the message; 400 would read as a malformed request, and the request is well formed.
    case 'model_not_found':
      return { status: 404, type: 'invalid_request_error' };
    // What an engine answers for a stored response it does not hold (vLLM: 404), without
    // spending a worker's slot to hear it.
    case 'previous_response_not_found':
      return { status: 404, type: 'invalid_request_error' };
    // The one worker that holds the response may come back (a missed scrape, an operator's
    // drain); any other worker would fail the request, so: retry later.
    case 'previous_response_unavailable':
      return { status: 503, retryAfterS: routing.retry_after_s, type: 'service_unavailable' };
    case 'body_too_large':
      return { status: 413, type: 'invalid_request_error' };
    case 'overloaded':
      return { status: routing.shed_status, retryAfterS: routing.retry_after_s, type: 'overloaded' };
    case 'no_healthy_workers':
      return { status: 503, retryAfterS: routing.retry_after_s, type: 'service_unavailable' };
    case 'protocol_violation':
    case 'store_unavailable':
    case 'invalid_config':
    case 'internal':
      return undefined;
  }
}

/** gRPC status that ends an ext_proc stream for a protocol-level error. */
export function grpcStatusFor(err: KvgateError): GrpcStatus {
  return err.code === 'protocol_violation' ? GrpcStatus.INVALID_ARGUMENT : GrpcStatus.INTERNAL;
}
