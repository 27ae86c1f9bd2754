/**
 * One ext_proc stream = one HTTP request. An explicit state machine per direction (Envoy may
 * interleave the request and response directions, so they are tracked apart):
 *
 *   request:  start → headers → body* → trailers → done
 *   response: start → headers → body* → trailers → done
 *
 * Every message gets exactly one reply of the matching type, in arrival order (messages are handled
 * one at a time through a promise chain, so a slow decision never lets a later reply overtake it).
 * When the decision is made depends on `routing.request_body_mode`: with `buffered` it waits for
 * the body (Envoy holds the headers until the body reply, so the routing header set there still
 * applies); otherwise it decides on the request headers.
 *
 * The in-flight lease is released exactly once: at the response headers (or the response's end,
 * per `routing.release_on`), or when the stream ends, is cancelled or fails, whichever is first.
 *
 * The route's knobs come from the call's gRPC metadata (read once, at the start) and from the
 * `kvgate` namespace of metadata_context (the latest request-path message that carried it); they
 * are read when the decision is made. A stream keeps the config it started with for its own
 * protocol settings, so a config reload never changes the rules halfway through a request.
 */
import { status as GrpcStatus, type ServerDuplexStream } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { DEFAULTS } from '../config/defaults.js';
import { readKnobs, type KnobProblem } from '../config/knobs.js';
import type { Config } from '../config/schema.js';
import { KvgateError } from '../errors.js';
import type { Gate, GateResult } from '../gate/gate.js';
import type { RequestInfo } from '../request/request.js';
import type { Lease } from '../state/store.js';
import { headerMapToMap, requestInfoFromHeaders } from './headers.js';
import { forwardedNamespace, metadataEntries } from './knob-source.js';
import type { CommonResponse, ProcessingRequest, ProcessingResponse } from './messages.js';
import { CONTINUE, continueStripping, immediate, routeTo } from './responses.js';
import { grpcStatusFor, httpAnswerFor } from './status-map.js';

type Phase = 'start' | 'headers' | 'body' | 'trailers' | 'done';
type Call = ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

export interface StreamHooks {
  /** Called once when the stream is over, however it ended. */
  onClose(): void;
  /** Called once per routing decision or rejection (for metrics and tests). */
  onResult?(result: GateResult): void;
  /** Knobs from Envoy that were unknown or invalid and were ignored (the caller logs them). */
  onKnobProblems?(problems: readonly KnobProblem[]): void;
}

export class ExtProcStream {
  private reqPhase: Phase = 'start';
  private respPhase: Phase = 'start';
  private request: RequestInfo | undefined;
  private decided = false;
  private lease: Lease | undefined;
  private queue: Promise<void> = Promise.resolve();
  private finished = false;
  /** After an immediate response Envoy stops processing; anything later is ignored. */
  private answeredImmediately = false;
  /** When the last message arrived (ms since epoch), for the server's idle sweep. */
  lastActivity = Date.now();
  private readonly config: Config;
  /** The route layer of knobs: the call's gRPC metadata. */
  private readonly grpcMetadata: Array<[string, string]>;
  /** The host layer of knobs: the `kvgate` namespace of metadata_context. */
  private knobContext: Record<string, unknown> | undefined;

  constructor(
    private readonly call: Call,
    private readonly gate: Gate,
    private readonly logger: Logger,
    private readonly hooks: StreamHooks,
  ) {
    this.config = gate.currentConfig;
    this.grpcMetadata = metadataEntries(call.metadata);
    call.on('data', (msg: ProcessingRequest) => {
      this.lastActivity = Date.now();
      this.queue = this.queue.then(() => this.handle(msg)).catch((err: unknown) => this.fail(err));
    });
    // Envoy half-closes when processing is complete; answer with OK once our replies are out.
    call.on('end', () => {
      this.queue = this.queue.then(() => this.finish(true));
    });
    call.on('cancelled', () => this.finish(false));
    call.on('error', () => this.finish(false));
    call.on('close', () => this.finish(false));
  }

  private async handle(msg: ProcessingRequest): Promise<void> {
    if (this.finished || this.answeredImmediately) return;
    if (msg.request === 'request_headers' || msg.request === 'request_body') {
      this.knobContext = forwardedNamespace(msg.metadata_context, DEFAULTS.knobNamespace) ?? this.knobContext;
    }
    switch (msg.request) {
      case 'request_headers':
        return this.onRequestHeaders(msg);
      case 'request_body':
        return this.onRequestBody(msg);
      case 'request_trailers':
        this.advance('request', 'trailers');
        return this.reply({ request_trailers: {} });
      case 'response_headers':
        this.advance('response', 'headers');
        if (this.config.routing.release_on === 'response_headers' || msg.response_headers?.end_of_stream) this.releaseLease();
        return this.reply({ response_headers: { response: CONTINUE } });
      case 'response_body':
        this.advance('response', 'body');
        if (msg.response_body?.end_of_stream) this.releaseLease();
        return this.reply({ response_body: { response: CONTINUE } });
      case 'response_trailers':
        this.advance('response', 'trailers');
        this.releaseLease();
        return this.reply({ response_trailers: {} });
      default:
        throw new KvgateError('protocol_violation', 'ProcessingRequest carries no request phase');
    }
  }

