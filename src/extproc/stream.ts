/**
 * One ext_proc stream = one HTTP request. An explicit state machine per direction (Envoy may
 * interleave the request and response directions, so they are tracked apart):
 *
 *   request:  start → headers → body* → trailers → done
 *   response: start → headers → body* → trailers → done
 *
 * Messages are handled one at a time, in order, so a slow decision never lets a later reply
 * overtake it: a message that arrives while none is being handled is handled at once (most are
 * answered synchronously: no promise at all), later ones wait in a promise chain. When the
 * decision is made depends on the stream's request body mode (./body-mode.ts: what Envoy
 * declares in `protocol_config`, else `routing.request_body_mode`):
 *
 *  - BUFFERED: wait for the body (Envoy holds the headers until the body reply, so the routing
 *    header set there still applies); every message gets exactly one reply of its type;
 *  - STREAMED / NONE: decide on the request headers;
 *  - FULL_DUPLEX_STREAMED: Envoy sends body chunks without waiting. kvgate keeps them (up to
 *    `limits.max_body_bytes`) until the body ends (end_of_stream, or the trailers), then answers
 *    the *headers* with the routing mutation, and sends the body back unchanged as
 *    `streamed_response` chunks, the last with end_of_stream (or none, when trailers end it);
 *    then the trailers. A path whose decision does not read the body is decided on the headers
 *    and its chunks echoed as they come. Envoy runs no message timer in this mode, so kvgate waits
 *    at most DEFAULTS.fullDuplexBodyWaitMs for the body before deciding on the headers alone.
 *    Response body chunks are echoed at once, unchanged.
 *
 * Sheds and bad input are an immediate response in every mode.
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
import type { Gate, GateResult, RouteOptions } from '../gate/gate.js';
import { readsBody, type RoutingKey } from '../request/keys.js';
import type { RequestInfo } from '../request/request.js';
import type { Lease } from '../state/store.js';
import type { RequestTelemetry } from '../telemetry/request-telemetry.js';
import { type BodyModes, bodyModes, declaredLength, modeMismatch, partialBody, streamedChunks, streamedPieces } from './body-mode.js';
import { DESTINATION_HEADER, destinationMetadata, servedEndpoint, subsetHint, workerAt, workersAt } from './endpoint-picker.js';
import { headerMapToMap, requestInfoFromHeaders, spoofedRoutingHeaders } from './headers.js';
import { forwardedNamespace, knobMetadataEntries } from './knob-source.js';
import type { CommonResponse, MetadataContext, PbStruct, ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from './messages.js';
import { CONTINUE_REPLY, continueStripping, immediate, routeReply, routeTo } from './responses.js';
import { grpcStatusFor, httpAnswerFor } from './status-map.js';
import { readableResponse, ResponseIdReader } from './response-id.js';
import { promptApiOf } from '../request/prompt.js';
import { joinAndParse } from '../request/body.js';

type Phase = 'start' | 'headers' | 'body' | 'trailers' | 'done';
type Call = ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

export interface StreamHooks {
  /** Called once when the stream is over, however it ended. */
  onClose(): void;
  /** Called once per routing decision or rejection (for tests). */
  onResult?(result: GateResult): void;
  /** This request's span, metrics and trace ids for its log lines; handed to the gate as the request's scope. */
  telemetry: RequestTelemetry;
  /** Names the stream on its log lines (`stream`). */
  streamId: number;
  /** Knobs from Envoy that were unknown or invalid and were ignored (the caller logs them). */
  onKnobProblems?(problems: readonly KnobProblem[]): void;
  /** Envoy declared body modes that differ from the config's fallback (the caller logs it once). */
  onModeMismatch?(modes: BodyModes, configured: Config['routing']['request_body_mode']): void;
  /** A stream's first message came in observability mode (the caller logs it once a minute). */
  onObservabilityMode?(): void;
  /** FULL_DUPLEX_STREAMED: the longest wait for a request body before deciding on the headers. */
  duplexBodyWaitMs?: number;
}

/** What was chosen, kept for the response path (served-endpoint feedback, stored response ids). */
interface Chosen {
  pool: string;
  worker: string;
  endpoint: string | undefined;
  key: RoutingKey | undefined;
}

