/**
 * The gRPC server Envoy calls: `envoy.service.ext_proc.v3.ExternalProcessor/Process`, one
 * bidirectional stream per HTTP request, plus grpc.health.v1 so Envoy's gRPC health checks and
 * Kubernetes probes can see whether the gate is ready.
 *
 * Health services: `""` (what Kubernetes' grpc probe and Envoy ask by default), the ext_proc
 * service name (what envoy/envoy.yaml's health check asks) and `readiness` all report readiness
 * (src/health/readiness.ts); `liveness` is SERVING while the process runs.
 */
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import type { Logger } from 'pino';
import { DEFAULTS } from '../config/defaults.js';
import type { KnobProblem } from '../config/knobs.js';
import type { Gate, GateResult } from '../gate/gate.js';
import { LogThrottle } from '../util/log-throttle.js';
import { requestLogger, type RequestScope } from '../util/request-scope.js';
import type { Metrics } from '../telemetry/metrics.js';
import { RequestTelemetry } from '../telemetry/request-telemetry.js';
import { TRACE_CONTEXT_HEADERS } from '../telemetry/tracing.js';
import type { ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from './messages.js';
import { EXT_PROC_SERVICE_NAME, extProcServiceDefinition } from './proto.js';
import type { BodyModes } from './body-mode.js';
import { canRetireConnections, retireConnections, type ConnectionAgeOptions, type RetiringConnections } from './connection-age.js';
import { openReceiveWindows, receiveWindows } from './receive-window.js';
import { withConstantReplies } from './responses.js';
import { ExtProcStream } from './stream.js';
import { withStreamedReplies } from './streamed-reply.js';

export interface ExtProcServerOptions {
  gate: Gate;
  logger: Logger;
  /** Largest ext_proc message accepted: the body limit plus room for headers. */
  maxMessageBytes: number;
  credentials?: grpc.ServerCredentials;
  onResult?: (result: GateResult) => void;
  metrics: Metrics;
  /** FULL_DUPLEX_STREAMED: how long a request body is waited for (default DEFAULTS.fullDuplexBodyWaitMs). */
  fullDuplexBodyWaitMs?: number;
  /** How long an HTTP/2 connection is used before it is retired (default DEFAULTS.connectionAgeMs). */
  connectionAgeMs?: number;
  /** How many streams an HTTP/2 connection carries before it is retired (default DEFAULTS.connectionMaxStreams). */
  connectionMaxStreams?: number;
}

/**
 * The largest ext_proc message kvgate accepts when bodies may be `maxBodyBytes` long: Envoy's
 * BUFFERED body plus its headers, which are small next to it (1 MiB of room). The HTTP/2 receive
 * windows follow it (receive-window.ts).
 */
export function maxMessageBytesFor(maxBodyBytes: number): number {
  return maxBodyBytes + 1024 * 1024;
}

/** Health service names that report readiness; `liveness` is separate. */
const READINESS_SERVICES = ['', EXT_PROC_SERVICE_NAME, 'readiness'];
/** Read-only by RequestTelemetry: one shared empty map for every stream that carries no trace context. */
const NO_TRACE_HEADERS: ReadonlyMap<string, string> = new Map();

type ServingStatus = 'SERVING' | 'NOT_SERVING';


export class ExtProcServer {
  private readonly server: grpc.Server;
  private readonly health: HealthImplementation;
  private readonly streams = new Set<ExtProcStream>();
  private nextStreamId = 1;
  private readonly sweeper: NodeJS.Timeout;
  /**
   * Config mistakes in Envoy repeat on every request of their route: each distinct one (a bad
   * knob, a body-mode mismatch) is logged once a minute, with the count of repeats swallowed.
   */
  private readonly configLog = new LogThrottle(DEFAULTS.knobProblemLogIntervalMs);
  /** Connection retirement, when kvgate does it itself (./connection-age.ts); else grpc-js's own. */
  private readonly connectionAge: ConnectionAgeOptions | undefined;
  private readonly retiring: RetiringConnections[] = [];

  constructor(private readonly opts: ExtProcServerOptions) {
    const base: grpc.ServerOptions = {
      'grpc.max_receive_message_length': opts.maxMessageBytes,
      // Envoy keeps its ext_proc connections open for the process lifetime; detect dead peers.
      'grpc.keepalive_time_ms': 60_000,
      'grpc.keepalive_timeout_ms': 20_000,
    };
    const age: ConnectionAgeOptions = {
      ageMs: opts.connectionAgeMs ?? DEFAULTS.connectionAgeMs,
      maxStreams: opts.connectionMaxStreams ?? DEFAULTS.connectionMaxStreams,
      noticeMs: DEFAULTS.goawayNoticeMs,
      quietMs: DEFAULTS.shutdownQuietMs,
      // Streams on a retired connection run to their end: an HTTP request can take minutes.
      graceMs: opts.gate.currentConfig.limits.stream_idle_s * 1000,
    };
    this.server = new grpc.Server(base);
    if (canRetireConnections(this.server)) this.connectionAge = age;
    else {
      // A grpc-js that hides its HTTP/2 servers differently: its own retirement, which can refuse
      // the streams that cross its GOAWAY, beats none (nghttp2 would fail every stream on the connection).
      opts.logger.warn('retiring connections with grpc-js max_connection_age: streams crossing its GOAWAY may be refused');
      this.server = new grpc.Server({ ...base, 'grpc.max_connection_age_ms': age.ageMs, 'grpc.max_connection_age_grace_ms': age.graceMs });
    }
    this.server.addService(withConstantReplies(withStreamedReplies(extProcServiceDefinition())), {
      Process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => this.accept(call),
    });
    // Not serving until the owner says config and store are ready.
    this.health = new HealthImplementation({
      ...Object.fromEntries(READINESS_SERVICES.map((s) => [s, 'NOT_SERVING'])),
      liveness: 'SERVING',
    });
    this.health.addToServer(this.server);
    // One timer for all streams, not one per stream: it reclaims streams whose peer vanished
    // without a reset reaching us (grpc-js can miss a cancel that races the call's start).
    const idleMs = opts.gate.currentConfig.limits.stream_idle_s * 1000;
    this.sweeper = setInterval(() => {
      const cutoff = Date.now() - idleMs;
      for (const s of this.streams) if (s.lastActivity < cutoff) s.expire();
    }, Math.max(50, Math.min(30_000, idleMs / 4))).unref();
  }

  /** Binds and starts; resolves with the bound port (0 picks a free one). */
  listen(host: string, port: number): Promise<number> {
    const creds = this.opts.credentials ?? grpc.ServerCredentials.createInsecure();
    return new Promise((resolve, reject) => {
      this.server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, creds, (err, bound) => {
        if (err) return reject(err);
        if (this.connectionAge) this.retiring.push(retireConnections(this.server, this.connectionAge));
        const windows = openReceiveWindows(this.server, receiveWindows(this.opts.maxMessageBytes));
        if (windows === 'hidden') this.opts.logger.warn('this grpc-js hides its HTTP/2 servers: receive windows stay at 64 KiB, so large bodies wait on window updates');
        if (windows === 'refused') this.opts.logger.warn('Node refused the HTTP/2 stream window setting: stream windows stay at 64 KiB, so large bodies wait on window updates');
        resolve(bound);
      });
    });
  }

  setServing(serving: boolean): void {
    const status: ServingStatus = serving ? 'SERVING' : 'NOT_SERVING';
    for (const s of READINESS_SERVICES) this.health.setStatus(s, status);
  }

  /** Streams currently open (each is one HTTP request Envoy is processing). */
  get openStreams(): number {
    return this.streams.size;
  }

  /**
   * Stops taking new streams, lets open ones finish for up to `graceMs`, then cuts the rest.
   * Health turns NOT_SERVING first so Envoy moves new requests elsewhere.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.setServing(false);
    clearInterval(this.sweeper);
    // Every connection is retired as an aged one is: the shutdown notice, a PING, and the final
    // GOAWAY once Envoy has answered it, so no stream Envoy opened before it read the notice is
    // refused; so is a connection Envoy opens meanwhile. grpc-js's tryShutdown alone sends the
    // final GOAWAY at once, which refuses every stream crossing it (Envoy does not retry those:
    // ./connection-age.ts). One opened after the wait still gets that.
    const retiring = this.retiring.splice(0);
    await Promise.all(retiring.map((r) => r.retireAll()));
    for (const r of retiring) r.stop();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private accept(call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void {
    // Envoy puts its ext_proc client span's context in the call's metadata when tracing is on.
    // Without them (tracing off in Envoy: most streams) every stream shares one empty map.
    let traceHeaders: Map<string, string> | undefined;
    for (const name of TRACE_CONTEXT_HEADERS) {
      const v = call.metadata.get(name)[0];
      if (typeof v === 'string') (traceHeaders ??= new Map()).set(name, v);
    }
    // The stream's logger (a child naming the stream and its trace) is built at its first line.
    const telemetry = new RequestTelemetry(this.opts.metrics, traceHeaders ?? NO_TRACE_HEADERS);
    const stream: ExtProcStream = new ExtProcStream(call, this.opts.gate, this.opts.logger, {
      telemetry,
      streamId: this.nextStreamId++,
      onClose: () => this.streams.delete(stream),
      onKnobProblems: (problems) => this.logKnobProblems(problems, telemetry),
      onModeMismatch: (modes, configured) => this.logModeMismatch(modes, configured),
      onObservabilityMode: () => this.logObservabilityMode(),
      duplexBodyWaitMs: this.opts.fullDuplexBodyWaitMs ?? DEFAULTS.fullDuplexBodyWaitMs,
      ...(this.opts.onResult ? { onResult: this.opts.onResult } : {}),
    });
    this.streams.add(stream);
  }

  /**
   * Envoy runs the filter in observability mode: it ignores every reply and routes without kvgate,
   * so kvgate routes nothing on those streams and says so once a minute (a config to fix: the
   * filter must not be in observability mode for kvgate to route).
   */
  private logObservabilityMode(): void {
    const repeats = this.configLog.take('observability_mode');
    if (repeats === undefined) return;
    this.opts.logger.warn(
      { repeats },
      "Envoy's ext_proc filter is in observability_mode: it ignores kvgate's answers, so kvgate routes nothing on these streams (logged once a minute)",
    );
  }

  /**
   * Envoy's filter declares other body modes than routing.request_body_mode: kvgate follows Envoy
   * (it knows how it sends), and says so once a minute so the config can be brought in line.
   */
  private logModeMismatch(modes: BodyModes, configured: string): void {
    const repeats = this.configLog.take(`mode\u0000${modes.declared?.request}\u0000${modes.declared?.response}\u0000${configured}`);
    if (repeats === undefined) return;
    this.opts.logger.warn(
      { declared_request_body_mode: modes.declared?.request, declared_response_body_mode: modes.declared?.response, request_body_mode: configured, following: modes.request, repeats },
      'Envoy declares a different request body mode than routing.request_body_mode; following Envoy (logged once a minute)',
    );
  }

  /**
   * A bad knob is a config mistake in Envoy, repeated on every request of its route: warn once a
   * minute per mistake, with the trace ids of the request that showed it.
   */
  private logKnobProblems(problems: readonly KnobProblem[], scope: RequestScope): void {
    for (const p of problems) {
      const repeats = this.configLog.take(`knob\u0000${p.layer}\u0000${p.key}\u0000${p.value}`);
      if (repeats === undefined) continue;
      requestLogger(this.opts.logger, scope).warn(
        { knob_layer: p.layer, key: p.key, value: p.value, reason: p.reason, repeats },
        'knob rejected; using the next layer or the config default',
      );
    }
  }
}