  private async onRequestHeaders(msg: ProcessingRequest): Promise<void> {
    this.advance('request', 'headers');
    const headers = headerMapToMap(msg.request_headers?.headers);
    this.request = requestInfoFromHeaders(headers);
    const routingHeader = this.config.routing.header;
    const noBody = msg.request_headers?.end_of_stream === true;
    if (noBody || this.config.routing.request_body_mode !== 'buffered') {
      return this.decideAndReply('request_headers');
    }
    // Wait for the body; meanwhile a client-sent routing header is dropped, never forwarded.
    return this.reply({ request_headers: { response: continueStripping(routingHeader, headers.has(routingHeader)) } });
  }

  private async onRequestBody(msg: ProcessingRequest): Promise<void> {
    if (this.reqPhase === 'trailers' || this.reqPhase === 'done') {
      throw new KvgateError('protocol_violation', `request body after request ${this.reqPhase}`);
    }
    this.advance('request', 'body');
    if (this.decided) return this.reply({ request_body: { response: CONTINUE } });
    // BUFFERED sends the whole body in one message (end_of_stream is false only when trailers
    // follow), so the first body message is the one to decide on.
    const body = msg.request_body?.body ?? Buffer.alloc(0);
    this.request = { ...(this.request ?? requestInfoFromHeaders(new Map())), body: Buffer.from(body) };
    return this.decideAndReply('request_body');
  }

  /** Decides once, and answers the current message with the routing mutation or an immediate response. */
  private async decideAndReply(phase: 'request_headers' | 'request_body'): Promise<void> {
    this.decided = true;
    const request = this.request ?? requestInfoFromHeaders(new Map());
    const reading = readKnobs({ metadata: this.grpcMetadata, context: this.knobContext });
    if (reading.problems.length > 0) this.hooks.onKnobProblems?.(reading.problems);
    if (Object.keys(reading.from).length > 0) this.logger.debug({ knobs: reading.knobs, from: reading.from }, 'route knobs');
    let result: GateResult;
    try {
      result = await this.gate.route(request, reading.knobs);
    } catch (err) {
      // A bug in deciding must not fail the request: forward it without a routing header, so the
      // fallback route serves it, and say so loudly.
      this.logger.error({ err: KvgateError.from(err).message }, 'routing failed; forwarding without affinity');
      return this.replyCommon(phase, continueStripping(this.config.routing.header, request.headers.has(this.config.routing.header)));
    }
    this.hooks.onResult?.(result);
    if (result.kind === 'route') {
      // A stream that ended while the store answered must not keep the lease.
      if (this.finished) {
        void this.gate.release(result.lease);
        return;
      }
      this.lease = result.lease;
      return this.replyCommon(phase, routeTo(this.config.routing.header, result.cluster));
    }
    const answer = httpAnswerFor(result.error.code, result.routing ?? this.config.routing);
    if (!answer) {
      this.logger.error({ code: result.error.code, err: result.error.message }, 'unexpected rejection; forwarding without affinity');
      return this.replyCommon(phase, continueStripping(this.config.routing.header, request.headers.has(this.config.routing.header)));
    }
    this.logger.debug({ status: answer.status, code: result.error.code, key_hash: result.key?.hash }, 'answered immediately');
    this.answeredImmediately = true;
    return this.reply(
      immediate(answer.status, { message: result.error.message, type: answer.type, code: result.error.code }, `kvgate_${result.error.code}`, answer.retryAfterS),
    );
  }

  private replyCommon(phase: 'request_headers' | 'request_body', response: CommonResponse): void {
    this.reply(phase === 'request_headers' ? { request_headers: { response } } : { request_body: { response } });
  }

  private reply(msg: ProcessingResponse): void {
    if (this.finished || !this.call.writable) return;
    try {
      this.call.write(msg);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'ext_proc write failed');
    }
  }

  /** Moves a direction forward; going backwards or repeating a phase is a protocol violation. */
  private advance(direction: 'request' | 'response', to: Phase): void {
    const order: Phase[] = ['start', 'headers', 'body', 'trailers', 'done'];
    const current = direction === 'request' ? this.reqPhase : this.respPhase;
    const ok = order.indexOf(to) > order.indexOf(current) || (to === 'body' && current === 'body');
    if (!ok) throw new KvgateError('protocol_violation', `${direction} ${to} after ${direction} ${current}`);
    if (direction === 'request') this.reqPhase = to;
    else this.respPhase = to;
  }

  private releaseLease(): void {
    const lease = this.lease;
    this.lease = undefined;
    if (lease) void this.gate.release(lease);
  }

  /**
   * Ends a stream that went quiet for too long: its peer is gone or stuck. A peer that is still
   * there sees DEADLINE_EXCEEDED and applies its failure mode.
   */
  expire(): void {
    if (this.finished) return;
    this.fail(new KvgateError('protocol_violation', 'ext_proc stream idle past limits.stream_idle_s'), 'deadline');
  }

  private fail(err: unknown, kind: 'error' | 'deadline' = 'error'): void {
    const e = KvgateError.from(err);
    this.logger.warn({ code: e.code, err: e.message }, 'ending ext_proc stream');
    this.releaseLease();
    if (!this.finished) {
      this.finished = true;
      try {
        this.call.emit('error', { code: kind === 'deadline' ? GrpcStatus.DEADLINE_EXCEEDED : grpcStatusFor(e), details: e.message });
      } catch {
        // The call may already be gone; nothing is left to tell.
      }
      this.hooks.onClose();
    }
  }

  private finish(graceful: boolean): void {
    this.releaseLease();
    if (this.finished) return;
    this.finished = true;
    if (graceful) {
      try {
        this.call.end();
      } catch {
        // Already closed by the peer.
      }
    }
    this.hooks.onClose();
  }
}