export class ExtProcStream {
  private reqPhase: Phase = 'start';
  private respPhase: Phase = 'start';
  private request: RequestInfo | undefined;
  /** Routing output headers the client sent itself: removed from the request, never forwarded. */
  private spoofed: string[] = [];
  private decided = false;
  private lease: Lease | undefined;
  private queue: Promise<void> = Promise.resolve();
  /** Steps started and not yet settled; while 0, the next one runs at once instead of on `queue`. */
  private pending = 0;
  private finished = false;
  /** After an immediate response Envoy stops processing; anything later is ignored. */
  private answeredImmediately = false;
  /** The request path's latest metadata_context (endpoint-picker subset hint). */
  private requestMetadata: MetadataContext | null | undefined;
  private chosen: Chosen | undefined;
  private servedSeen = false;
  /** A Responses API answer whose id is still to be read from its body (see response-id.ts). */
  private responseIds: ResponseIdReader | undefined;
  /** Endpoint-picker mode: the configured worker the proxy reports served the request, when not the chosen one. */
  private servedBy: string | undefined;
  private readonly config: Config;
  /** The route layer of knobs: the call's gRPC metadata (its knob entries: all readKnobs reads). */
  private readonly grpcMetadata: Array<[string, string]>;
  /** Whether that metadata carries any knob (else readKnobs has nothing to read in it). */
  private readonly routeKnobs: boolean;
  /** The host layer of knobs: the `kvgate` namespace of metadata_context. */
  private knobContext: Record<string, unknown> | undefined;
  /**
   * When the last message arrived or was answered (ms since epoch), for the server's idle sweep:
   * Envoy sends its next message only after our reply, so a slow reply is not the peer idling.
   */
  lastActivity = Date.now();
  /** Messages received and not yet answered: while kvgate owes a reply, the peer is not idle. */
  private unanswered = 0;
  /** This stream's body modes, fixed by its first message (read in handle() before anything else). */
  private modes: BodyModes | undefined;
  /** FULL_DUPLEX_STREAMED: the headers reply waits for the body (its chunks are kept here). */
  private duplexWaiting = false;
  private duplexBody: Buffer[] = [];
  private duplexBytes = 0;
  /** The stream is in Envoy's observability mode: its messages are read and not acted on. */
  private observing = false;
  private duplexTimer: NodeJS.Timeout | undefined;
  /** This stream's logger, built at its first line after the request headers (most streams write none); see `logger`. */
  private streamLogger: Logger | undefined;

  /** @param baseLogger the server's logger: this stream's lines go through a child of it. */
  constructor(
    private readonly call: Call,
    private readonly gate: Gate,
    private readonly baseLogger: Logger,
    private readonly hooks: StreamHooks,
  ) {
    this.config = gate.currentConfig;
    this.grpcMetadata = knobMetadataEntries(call.metadata);
    this.routeKnobs = this.grpcMetadata.length > 0;
    // One `answered` callback per stream, not a new closure per message.
    const answered = () => {
      this.unanswered--;
      this.lastActivity = Date.now();
    };
    call.on('data', (msg: ProcessingRequest) => {
      this.lastActivity = Date.now();
      this.unanswered++;
      this.enqueue(() => this.handle(msg), answered);
    });
    // Envoy half-closes when processing is complete; answer with OK once our replies are out.
    call.on('end', () => this.enqueue(() => this.finish(true)));
    call.on('cancelled', () => this.finish(false));
    call.on('error', () => this.finish(false));
    call.on('close', () => this.finish(false));
  }

  /**
   * The logger for a line about this request: the server's, with the stream's id and, once the
   * request headers have begun its span, its trace and span ids (the gate and the store get them
   * through the request's scope, `hooks.telemetry`). Built at the first line; a stream that logs
   * nothing builds none. Kept only once the span has begun (its ids do not change after): a line
   * before the request headers (a stream that fails at once) has no ids to carry yet.
   */
  private get logger(): Logger {
    if (this.streamLogger) return this.streamLogger;
    const ids = this.hooks.telemetry.logIds;
    const logger = this.baseLogger.child({ stream: this.hooks.streamId, ...ids });
    if (this.reqPhase !== 'start') this.streamLogger = logger;
    return logger;
  }

