/**
 * Telemetry for one request (one ext_proc stream): its span, its metrics, the trace and span ids
 * every log line about it carries, and what it spent in the store. It is the request's
 * `RequestScope` (src/util/request-scope.ts): the transport hands it to the gate, the gate to the
 * store, explicitly; no async context is involved (src/telemetry/tracing.ts says why).
 *
 * The span `kvgate.route` starts when the request headers arrive and ends when kvgate answers
 * with its decision (a route, an immediate response, or a fallback). Its parent is Envoy's span
 * for the ext_proc call, read from the call's gRPC metadata (W3C `traceparent`/`tracestate` or B3,
 * as Envoy's tracer injects them when its tracing is on), else from the request's own headers (a client's
 * trace), else it starts a trace. With export off the span is non-recording but still carries the
 * parent's ids, so logs correlate with Envoy's traces anyway. Log lines carry the span's ids:
 * kvgate's span when it records, else Envoy's (or the client's); none before the request headers,
 * or when no trace reached kvgate and nothing is exported.
 *
 * Every method swallows its own failures: telemetry never throws into the request path.
 */
import {
  isSpanContextValid,
  propagation,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Span,
  type SpanContext,
  type TextMapGetter,
} from '@opentelemetry/api';
import { KvgateError } from '../errors.js';
import type { GateResult } from '../gate/gate.js';
import type { CandidateExplanation, WorkerView } from '../routing/types.js';
import { newStoreUsage, type RequestScope, type StoreUsage } from '../util/request-scope.js';
import { Metrics, NO_POOL, type DecisionOutcome, type StreamErrorReason } from './metrics.js';
import { TRACER_NAME } from './tracing.js';

const mapGetter: TextMapGetter<ReadonlyMap<string, string>> = {
  keys: (carrier) => [...carrier.keys()],
  get: (carrier, key) => carrier.get(key.toLowerCase()),
};

export type ParentSource = 'grpc_metadata' | 'request_headers' | 'none';

/** Extra facts the transport knows about a decision. */
export interface DecisionFacts {
  /** The HTTP status of an immediate answer. */
  status?: number;
  /** Endpoint-picker mode: the chosen endpoint (ip:port). */
  endpoint?: string;
  /** Endpoint-picker mode: how many workers the proxy's subset hint left eligible. */
  subsetSize?: number;
}

/** The ext_proc method, fully qualified as the RPC conventions want `rpc.method`. */
const RPC_METHOD = 'envoy.service.ext_proc.v3.ExternalProcessor/Process';
/** The HTTP methods the conventions know; any other is recorded as `_OTHER` with the original beside it. */
const KNOWN_METHODS = new Set(['CONNECT', 'DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT', 'TRACE', 'QUERY']);
/**
 * Longest `url.path` put on a span: the LLM APIs' paths are short (`/v1/chat/completions`), and a
 * path is the client's to choose, so an unbounded one would be an unbounded attribute.
 */
const MAX_PATH_CHARS = 256;
/**
 * Longest `gen_ai.request.model` put on a span: real model names are well under it (the longest
 * Hugging Face ids are ~100 characters), and the name is the client's to write.
 */
const MAX_MODEL_CHARS = 256;

/**
 * Whether spans are recorded anywhere: a tracer provider is registered (startTracing, or a test's).
 * Without one the API's tracer makes non-recording spans, and a request needs none of them: its
 * log lines only want the parent's ids.
 */
function tracing(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegateTracer(TRACER_NAME) !== undefined;
}

/**
 * Whether a carrier holds a header any of the propagators (tracing.ts) extracts a parent from: W3C's
 * `traceparent`, B3's single `b3` or multi-header `x-b3-traceid`. Without one no parent can come
 * out of it, so it is not extracted (most requests carry no trace).
 */
function mayCarryTrace(carrier: ReadonlyMap<string, string>): boolean {
  return carrier.size > 0 && (carrier.has('traceparent') || carrier.has('b3') || carrier.has('x-b3-traceid'));
}

export class RequestTelemetry implements RequestScope {
  private span: Span | undefined;
  /** With no tracer provider: the parent's ids (Envoy's or the client's), for log lines; no span is made. */
  private parentIds: SpanContext | undefined;
  private begun = false;
  private ended = false;
  /** The stream is over (close()): a decision answered after this was never applied. */
  private closed = false;
  readonly storeUsage: StoreUsage = newStoreUsage();
  private decisionStart: number | undefined;

