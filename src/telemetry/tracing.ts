/**
 * The OpenTelemetry SDK, wired at startup: the only module that imports SDK packages. Everything
 * else uses `@opentelemetry/api`, which is a no-op until a provider is registered here.
 *
 * Two separate things happen here:
 *  - `installTraceContext()` always runs (cheap, no exporter): the W3C trace-context and B3
 *    propagators, so kvgate reads the context Envoy's tracer put on the ext_proc call, whichever
 *    format that tracer speaks (its log lines carry those ids even with export off).
 *  - `startTracing()` exports spans over OTLP, configured only by the standard OTEL_* environment
 *    variables, and is off unless they ask for it (see `tracingRequested`).
 *
 * Telemetry never fails the host: a missing collector, a bad variable or a full export queue is a
 * warning in the log (rate-limited by the SDK's batching), never an error in the request path.
 */
import { diag, DiagLogLevel, propagation, trace, type DiagLogger } from '@opentelemetry/api';
import { CompositePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { B3Propagator } from '@opentelemetry/propagator-b3';
import type { SpanExporter } from '@opentelemetry/sdk-trace-node';
import type { Logger } from 'pino';
import { DEFAULTS } from '../config/defaults.js';
import { LogThrottle } from '../util/log-throttle.js';
import { shownUrl } from '../util/shown-url.js';

/** The instrumentation scope of every kvgate span (`trace.getTracer(TRACER_NAME)`). */
export const TRACER_NAME = 'kvgate';

/** The OTLP transports the spec names in OTEL_EXPORTER_OTLP_PROTOCOL; http/protobuf is its default. */
export type OtlpProtocol = 'http/protobuf' | 'http/json' | 'grpc';

export interface TracingSettings {
  enabled: boolean;
  protocol: OtlpProtocol;
  /** Why tracing is off, or where spans go: for the startup log line. */
  description: string;
  /** Settings kvgate read and could not honour (logged as warnings at startup). */
  warnings: string[];
}

export interface Tracing extends TracingSettings {
  /** Exports what is still queued, then stops. Never rejects. */
  shutdown(): Promise<void>;
}

let contextInstalled = false;

/**
 * The trace-context headers kvgate reads: W3C trace context (Envoy's OpenTelemetry tracer) and B3,
 * single- and multi-header (Envoy's Zipkin tracer, which Istio configures by default). Envoy's gRPC
 * client injects its ext_proc span's context in its tracer's own format (Envoy
 * source/common/grpc/async_client_impl.cc, `AsyncStreamImpl::initialize`, `injectContext`).
 */
export const TRACE_CONTEXT_HEADERS = ['traceparent', 'tracestate', 'b3', 'x-b3-traceid', 'x-b3-spanid', 'x-b3-sampled', 'x-b3-flags', 'x-b3-parentspanid'] as const;

/**
 * Registers the propagators, once per process (without them `propagation.extract` finds no
 * parent). kvgate only extracts (its span is the last hop: nothing is injected anywhere), so the
 * order says which context wins when a carrier holds both: the composite extracts in turn and a
 * later propagator's context replaces an earlier one's, so W3C, listed last, wins over B3.
 *
 * No context manager is registered, with or without export, and none must be: on Node 20 and 22
 * an AsyncLocalStorage, once entered, runs async hooks on every promise and native callback of
 * the process (about 10 µs of a 2 KB request's ~150 µs on the gate's thread). Nothing needs one:
 * a request's span is started with an explicit parent (src/telemetry/request-telemetry.ts), its
 * trace ids reach log lines and its store usage reaches the span through the request's scope,
 * passed down explicitly (src/util/request-scope.ts); no instrumentation library is loaded (grpc-js,
 * ioredis and http make no spans of their own), so nothing else reads the active context. The
 * SDK's batch processor wraps each export in `context.with(suppressTracing(...))`, which only
 * instrumentations read: without a manager it just runs the export. Were instrumentations ever
 * added (ioredis spans under the request's span), they would need a manager, installed only when
 * an exporter is configured, and their cost measured then.
 */
export function installTraceContext(): void {
  if (contextInstalled) return;
  contextInstalled = true;
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new B3Propagator(), new W3CTraceContextPropagator()] }));
}

const PROTOCOLS: readonly OtlpProtocol[] = ['http/protobuf', 'http/json', 'grpc'];

/**
 * An OTEL_* variable as the spec reads it: an empty (or blank) value is the same as unset ("The
 * SDK MUST interpret an empty value of an environment variable the same way as when the variable
 * is unset"), which is also how the SDK's own exporters read them (`getStringFromEnv`). Helm
 * charts and manifests often set variables to "" by default.
 */
function otelVar(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name]?.trim();
  return v ? v : undefined;
}