  /**
   * `logger` for a debug line, or undefined when debug is off (written `this.debugLogger?.debug(…)`):
   * as request-scope.ts `debugLogger`, no logger and no fields are built to write nothing.
   */
  private get debugLogger(): Logger | undefined {
    return this.baseLogger.isLevelEnabled('debug') ? this.logger : undefined;
  }

  /**
   * Runs `step` after everything queued before it. With nothing ahead of it, it runs at once, and
   * a step that finishes synchronously (a headers message in BUFFERED mode, the response headers)
   * costs no promise; a step that returns one holds back the steps after it until it settles.
   * Either way a failed step is failed, then `after` runs.
   */
  private enqueue(step: () => Promise<void> | void, after?: () => void): void {
    if (this.pending > 0) {
      this.settle(this.queue.then(step), after);
      return;
    }
    let result: Promise<void> | void;
    try {
      result = step();
    } catch (err) {
      this.failStep(err, after);
      return;
    }
    if (result === undefined) after?.();
    else this.settle(result, after);
  }

  /** Queues the settling of a step that returned a promise (one reaction for both outcomes). */
  private settle(step: Promise<void>, after: (() => void) | undefined): void {
    this.pending++;
    this.queue = step.then(
      () => {
        this.pending--;
        after?.();
      },
      (err: unknown) => {
        this.pending--;
        this.failStep(err, after);
      },
    );
  }

  private failStep(err: unknown, after: (() => void) | undefined): void {
    try {
      this.fail(err);
    } finally {
      after?.();
    }
  }

  private get duplexWaitMs(): number {
    return this.hooks.duplexBodyWaitMs ?? DEFAULTS.fullDuplexBodyWaitMs;
  }

  private get endpointPicker(): boolean {
    return this.config.routing.protocol === 'endpoint_picker';
  }

  /** The header that carries the routing answer (and that a client must never set). */
  private get routingHeader(): string {
    return this.endpointPicker ? DESTINATION_HEADER : this.config.routing.header;
  }

  private handle(msg: ProcessingRequest): Promise<void> | void {
    if (this.finished || this.answeredImmediately) return;
    // observability_mode: Envoy drops every reply (ext_proc.cc onReceiveMessage, "Ignoring received
    // message when observability mode is enabled") and routes on its own, so a decision here would
    // take a lease and count a route for a request that never goes where it says. Nothing is
    // decided and nothing answered; the stream ends when Envoy closes it.
    if (msg.observability_mode) {
      if (!this.observing) {
        this.observing = true;
        this.hooks.onObservabilityMode?.();
      }
      return;
    }
    // Envoy declares its body modes on a stream's first message only.
    const modes = (this.modes ??= this.readModes(msg));
    if (msg.request === 'request_headers' || msg.request === 'request_body') {
      this.knobContext = forwardedNamespace(msg.metadata_context, DEFAULTS.knobNamespace) ?? this.knobContext;
    }
    switch (msg.request) {
      case 'request_headers':
        return this.onRequestHeaders(msg, modes);
      case 'request_body':
        return this.onRequestBody(msg, modes);
      case 'request_trailers':
        return this.onRequestTrailers();
      case 'response_headers':
        this.advance('response', 'headers');
        this.noteServed(msg.metadata_context);
        if (this.config.routing.release_on === 'response_headers' || msg.response_headers?.end_of_stream) this.releaseLease();
        this.watchResponseId(msg);
        return this.reply(CONTINUE_REPLY.response_headers);
      case 'response_body':
        return this.onResponseBody(msg, modes);
      case 'response_trailers':
        this.advance('response', 'trailers');
        this.noteServed(msg.metadata_context);
        this.releaseLease();
        return this.reply({ response_trailers: {} });
      default:
        throw new KvgateError('protocol_violation', 'ProcessingRequest carries no request phase');
    }
  }