  /**
   * @param callTraceHeaders the trace-context headers (tracing.ts TRACE_CONTEXT_HEADERS) from the ext_proc call's gRPC metadata.
   */
  constructor(
    private readonly metrics: Metrics,
    private readonly callTraceHeaders: ReadonlyMap<string, string>,
  ) {
    Metrics.safely(() => {
      metrics.streamsStarted.inc();
      metrics.openStreams.inc();
    });
  }

  /** The request headers arrived: starts the span under Envoy's (or the client's) trace. */
  begin(headers: ReadonlyMap<string, string>, request: { method: string; path: string }): void {
    if (this.begun) return;
    this.begun = true;
    safely(() => {
      let source: ParentSource = 'none';
      let parent = ROOT_CONTEXT;
      if (mayCarryTrace(this.callTraceHeaders)) {
        parent = propagation.extract(ROOT_CONTEXT, this.callTraceHeaders, mapGetter);
        if (trace.getSpanContext(parent)) source = 'grpc_metadata';
      }
      if (source === 'none' && mayCarryTrace(headers)) {
        parent = propagation.extract(ROOT_CONTEXT, headers, mapGetter);
        if (trace.getSpanContext(parent)) source = 'request_headers';
      }
      if (!tracing()) {
        this.parentIds = trace.getSpanContext(parent);
        return;
      }
      this.span = trace.getTracer(TRACER_NAME).startSpan(
        'kvgate.route',
        {
          kind: SpanKind.SERVER,
          attributes: {
            // The stable RPC conventions of the semantic-conventions release kvgate pins (1.45):
            // `rpc.system.name` and the method fully qualified; `rpc.system` and `rpc.service`
            // are deprecated there.
            'rpc.system.name': 'grpc',
            'rpc.method': RPC_METHOD,
            ...httpMethodAttributes(request.method),
            // Path only: the query string may carry secrets.
            'url.path': request.path.length > MAX_PATH_CHARS ? request.path.slice(0, MAX_PATH_CHARS) : request.path,
            'kvgate.trace_parent': source,
          },
        },
        parent,
      );
    });
  }

  /**
   * `trace_id` and `span_id` for a log line about this request: its span's (kvgate's own when it
   * records, else the parent's it carries), or undefined before the span begins or when it has no
   * valid ids. Built when a line is written, not per request.
   */
  get logIds(): Readonly<Record<string, string>> | undefined {
    try {
      const sc = this.span?.spanContext() ?? this.parentIds;
      return sc && isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : undefined;
    } catch {
      return undefined;
    }
  }

  /** The decision starts now (for the latency histogram). */
  deciding(): void {
    this.decisionStart = performance.now();
  }

  /** kvgate answered with a decision: records it and ends the span. */
  decided(result: GateResult, facts: DecisionFacts = {}): void {
    safely(() => {
      // Envoy gave up on the stream first (its message timeout, or the client left): nothing of
      // this decision reached it, so it is counted as abandoned, not as the route it would have been.
      const pool = poolOf(result);
      if (this.closed) return this.abandoned(pool);
      const outcome = outcomeOf(result);
      const seconds = this.decisionStart === undefined ? undefined : (performance.now() - this.decisionStart) / 1000;
      const m = this.metrics;
      m.decisions.inc({ outcome, pool });
      if (seconds !== undefined) m.decisionSeconds.observe({ outcome, pool }, seconds);
      if (result.kind === 'route') {
        if (result.outcome === 'migrated') m.migrations.inc({ from: result.from ?? 'unknown' });
        if (result.degraded) m.degradedDecisions.inc();
        if (result.fromPreviousKey) m.previousKeyFinds.inc();
      } else if (outcome === 'shed') {
        m.sheds.inc({ reason: result.error.code, status: String(facts.status ?? ''), class: result.class ?? '', pool });
      }
      if (result.class !== undefined) m.classRequests.inc({ class: result.class, pool });
      const span = this.span;
      if (!span || this.ended) return;
      // With no exporter the span is non-recording and would drop every attribute: none is built.
      if (span.isRecording()) {
        span.setAttributes(decisionAttributes(result, outcome, facts));
        span.setAttributes(this.storeAttributes());
        for (const e of this.storeUsage.errors) span.addEvent('store_error', { 'kvgate.store.operation': e.operation, 'exception.message': e.message });
      }
      // A 5xx immediate answer is a failure seen from the client (the HTTP conventions mark
      // server spans in error for 5xx, not 4xx): Jaeger's error filter should find it.
      if (result.kind === 'reject' && (facts.status ?? 0) >= 500) {
        span.setAttribute('error.type', result.error.code);
        span.setStatus({ code: SpanStatusCode.ERROR, message: result.error.code });
      }
      this.endSpan();
    });
  }