/**
 * Reads the OTEL_* variables that decide whether and how spans are exported, as the
 * OpenTelemetry SDK environment-variable spec defines them:
 *  - off when OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none;
 *  - on when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
 *    OTEL_EXPORTER_OTLP_ENDPOINT) or OTEL_TRACES_EXPORTER names otlp (default endpoint then);
 *  - off otherwise: an unconfigured kvgate sends nothing anywhere.
 * Empty values count as unset and enumerated values are read case-insensitively (the spec's
 * SHOULD); a value kvgate cannot honour (an unknown protocol, an exporter other than otlp, an
 * endpoint without a scheme) is a warning, not a silent fallback. The exporter itself reads
 * endpoint, headers, timeout and compression from the same variables.
 */
export function tracingRequested(env: NodeJS.ProcessEnv): TracingSettings {
  const warnings: string[] = [];
  const protocolVar = otelVar(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const rawProtocol = (otelVar(env, protocolVar) ?? 'http/protobuf').toLowerCase();
  let protocol: OtlpProtocol = 'http/protobuf';
  if (PROTOCOLS.includes(rawProtocol as OtlpProtocol)) protocol = rawProtocol as OtlpProtocol;
  else warnings.push(`${protocolVar}=${rawProtocol} is not an OTLP protocol (grpc, http/protobuf, http/json): using http/protobuf`);
  const off = (why: string): TracingSettings => ({ enabled: false, protocol, description: why, warnings });
  if (otelVar(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return off('OTEL_SDK_DISABLED=true');
  const exporters = (otelVar(env, 'OTEL_TRACES_EXPORTER') ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  if (exporters.includes('none')) return off('OTEL_TRACES_EXPORTER=none');
  const unsupported = exporters.filter((e) => e !== 'otlp');
  if (unsupported.length > 0) warnings.push(`OTEL_TRACES_EXPORTER=${unsupported.join(',')}: kvgate exports OTLP only (Jaeger and the OpenTelemetry Collector take it); ignored`);
  const endpointVar = otelVar(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') !== undefined ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  const endpoint = otelVar(env, endpointVar);
  if (!endpoint && !exporters.includes('otlp')) return off('no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER=otlp');
  // The HTTP exporters need a URL: `host:port` parses as one whose scheme is the host, and every
  // export then fails. Say so at startup, where the operator looks. (The gRPC exporter takes
  // `host:port` as it is the usual form there, adding the scheme itself.)
  // Shown without credentials or query string (shownUrl): the startup line is read by more people than the environment.
  if (endpoint && protocol !== 'grpc' && !/^[a-z][a-z0-9+.-]*:\/\//i.test(endpoint)) warnings.push(`${endpointVar}=${shownUrl(endpoint)} has no scheme (http:// or https://): the OTLP/HTTP exporter cannot send to it`);
  return { enabled: true, protocol, description: `OTLP ${protocol} to ${endpoint ? shownUrl(endpoint) : 'the default endpoint'}`, warnings };
}

/** Loads only the exporter the protocol needs (each pulls in its own transport). */
async function createExporter(protocol: OtlpProtocol): Promise<SpanExporter> {
  switch (protocol) {
    case 'grpc':
      return new (await import('@opentelemetry/exporter-trace-otlp-grpc')).OTLPTraceExporter();
    case 'http/json':
      return new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter();
    case 'http/protobuf':
      return new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
  }
}

/** What an operator should know about any SDK diagnostic: it never touches routing. */
const DIAG_HINT = 'routing is not affected; spans that cannot be exported are dropped. Check OTEL_EXPORTER_OTLP_ENDPOINT and that the collector is up';

/** A collector that stays down fails every export: one line per cause per this long. */
const DIAG_LOG_INTERVAL_MS = 30_000;

/**
 * The SDK's own diagnostics (export failures, bad variables) as pino warnings an operator can
 * read: the error's message without its stack (the SDK hands over whole serialised exceptions),
 * the logger's own `component` (no second one), no request's trace ids (the logger is not a
 * request's, and nothing adds ids from an async context), and at most once per cause every 30 s.
 */
export function diagToPino(logger: Logger, now: () => number = Date.now): DiagLogger {
  const throttle = new LogThrottle(DIAG_LOG_INTERVAL_MS, 100, now);
  const line = (level: 'warn' | 'info' | 'debug') => (msg: string, ...args: unknown[]) => {
    const text = [msg, ...args.map(describeDiagArg)].map(firstLine).filter(Boolean).join(': ');
    // Counts in a message ("Dropped 37 spans…") differ each time: throttled as one cause.
    const repeats = throttle.take(text.slice(0, 200).replace(/\d+/g, '#'));
    if (repeats === undefined) return;
    logger[level]({ source: 'opentelemetry', ...(level === 'warn' ? { hint: DIAG_HINT } : {}), ...(repeats > 0 ? { repeats_not_logged: repeats } : {}) }, `opentelemetry: ${text}`);
  };
  const warn = line('warn');
  return { error: warn, warn, info: line('info'), debug: line('debug'), verbose: line('debug') };
}

/** OTEL_LOG_LEVEL (the spec's names, case-insensitive) as the SDK's diagnostic level; WARN unset or unknown. */
export function diagLevel(env: NodeJS.ProcessEnv): DiagLogLevel {
  const name = otelVar(env, 'OTEL_LOG_LEVEL')?.toUpperCase();
  const levels: Record<string, DiagLogLevel> = {
    NONE: DiagLogLevel.NONE,
    ERROR: DiagLogLevel.ERROR,
    WARN: DiagLogLevel.WARN,
    INFO: DiagLogLevel.INFO,
    DEBUG: DiagLogLevel.DEBUG,
    VERBOSE: DiagLogLevel.VERBOSE,
    ALL: DiagLogLevel.ALL,
  };
  return (name !== undefined ? levels[name] : undefined) ?? DiagLogLevel.WARN;
}

/** An Error, a serialised exception (JSON with a message) or anything else, as its message. */
function describeDiagArg(arg: unknown): string {
  if (arg instanceof Error) return arg.message;
  if (typeof arg === 'string') return arg;
  if (arg && typeof arg === 'object' && typeof (arg as { message?: unknown }).message === 'string') return (arg as { message: string }).message;
  return String(arg);
}

/** The first line of a message, and a JSON-serialised exception reduced to its message. */
function firstLine(text: string): string {
  let t = text.trim();
  if (t.startsWith('{')) {
    try {
      const parsed = JSON.parse(t) as { message?: unknown };
      if (typeof parsed.message === 'string') t = parsed.message;
    } catch {
      // not JSON after all
    }
  }
  return t.split('\n')[0]!.trim();
}

/** Longest a stopping gate waits for its last spans to be exported. */
export const SHUTDOWN_FLUSH_MS = 2000;

const OFF: Omit<Tracing, keyof TracingSettings> = { shutdown: () => Promise.resolve() };

/**
 * Starts span export when the environment asks for it. Registers the global tracer provider, so
 * `trace.getTracer(TRACER_NAME)` anywhere returns a recording tracer from then on.
 */
export async function startTracing(opts: { logger: Logger; env?: NodeJS.ProcessEnv; serviceVersion?: string }): Promise<Tracing> {
  installTraceContext();
  const env = opts.env ?? process.env;
  const settings = tracingRequested(env);
  for (const w of settings.warnings) opts.logger.warn({ source: 'opentelemetry' }, `tracing: ${w}`);
  if (!settings.enabled) return { ...settings, ...OFF };
  try {
    diag.setLogger(diagToPino(opts.logger), { logLevel: diagLevel(env), suppressOverrideMessage: true });
    // The SDK loads only when export is on: an untraced gate starts without it.
    const [{ defaultResource, detectResources, envDetector, hostDetector, serviceInstanceIdDetector, resourceFromAttributes }, { BatchSpanProcessor, NodeTracerProvider }, semconv] = await Promise.all([
      import('@opentelemetry/resources'),
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/semantic-conventions'),
    ]);
    const { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } = semconv;
    const resource = defaultResource()
      .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: TRACER_NAME, ...(opts.serviceVersion ? { [ATTR_SERVICE_VERSION]: opts.serviceVersion } : {}) }))
      // host.name and a service.instance.id per process tell replicas apart in Jaeger (without
      // them every pod's spans carry the same resource); OTEL_SERVICE_NAME and
      // OTEL_RESOURCE_ATTRIBUTES, detected last, win over all of it.
      .merge(detectResources({ detectors: [hostDetector, serviceInstanceIdDetector, envDetector] }));
    // The sampler comes from OTEL_TRACES_SAMPLER (default parentbased_always_on: follow Envoy's
    // sampling decision); the batch processor's queue bounds memory and drops, never blocks. Its
    // batch size is kvgate's unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE sets one (the SDK reads the
    // variable only when the option is absent).
    const batch = otelVar(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE') === undefined ? { maxExportBatchSize: DEFAULTS.traceExportBatchSize } : {};
    const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(await createExporter(settings.protocol), batch)] });
    trace.setGlobalTracerProvider(provider);
    return {
      ...settings,
      async shutdown() {
        try {
          // Bounded: a dead collector must not hold a stopping gate past its termination grace
          // (the exporter alone may retry for OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default).
          let timer: NodeJS.Timeout | undefined;
          const limit = new Promise<void>((resolve) => (timer = setTimeout(resolve, SHUTDOWN_FLUSH_MS).unref()));
          await Promise.race([provider.shutdown(), limit]).finally(() => clearTimeout(timer));
        } catch (err) {
          opts.logger.warn({ err: (err as Error).message }, 'trace export shutdown failed');
        } finally {
          trace.disable();
          diag.disable();
        }
      },
    };
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message }, 'tracing could not start; running without it');
    return { ...settings, enabled: false, description: `failed to start: ${(err as Error).message}`, ...OFF };
  }
}