  private async onResponseBody(msg: ProcessingRequest, modes: BodyModes): Promise<void> {
    this.advance('response', 'body');
    this.noteServed(msg.metadata_context);
    const eos = msg.response_body?.end_of_stream === true;
    if (eos) this.releaseLease();
    // A stored-response id is recorded before the chunk carrying it goes on, so a client never
    // holds an id kvgate does not know yet; only the chunks up to the id wait (one store write).
    if (this.responseIds) await this.learnResponseId(msg.response_body?.body);
    // Full duplex: tokens must not wait on kvgate beyond that; each chunk goes straight back, unchanged.
    if (modes.responseFullDuplex) return this.reply({ response_body: { response: streamedBody(msg.response_body?.body, eos) } });
    return this.reply(CONTINUE_REPLY.response_body);
  }

  private onRequestHeaders(msg: ProcessingRequest, modes: BodyModes): Promise<void> | void {
    this.advance('request', 'headers');
    const headers = headerMapToMap(msg.request_headers?.headers);
    this.request = requestInfoFromHeaders(headers);
    this.requestMetadata = msg.metadata_context;
    this.hooks.telemetry.begin(headers, this.request);
    this.spoofed = spoofedRoutingHeaders(msg.request_headers?.headers, this.config);
    const noBody = msg.request_headers?.end_of_stream === true;
    const mode = modes.request;
    if (!noBody && mode === 'buffered') {
      // Wait for the body; meanwhile a client-sent routing header is dropped, never forwarded.
      return this.reply(this.spoofed.length === 0 ? CONTINUE_REPLY.request_headers : { request_headers: { response: continueStripping(this.spoofed) } });
    }
    if (!noBody && mode === 'full_duplex' && readsBody(this.request, this.config)) {
      // The headers reply waits for the body; the chunks keep coming meanwhile.
      this.duplexWaiting = true;
      this.duplexTimer = setTimeout(() => this.enqueue(() => this.onDuplexDeadline()), this.duplexWaitMs);
      this.duplexTimer.unref();
      return;
    }
    return this.decideAndReply('request_headers');
  }

  private onRequestBody(msg: ProcessingRequest, modes: BodyModes): Promise<void> | void {
    if (this.reqPhase === 'trailers' || this.reqPhase === 'done') {
      throw new KvgateError('protocol_violation', `request body after request ${this.reqPhase}`);
    }
    this.advance('request', 'body');
    if (msg.metadata_context && Object.keys(msg.metadata_context.filter_metadata ?? {}).length > 0) this.requestMetadata = msg.metadata_context;
    if (modes.request === 'full_duplex') return this.onDuplexBody(msg.request_body?.body ?? Buffer.alloc(0), msg.request_body?.end_of_stream === true);
    if (this.decided) return this.reply(CONTINUE_REPLY.request_body);
    // BUFFERED sends the whole body in one message (end_of_stream is false only when trailers
    // follow), so the first body message is the one to decide on.
    // No copy: grpc-js decodes each message into a buffer of its own and never reuses it.
    const body = msg.request_body?.body ?? Buffer.alloc(0);
    // A body BUFFERED_PARTIAL cut at Envoy's buffer is not the request's body: reading it would
    // find a truncated prompt (malformed, or a 400 under `malformed_body: reject`). The decision
    // is made on the headers, as after full duplex's deadline.
    // A body with end_of_stream is whole (the usual case): content-length is read only otherwise.
    const endOfStream = msg.request_body?.end_of_stream === true;
    const declared = endOfStream ? undefined : declaredLength(this.request?.headers.get('content-length'));
    if (partialBody(body.length, endOfStream, declared, modes)) {
      // At info, as an unusable body is (gate.ts): the prompts past Envoy's buffer lose their
      // body key (the load terms still size them by their content-length); worth seeing, not paging.
      this.logger.info({ bytes: body.length }, "request body cut at Envoy's buffer; routing without a body key");
      const r = this.request;
      if (r && declared !== undefined) this.request = { method: r.method, path: r.path, headers: r.headers, unreadBodyBytes: declared };
      return this.decideAndReply('request_body');
    }
    this.request = withBody(this.request, body);
    return this.decideAndReply('request_body');
  }