  /** kvgate failed to decide and let the request go on without a routing answer. */
  fallback(err: Error): void {
    safely(() => {
      if (this.closed) return this.abandoned(NO_POOL);
      // The gate failed before answering, so no pool is known.
      this.metrics.decisions.inc({ outcome: 'fallback', pool: NO_POOL });
      const span = this.span;
      if (!span || this.ended) return;
      // error.type beside the ERROR status, as the conventions ask: the error's code, `internal` for a bug.
      if (span.isRecording()) span.setAttributes({ 'kvgate.outcome': 'fallback', 'error.type': KvgateError.from(err).code, ...this.storeAttributes() });
      span.recordException(err);
      span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
      this.endSpan();
    });
  }

  /** Endpoint-picker mode: the proxy reported the endpoint that served the request. */
  served(match: 'chosen' | 'other' | 'unknown'): void {
    safely(() => this.metrics.servedEndpoints.inc({ match }));
  }

  /** The stream ended in error. */
  streamError(reason: StreamErrorReason, err: Error): void {
    safely(() => {
      this.metrics.streamErrors.inc({ reason });
      const span = this.span;
      if (!span || this.ended) return;
      span.setAttribute('error.type', reason);
      span.recordException(err);
      span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
      this.endSpan();
    });
  }

  /** The stream is over, however it ended. Ends a span still open (no decision was made). */
  close(): void {
    safely(() => {
      if (this.closed) return;
      this.closed = true;
      this.metrics.openStreams.dec();
      if (this.span && !this.ended) {
        this.span.addEvent('stream ended before a decision');
        // A decision was under way: Envoy stopped waiting for it (its message timeout, most often
        // a slow store), which a trace of the incident must show as a failure.
        if (this.decisionStart !== undefined) {
          if (this.span.isRecording()) this.span.setAttributes({ 'kvgate.outcome': 'abandoned', 'error.type': 'abandoned', ...this.storeAttributes() });
          this.span.setStatus({ code: SpanStatusCode.ERROR, message: 'the stream ended before the decision was answered' });
        }
        this.endSpan();
      }
    });
  }

  /** A decision (or fallback) finished after its stream ended: counted once as abandoned. */
  private abandoned(pool: string): void {
    if (this.decisionStart === undefined) return;
    this.decisionStart = undefined;
    this.metrics.decisions.inc({ outcome: 'abandoned', pool });
  }

  private storeAttributes(): Attributes {
    return {
      'kvgate.store.duration_ms': this.storeUsage.seconds * 1000,
      'kvgate.store.calls': this.storeUsage.calls,
      'kvgate.store.errors': this.storeUsage.errors.length,
    };
  }

  private endSpan(): void {
    this.ended = true;
    this.span?.end();
  }
}

/** `http.request.method` as the HTTP conventions record it: known methods as they are, any other as `_OTHER` plus the original. */
function httpMethodAttributes(method: string): Attributes {
  return KNOWN_METHODS.has(method) ? { 'http.request.method': method } : { 'http.request.method': '_OTHER', 'http.request.method_original': method.slice(0, 32) };
}

function safely(fn: () => void): void {
  try {
    fn();
  } catch {
    // Telemetry is best effort; the request goes on.
  }
}

/**
 * The `pool` label of a decision: the pool the gate chose, which is always one of the config's
 * (never the client's words: a `pool` knob naming no pool is not taken), else NO_POOL.
 */
function poolOf(result: GateResult): string {
  return typeof result.pool === 'string' ? result.pool : NO_POOL;
}

export function outcomeOf(result: GateResult): DecisionOutcome {
  if (result.kind === 'route') return result.outcome;
  return result.error.code === 'overloaded' || result.error.code === 'no_healthy_workers' ? 'shed' : 'rejected';
}