  /**
   * FULL_DUPLEX_STREAMED request body chunk: kept while the headers reply waits for the body,
   * else sent straight back.
   */
  private async onDuplexBody(chunk: Buffer, eos: boolean): Promise<void> {
    if (!this.duplexWaiting) {
      this.reply({ request_body: { response: streamedBody(chunk, eos) } });
      return;
    }
    this.duplexBody.push(chunk);
    this.duplexBytes += chunk.length;
    if (this.duplexBytes > this.config.limits.max_body_bytes) {
      const bytes = this.duplexBytes;
      this.endDuplexWait();
      return this.rejectNow(new KvgateError('body_too_large', `request body of at least ${bytes} bytes exceeds limits.max_body_bytes`, {
        details: { bytes, limit: this.config.limits.max_body_bytes },
      }));
    }
    if (eos) return this.decideDuplex('end_of_stream');
  }

  private async onRequestTrailers(): Promise<void> {
    this.advance('request', 'trailers');
    // Full duplex: the trailers end the body.
    if (this.duplexWaiting) await this.decideDuplex('trailers');
    if (this.finished || this.answeredImmediately) return;
    this.reply({ request_trailers: {} });
  }

  /** The body did not end in time: decide on the headers alone and let the body flow. */
  private async onDuplexDeadline(): Promise<void> {
    if (!this.duplexWaiting || this.finished || this.answeredImmediately) return;
    this.debugLogger?.debug({ bytes: this.duplexBytes, wait_ms: this.duplexWaitMs }, 'request body still open; deciding on the headers');
    return this.decideDuplex('deadline');
  }

  /**
   * Full duplex: answers the headers (routing mutation, or an immediate response), then sends the
   * kept body back unchanged. Only a body that ended with end_of_stream ends with it: when the
   * trailers end the body, the trailers reply does (as in Envoy's own full-duplex tests), and
   * after the deadline more chunks are still to come.
   */
  private async decideDuplex(ended: 'end_of_stream' | 'trailers' | 'deadline'): Promise<void> {
    const kept = this.duplexBody;
    this.endDuplexWait();
    // The decision reads the body in one piece: one chunk is that piece already, several are
    // joined and decoded at once (in a reused buffer: the echo below needs no join). After the
    // deadline it is decided on the headers, and nothing is joined.
    const body = ended === 'deadline' ? undefined : kept.length === 1 ? kept[0]! : joinAndParse(kept);
    if (body) this.request = withBody(this.request, body);
    await this.decideAndReply('request_headers');
    if (this.finished || this.answeredImmediately) return;
    // The same bytes go back, in chunks of at most STREAMED_CHUNK_BYTES: the kept chunks cut as
    // their join would be (many small chunks become few; views, copied only where a piece spans
    // two chunks), or, after the deadline, each chunk as it came, as the chunks after it will be.
    const chunks = body ? streamedPieces(kept) : kept.flatMap(streamedChunks);
    const eos = ended === 'end_of_stream';
    if (chunks.length === 0 && eos) chunks.push(Buffer.alloc(0));
    chunks.forEach((c, i) => this.reply({ request_body: { response: streamedBody(c, eos && i === chunks.length - 1) } }));
  }

  private endDuplexWait(): void {
    this.duplexWaiting = false;
    this.duplexBody = [];
    this.duplexBytes = 0;
    if (this.duplexTimer) clearTimeout(this.duplexTimer);
    this.duplexTimer = undefined;
  }

  private readModes(msg: ProcessingRequest): BodyModes {
    const configured = this.config.routing.request_body_mode;
    const modes = bodyModes(msg.protocol_config, this.config.routing);
    if (modeMismatch(modes, configured)) this.hooks.onModeMismatch?.(modes, configured);
    return modes;
  }

  /** Answers with an immediate response for a request-level error found before any decision. */
  private rejectNow(error: KvgateError): void {
    this.decided = true;
    this.hooks.telemetry.deciding();
    const result: GateResult = { kind: 'reject', error, key: undefined };
    this.hooks.onResult?.(result);
    this.answer('request_headers', result, {});
  }

  /** Decides once, and answers the current message with the routing mutation or an immediate response. */
  private async decideAndReply(phase: 'request_headers' | 'request_body'): Promise<void> {
    this.decided = true;
    const t = this.hooks.telemetry;
    t.deciding();
    const request = this.request ?? requestInfoFromHeaders(new Map());
    // No knob in either layer (the common case): nothing to read, validate or log (the gate reads
    // absent knobs as none).
    const options: RouteOptions = this.routeOptions();
    if (this.knobContext !== undefined || this.routeKnobs) {
      const reading = readKnobs({ metadata: this.grpcMetadata, context: this.knobContext });
      if (reading.problems.length > 0) this.hooks.onKnobProblems?.(reading.problems);
      if (Object.keys(reading.from).length > 0) this.debugLogger?.debug({ knobs: reading.knobs, from: reading.from }, 'route knobs');
      options.knobs = reading.knobs;
    }
    let result: GateResult;
    try {
      result = await this.gate.route(request, options);
    } catch (err) {
      // A bug in deciding must not fail the request: forward it without a routing header, so the
      // fallback route serves it, and say so loudly.
      const e = KvgateError.from(err);
      this.logger.error({ err: e.message }, 'routing failed; forwarding without affinity');
      this.replyCommon(phase, continueStripping(this.spoofed));
      t.fallback(e);
      return;
    } finally {
      this.forgetBody();
    }
    this.hooks.onResult?.(result);
    this.answer(phase, result, options.eligible ? { subsetSize: options.eligible.size } : {});
  }

  /**
   * The decision has read the body: let it go. The stream lives as long as the upstream's answer
   * (minutes for a long generation), and only the request's path and headers are read after the
   * decision, so holding the prompt (up to limits.max_body_bytes) that long is memory for nothing.
   */
  private forgetBody(): void {
    const r = this.request;
    if (r?.body === undefined && r?.unreadBodyBytes === undefined) return;
    this.request = { method: r.method, path: r.path, headers: r.headers };
  }

  /** Replies with what the decision (or an early rejection) says. */
  private answer(phase: 'request_headers' | 'request_body', result: GateResult, facts: { subsetSize?: number }): void {
    const t = this.hooks.telemetry;
    const strip = () => continueStripping(this.spoofed);
    if (result.kind === 'route') {
      // A stream that ended while the store answered must not keep the lease.
      if (this.finished) {
        void this.gate.release(result.lease, t);
        t.decided(result, facts);
        return;
      }
      this.lease = result.lease;
      if (!this.endpointPicker) {
        this.chosen = { pool: result.pool, worker: result.worker, endpoint: undefined, key: result.key };
        // The common case, no client-sent routing header to remove: a reply built (and encoded) once per cluster.
        if (this.spoofed.length === 0) this.reply(routeReply(phase, this.routingHeader, result.cluster));
        else this.replyCommon(phase, this.removingSpoofed(routeTo(this.routingHeader, result.cluster)));
        t.decided(result, facts);
        return;
      }
      // The address from the config the gate decided on (a reload may have removed the worker since).
      const endpoint = result.endpoint;
      if (endpoint === undefined) {
        // Config validation makes this impossible in endpoint-picker mode; never send an empty destination.
        this.releaseLease();
        this.logger.error({ worker: result.worker }, 'routed worker has no address; forwarding without a destination');
        this.replyCommon(phase, strip());
        t.fallback(new KvgateError('internal', `worker ${result.worker} has no address`));
        return;
      }
      this.chosen = { pool: result.pool, worker: result.worker, endpoint, key: result.key };
      // The header and the envoy.lb metadata carry the same endpoint: the protocol forbids them to differ.
      this.replyCommon(phase, this.removingSpoofed(routeTo(DESTINATION_HEADER, endpoint)), destinationMetadata(endpoint));
      t.decided(result, { ...facts, endpoint });
      return;
    }
    const answer = httpAnswerFor(result.error.code, result.routing ?? this.config.routing);
    if (!answer) {
      this.logger.error({ code: result.error.code, err: result.error.message }, 'unexpected rejection; forwarding without affinity');
      this.replyCommon(phase, strip());
      t.fallback(result.error);
      return;
    }
    this.debugLogger?.debug({ status: answer.status, code: result.error.code, key_hash: result.key?.hash }, 'answered immediately');
    this.answeredImmediately = true;
    this.reply(
      immediate(
        answer.status,
        { message: result.error.message, type: answer.type, code: result.error.code, ...(result.class !== undefined ? { class: result.class } : {}) },
        `kvgate_${result.error.code}`,
        answer.retryAfterS,
      ),
    );
    t.decided(result, { ...facts, status: answer.status });
  }