/** A finite number, or undefined: attributes never carry NaN or a non-number by mistake. */
function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** The decision as span attributes: parallel arrays per candidate (OTel attributes are flat). */
export function decisionAttributes(result: GateResult, outcome: DecisionOutcome, facts: DecisionFacts): Attributes {
  const a: Attributes = { 'kvgate.outcome': outcome };
  if (result.key) {
    a['kvgate.key.kind'] = result.key.kind;
    a['kvgate.key.source'] = result.key.source;
    a['kvgate.key.hash'] = result.key.hash;
  } else {
    a['kvgate.key.kind'] = 'none';
  }
  if (result.kind === 'route') {
    a['kvgate.pool'] = result.pool;
    a['kvgate.worker'] = result.worker;
    a['kvgate.cluster'] = result.cluster;
    a['kvgate.degraded'] = result.degraded;
    a['kvgate.store.attempts'] = result.attempts;
    if (result.from !== undefined) a['kvgate.migrated_from'] = result.from;
  } else {
    // A shed's pool: which pool had no worker to take it (absent when the request never got one).
    if (result.pool !== undefined) a['kvgate.pool'] = result.pool;
    a['kvgate.reject.code'] = result.error.code;
    a['kvgate.reject.reason'] = result.error.message;
  }
  if (result.class !== undefined) a['kvgate.class'] = result.class;
  // The OpenTelemetry GenAI conventions' name for the model asked for: a trace backend that knows
  // GenAI spans groups and filters by it, and it tells a LoRA adapter's requests from its base
  // model's in one pool.
  if (typeof result.model === 'string' && result.model !== '') a['gen_ai.request.model'] = result.model.length > MAX_MODEL_CHARS ? result.model.slice(0, MAX_MODEL_CHARS) : result.model;
  if (facts.status !== undefined) a['kvgate.response.status'] = facts.status;
  if (facts.endpoint !== undefined) a['kvgate.endpoint'] = facts.endpoint;
  if (facts.subsetSize !== undefined) a['kvgate.subset.size'] = facts.subsetSize;
  const views: readonly WorkerView[] = Array.isArray(result.views) ? result.views : [];
  if (views.length > 0) {
    a['kvgate.candidates'] = views.map((w) => w.id);
    a['kvgate.candidates.inflight'] = views.map((w) => w.inflight);
    a['kvgate.candidates.max_inflight'] = views.map((w) => w.maxInflight);
    a['kvgate.candidates.state'] = views.map((w) => w.state);
  }
  // Why this worker (or why none): the rule that chose, the policy, the prompt's size and each
  // candidate's score inputs, from the explanation the policy built (the same record
  // /debug/decisions serves). Checked as data: telemetry must not trust its shape to stay put.
  const ex = result.explanation;
  if (ex && typeof ex === 'object') {
    if (typeof ex.rule === 'string') a['kvgate.rule'] = ex.rule;
    if (typeof ex.mode === 'string') a['kvgate.policy'] = ex.mode;
    if (typeof ex.spilled === 'boolean') a['kvgate.spilled'] = ex.spilled;
    const total = num(ex.totalBlocks);
    if (total !== undefined) a['kvgate.prefix.total_blocks'] = total;
    const byWorker = new Map<string, Partial<CandidateExplanation>>();
    if (Array.isArray(ex.candidates)) for (const c of ex.candidates) if (c && typeof c === 'object' && typeof c.worker === 'string') byWorker.set(c.worker, c);
    // The chosen worker's own match: how much of the prompt's KV cache it already held.
    const chosen = result.kind === 'route' ? num(byWorker.get(result.worker)?.prefixBlocks) : undefined;
    if (chosen !== undefined) a['kvgate.prefix.matched_blocks'] = chosen;
    if (views.length > 0 && byWorker.size > 0) {
      // Per candidate, in the order of `kvgate.candidates`; null where that worker has no value
      // (no score: it could not take the request; no kv_usage/work: its engine reports none), and
      // the array left out when no candidate has one.
      const column = (field: 'score' | 'prefixBlocks' | 'kvUsage' | 'work' | 'liveSessions', missing: number | null): (number | null)[] | undefined => {
        const values = views.map((w) => num(byWorker.get(w.id)?.[field]));
        return values.some((v) => v !== undefined) ? values.map((v) => v ?? missing) : undefined;
      };
      const columns = { 'kvgate.candidates.score': column('score', null), 'kvgate.candidates.matched_blocks': column('prefixBlocks', 0), 'kvgate.candidates.kv_usage': column('kvUsage', null), 'kvgate.candidates.work': column('work', null), 'kvgate.candidates.live_sessions': column('liveSessions', 0) };
      for (const [name, values] of Object.entries(columns)) if (values) a[name] = values;
    }
  }
  return a;
}