  /**
   * The request's scope (its log lines' trace ids, its store usage) and, in endpoint-picker mode,
   * the proxy's subset hint that limits the candidates.
   */
  private routeOptions(): RouteOptions {
    const scope = this.hooks.telemetry;
    if (!this.endpointPicker) return { scope };
    const hint = subsetHint(this.requestMetadata);
    return hint === undefined ? { scope } : { scope, eligible: workersAt(this.gate.currentConfig.workers, hint) };
  }

  /**
   * Endpoint-picker mode: the proxy reports which endpoint served the request (once). When it is
   * not the one kvgate chose (a retry or a proxy-side fallback), that worker now holds the key's
   * KV cache, so the key's affinity follows it.
   */
  private noteServed(md: MetadataContext | null | undefined): void {
    if (!this.endpointPicker || this.servedSeen) return;
    const served = servedEndpoint(md);
    if (served === undefined) return;
    this.servedSeen = true;
    const chosen = this.chosen;
    // As written first (the common case), else by worker: the proxy may spell the address otherwise.
    const worker = chosen?.endpoint === served ? undefined : workerAt(this.gate.currentConfig.workers, served);
    if (chosen?.endpoint === served || (worker !== undefined && worker.id === chosen?.worker)) {
      this.hooks.telemetry.served('chosen');
      return;
    }
    if (!worker) {
      this.hooks.telemetry.served('unknown');
      this.logger.warn({ served, chosen: chosen?.endpoint }, 'served endpoint is not a configured worker');
      return;
    }
    this.hooks.telemetry.served('other');
    this.servedBy = worker.id;
    this.logger.info({ served, served_worker: worker.id, chosen: chosen?.endpoint, chosen_worker: chosen?.worker, key_hash: chosen?.key?.hash }, 'request served by another endpoint than chosen');
    if (chosen?.key) void this.gate.reassign(chosen.key, chosen.worker, worker.id, this.hooks.telemetry);
  }

  /**
   * A routed Responses API request with a successful, readable answer: its id is read from the
   * body chunks Envoy sends when the route's response body mode is STREAMED (the shipped configs
   * set it for that path only). With no body mode, nothing is sent and nothing is learned.
   */
  private watchResponseId(msg: ProcessingRequest): void {
    const path = this.request?.path;
    if (!this.chosen || path === undefined || msg.response_headers?.end_of_stream) return;
    if (promptApiOf(path) !== 'responses' || !readsBody({ path }, this.config)) return;
    if (readableResponse(headerMapToMap(msg.response_headers?.headers))) this.responseIds = new ResponseIdReader();
  }

  /**
   * Records the id → worker before this chunk's reply: Envoy holds the chunk until then, so the
   * client cannot hold the id (and continue from it) before every replica can find its worker.
   */
  private async learnResponseId(chunk: Uint8Array | undefined): Promise<void> {
    const read = this.responseIds!.feed(chunk);
    if (read === 'more') return;
    this.responseIds = undefined;
    if (read === 'none' || !this.chosen) return;
    // The response is stored where it was produced: the endpoint the proxy reports, if another.
    const served = this.servedBy === undefined ? undefined : this.gate.pools.poolOfWorker(this.servedBy);
    if (served) await this.gate.recordResponse(served.name, this.servedBy!, read.id, this.hooks.telemetry);
    else await this.gate.recordResponse(this.chosen.pool, this.chosen.worker, read.id, this.hooks.telemetry);
  }

  /** Envoy applies removes before sets: every client-sent copy goes, then ours is the only one. */
  private removingSpoofed(routed: CommonResponse): CommonResponse {
    if (this.spoofed.length > 0) routed.header_mutation = { ...routed.header_mutation, remove_headers: [...this.spoofed] };
    return routed;
  }

  private replyCommon(phase: 'request_headers' | 'request_body', response: CommonResponse, dynamicMetadata?: PbStruct): void {
    const msg: ProcessingResponse = phase === 'request_headers' ? { request_headers: { response } } : { request_body: { response } };
    if (dynamicMetadata) msg.dynamic_metadata = dynamicMetadata;
    this.reply(msg);
  }

  private reply(msg: ProcessingResponse): void {
    if (this.finished || !this.call.writable) return;
    try {
      this.call.write(msg);
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'ext_proc write failed');
      this.hooks.telemetry.streamError('write_failed', err as Error);
    }
  }

  /** Moves a direction forward; going backwards or repeating a phase is a protocol violation. */
  private advance(direction: 'request' | 'response', to: Phase): void {
    const current = direction === 'request' ? this.reqPhase : this.respPhase;
    const ok = PHASE_ORDER.indexOf(to) > PHASE_ORDER.indexOf(current) || (to === 'body' && current === 'body');
    if (!ok) throw new KvgateError('protocol_violation', `${direction} ${to} after ${direction} ${current}`);
    if (direction === 'request') this.reqPhase = to;
    else this.respPhase = to;
  }

  private releaseLease(): void {
    const lease = this.lease;
    this.lease = undefined;
    if (lease) void this.gate.release(lease, this.hooks.telemetry);
  }

  /**
   * Ends a stream that went quiet for too long: its peer is gone or stuck. A peer that is still
   * there sees DEADLINE_EXCEEDED and applies its failure mode.
   */
  expire(): void {
    if (this.finished || this.unanswered > 0) return;
    this.fail(new KvgateError('protocol_violation', 'ext_proc stream idle past limits.stream_idle_s'), 'deadline');
  }

  private fail(err: unknown, kind: 'error' | 'deadline' = 'error'): void {
    this.endDuplexWait();
    const e = KvgateError.from(err);
    this.logger.warn({ code: e.code, err: e.message }, 'ending ext_proc stream');
    this.releaseLease();
    if (!this.finished) {
      this.hooks.telemetry.streamError(kind === 'deadline' ? 'idle_timeout' : e.code === 'protocol_violation' ? 'protocol_violation' : 'internal', e);
      this.finished = true;
      try {
        this.call.emit('error', { code: kind === 'deadline' ? GrpcStatus.DEADLINE_EXCEEDED : grpcStatusFor(e), details: e.message });
      } catch {
        // The call may already be gone; nothing is left to tell.
      }
      this.hooks.telemetry.close();
      this.hooks.onClose();
    }
  }

  private finish(graceful: boolean): void {
    this.releaseLease();
    this.endDuplexWait();
    if (this.finished) return;
    this.finished = true;
    if (graceful) {
      try {
        this.call.end();
      } catch {
        // Already closed by the peer.
      }
    }
    this.hooks.telemetry.close();
    this.hooks.onClose();
  }
}

const PHASE_ORDER: readonly Phase[] = ['start', 'headers', 'body', 'trailers', 'done'];

/** A field added to RequestInfo fails to compile here until withBody and forgetBody copy it too. */
const REQUEST_INFO_FIELDS_COPIED: [keyof RequestInfo] extends ['method' | 'path' | 'headers' | 'body' | 'unreadBodyBytes'] ? true : false = true;
void REQUEST_INFO_FIELDS_COPIED;

/**
 * The request with its body, field by field: a spread with a property after it (`{ ...r, body }`)
 * took V8's generic copy on every request. RequestInfo has exactly these fields.
 */
function withBody(r: RequestInfo | undefined, body: NonNullable<RequestInfo['body']>): RequestInfo {
  const req = r ?? requestInfoFromHeaders(new Map());
  return { method: req.method, path: req.path, headers: req.headers, body };
}

/** A FULL_DUPLEX_STREAMED body reply: the chunk, unchanged. */
function streamedBody(body: Buffer | undefined, eos: boolean): CommonResponse {
  return { body_mutation: { streamed_response: { body: body ?? Buffer.alloc(0), end_of_stream: eos } } };
}
