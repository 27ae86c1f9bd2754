/**
 * Tracing: kvgate's spans reach a receiver that speaks OTLP (HTTP/JSON, HTTP/protobuf, gRPC), as
 * children of the trace context Envoy puts in the ext_proc call's gRPC metadata, carrying the
 * decision. Export is configured only by OTEL_* variables, is off without them, and never fails
 * a request.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { GateResult } from '../../src/gate/gate.js';
import { KvgateError } from '../../src/errors.js';
import { hashSessionId } from '../../src/request/hashing.js';
import { decisionAttributes, outcomeOf } from '../../src/telemetry/request-telemetry.js';
import { diagLevel, diagToPino, startTracing, tracingRequested, type Tracing } from '../../src/telemetry/tracing.js';
import { DiagLogLevel } from '@opentelemetry/api';
import { pino } from 'pino';
import { DEFAULTS } from '../../src/config/defaults.js';
import { chat, harness, waitFor } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { startGateProcess, writeConfig } from '../helpers/gate-process.js';
import { silentLogger } from '../helpers/logger.js';
import { refusedPort } from '../helpers/refused-port.js';
import { startRedis } from '../helpers/redis-server.js';
import { OtlpReceiver, type ReceivedSpan } from './otlp-receiver.js';

const FLEET = {
  workers: [
    { id: 'w1', cluster: 'worker_1', max_inflight: 4 },
    { id: 'w2', cluster: 'worker_2', max_inflight: 4 },
  ],
};

const hex = (bytes: number) => randomBytes(bytes).toString('hex');
const traceparent = (traceId: string, spanId: string) => `00-${traceId}-${spanId}-01`;

/** OTEL_* for the in-process SDK; a short batch delay so spans arrive within the test. */
function otelEnv(endpoint: string, protocol: string): NodeJS.ProcessEnv {
  return { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: protocol, OTEL_BSP_SCHEDULE_DELAY: '20' };
}

/** The SDK's exporters read OTEL_* from process.env themselves, as in production. */
async function withEnv<T>(env: NodeJS.ProcessEnv, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe('tracing over OTLP', () => {
  let receiver: OtlpReceiver;
  before(async () => {
    receiver = await new OtlpReceiver().start();
  });
  after(async () => {
    await receiver.close();
  });

  const spansOf = (traceId: string): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === traceId);

  test('OTLP/HTTP JSON: one span per request, child of the ext_proc call metadata, with the decision', async () => {
    const tracing = await withEnv(otelEnv(receiver.httpEndpoint, 'http/json'), () => startTracing({ logger: silentLogger() }));
    assert.equal(tracing.enabled, true);
    const g = await startTestGate(FLEET);
    const envoyTrace = hex(16);
    const envoySpan = hex(8);
    const h = harness(g.target, { grpcMetadata: { traceparent: traceparent(envoyTrace, envoySpan), tracestate: 'envoy=1' } });
    const clientTrace = hex(16);
    const clientSpan = hex(8);
    const plain = harness(g.target);
    try {
      assert.equal((await h.request(chat({ session: 'trace-me', text: 'a private prompt' }))).kind, 'upstream');
      assert.equal((await h.request(chat({ session: 'trace-me' }))).kind, 'upstream');
      // No trace context on the ext_proc call: the client's own traceparent header is the parent.
      const get = { method: 'GET', path: '/v1/models', headers: { traceparent: traceparent(clientTrace, clientSpan) } };
      assert.equal((await plain.request(get)).kind, 'upstream');
      await waitFor(() => spansOf(envoyTrace).length >= 2 && spansOf(clientTrace).length >= 1, 5000, 'spans at the receiver');

      const [first, second] = spansOf(envoyTrace).sort((a, b) => String(a.attributes['kvgate.outcome']).localeCompare(String(b.attributes['kvgate.outcome'])));
      assert.ok(first && second, "first && second");
      for (const s of [first, second]) {
        assert.equal(s.name, 'kvgate.route');
        assert.equal(s.parentSpanId, envoySpan, 'parent is the span in the ext_proc call metadata');
        assert.equal(s.kind, 2, 'SPAN_KIND_SERVER');
        assert.equal(s.scope, 'kvgate');
        assert.equal(s.resource['service.name'], 'kvgate');
        assert.equal(s.attributes['kvgate.trace_parent'], 'grpc_metadata');
        assert.equal(s.attributes['kvgate.key.kind'], 'session');
        assert.equal(s.attributes['kvgate.key.source'], 'header');
        assert.equal(s.attributes['kvgate.key.hash'], hashSessionId('trace-me'));
        assert.deepEqual(s.attributes['kvgate.candidates'], ['w1', 'w2']);
        assert.deepEqual(s.attributes['kvgate.candidates.max_inflight'], [4, 4]);
        assert.deepEqual(s.attributes['kvgate.candidates.state'], ['healthy', 'healthy']);
        assert.equal(typeof s.attributes['kvgate.store.duration_ms'], 'number');
        assert.equal(s.attributes['kvgate.store.calls'], 1, 'one commit on the memory store');
        assert.equal(s.attributes['kvgate.degraded'], false);
        assert.equal(s.attributes['http.request.method'], 'POST');
        assert.equal(s.attributes['url.path'], '/v1/chat/completions');
        // The model the body asks for, under the GenAI conventions' name.
        assert.equal(s.attributes['gen_ai.request.model'], 'llama');
        // The stable RPC conventions, not the deprecated `rpc.system` / `rpc.service`.
        assert.equal(s.attributes['rpc.system.name'], 'grpc');
        assert.equal(s.attributes['rpc.method'], 'envoy.service.ext_proc.v3.ExternalProcessor/Process');
        assert.equal(s.attributes['rpc.system'], undefined);
        assert.equal(s.attributes['rpc.service'], undefined);
        assert.equal(typeof s.resource['service.instance.id'], 'string', 'replicas are told apart');
        assert.equal(typeof s.resource['host.name'], 'string');
      }
      assert.equal(first.attributes['kvgate.outcome'], 'affinity_hit');
      assert.equal(second.attributes['kvgate.outcome'], 'new');
      // The second request saw the first one's lease (released at response headers, so 0 again).
      assert.equal(first.attributes['kvgate.worker'], second.attributes['kvgate.worker']);
      assert.equal(first.attributes['kvgate.cluster'], g.results[0]!.kind === 'route' ? g.results[0]!.cluster : '');
      assert.deepEqual(second.attributes['kvgate.candidates.inflight'], [0, 0]);
      // Nothing private rides along.
      assert.ok(!JSON.stringify(receiver.spans).includes('trace-me'), 'no raw session id');
      assert.ok(!JSON.stringify(receiver.spans).includes('private prompt'), 'no prompt text');

      const [fromHeaders] = spansOf(clientTrace);
      assert.equal(fromHeaders?.parentSpanId, clientSpan);
      assert.equal(fromHeaders?.attributes['kvgate.trace_parent'], 'request_headers');
      assert.equal(fromHeaders?.attributes['kvgate.outcome'], 'unkeyed');
      assert.equal(fromHeaders?.attributes['kvgate.key.kind'], 'none');
      assert.equal(fromHeaders?.attributes['gen_ai.request.model'], undefined, 'a GET has no body, so no model');
    } finally {
      h.close();
      plain.close();
      await g.close(100);
      await tracing.shutdown();
    }
  });

  test('sheds and store failures are on the span: an event per store error, degraded routing', async () => {
    const redis = await startRedis();
    const tracing = await withEnv(otelEnv(receiver.httpEndpoint, 'http/json'), () => startTracing({ logger: silentLogger() }));
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1', max_inflight: 1 }] }, { store: redis.url });
    const traceId = hex(16);
    const h = harness(g.target, { grpcMetadata: { traceparent: traceparent(traceId, hex(8)) } });
    try {
      await redis.kill();
      const out = await h.request(chat({ session: 'while-redis-is-down' }));
      assert.equal(out.kind, 'upstream', 'a dead store never fails the request');
      await waitFor(() => spansOf(traceId).length >= 1, 5000, 'the degraded span');
      const [s] = spansOf(traceId);
      assert.equal(s!.attributes['kvgate.degraded'], true);
      assert.ok(Number(s!.attributes['kvgate.store.errors']) >= 1, "Number(s!.attributes['kvgate.store.errors']) >= 1");
      const ev = s!.events.find((e) => e.name === 'store_error');
      assert.ok(ev, `a store_error event (events: ${JSON.stringify(s!.events)})`);
      assert.equal(ev.attributes['kvgate.store.operation'], 'commit');
    } finally {
      h.close();
      await g.close(100);
      await tracing.shutdown();
      await redis.stop();
    }
  });

  test('a shed is a span too, with its status and reason', async () => {
    const tracing = await withEnv(otelEnv(receiver.httpEndpoint, 'http/json'), () => startTracing({ logger: silentLogger() }));
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] });
    const traceId = hex(16);
    const h = harness(g.target, { grpcMetadata: { traceparent: traceparent(traceId, hex(8)) } });
    try {
      await fetch(`${g.admin}/workers/w1/state`, { method: 'PUT', body: JSON.stringify({ state: 'down' }) });
      const out = await h.request(chat({ session: 'nobody-home' }));
      assert.equal(out.kind === 'local' && out.status, 503);
      await waitFor(() => spansOf(traceId).length >= 1, 5000, 'the shed span');
      const s = spansOf(traceId)[0]!;
      assert.equal(s.attributes['kvgate.outcome'], 'shed');
      assert.equal(s.attributes['kvgate.response.status'], 503);
      assert.equal(s.attributes['kvgate.reject.code'], 'no_healthy_workers');
      assert.deepEqual(s.attributes['kvgate.candidates.state'], ['down']);
      // Which pool had nobody to take it, and why (the rule), as for a routed request.
      assert.equal(s.attributes['kvgate.pool'], 'default');
      assert.equal(s.attributes['kvgate.rule'], 'shed');
      // A 503 is a failure seen from the client: the span is in error, for Jaeger's error filter.
      assert.equal(s.status.code, 2, 'STATUS_CODE_ERROR');
      assert.equal(s.attributes['error.type'], 'no_healthy_workers');
    } finally {
      h.close();
      await g.close(100);
      await tracing.shutdown();
    }
  });

  test("B3 context from Envoy's Zipkin tracer (multi- and single-header) is the parent too", async () => {
    const tracing = await withEnv(otelEnv(receiver.httpEndpoint, 'http/json'), () => startTracing({ logger: silentLogger() }));
    const g = await startTestGate(FLEET);
    const multiTrace = hex(16);
    const multiSpan = hex(8);
    const singleTrace = hex(16);
    const singleSpan = hex(8);
    const multi = harness(g.target, { grpcMetadata: { 'x-b3-traceid': multiTrace, 'x-b3-spanid': multiSpan, 'x-b3-sampled': '1' } });
    const single = harness(g.target, { grpcMetadata: { b3: `${singleTrace}-${singleSpan}-1` } });
    try {
      assert.equal((await multi.request(chat({ session: 'zipkin-multi' }))).kind, 'upstream');
      assert.equal((await single.request(chat({ session: 'zipkin-single' }))).kind, 'upstream');
      await waitFor(() => spansOf(multiTrace).length >= 1 && spansOf(singleTrace).length >= 1, 5000, 'spans under the B3 traces');
      assert.equal(spansOf(multiTrace)[0]!.parentSpanId, multiSpan);
      assert.equal(spansOf(multiTrace)[0]!.attributes['kvgate.trace_parent'], 'grpc_metadata');
      assert.equal(spansOf(singleTrace)[0]!.parentSpanId, singleSpan);
    } finally {
      multi.close();
      single.close();
      await g.close(100);
      await tracing.shutdown();
    }
  });

  test('without OTEL_BSP_MAX_EXPORT_BATCH_SIZE, spans go out in batches of kvgate\'s size, not the SDK\'s 512', async () => {
    // A long schedule delay: only a full batch (or the shutdown flush) exports.
    const env = { ...otelEnv(receiver.httpEndpoint, 'http/json'), OTEL_BSP_SCHEDULE_DELAY: '60000' };
    const tracing = await withEnv(env, () => startTracing({ logger: silentLogger() }));
    const g = await startTestGate(FLEET);
    const traceId = hex(16);
    const h = harness(g.target, { grpcMetadata: { traceparent: traceparent(traceId, hex(8)) } });
    try {
      for (let i = 0; i < DEFAULTS.traceExportBatchSize; i++) await h.request(chat({ session: `batch-${i}` }));
      await waitFor(() => spansOf(traceId).length >= DEFAULTS.traceExportBatchSize, 5000, 'one full batch exported before the schedule delay');
    } finally {
      h.close();
      await g.close(100);
      await tracing.shutdown();
    }
  });

  test('OTLP/HTTP protobuf (the spec default): the export carries the span', async () => {
    const tracing = await withEnv(otelEnv(receiver.httpEndpoint, 'http/protobuf'), () => startTracing({ logger: silentLogger() }));
    assert.equal(tracing.protocol, 'http/protobuf');
    const g = await startTestGate(FLEET);
    const traceId = hex(16);
    const h = harness(g.target, { grpcMetadata: { traceparent: traceparent(traceId, hex(8)) } });
    try {
      await h.request(chat({ session: 'proto' }));
      const id = Buffer.from(traceId, 'hex');
      await waitFor(() => receiver.raw.some((r) => r.transport === 'http' && r.body.includes(id)), 5000, 'a protobuf export');
      const exp = receiver.raw.find((r) => r.body.includes(id))!;
      assert.equal(exp.contentType, 'application/x-protobuf');
      assert.ok(exp.body.includes(Buffer.from('kvgate.route')), "exp.body.includes(Buffer.from('kvgate.route'))");
      assert.ok(exp.body.includes(Buffer.from(hashSessionId('proto'))), 'the key hash attribute');
    } finally {
      h.close();
      await g.close(100);
      await tracing.shutdown();
    }
  });

  test('OTLP/gRPC from `kvgate serve`, configured by OTEL_* only; flushed on SIGTERM', async () => {
    const file = writeConfig(FLEET);
    const gate = await startGateProcess(['--config', file], {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.grpcEndpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      OTEL_SERVICE_NAME: 'kvgate-under-test',
      // Long batch delay: only the shutdown flush can deliver the span in time.
      OTEL_BSP_SCHEDULE_DELAY: '60000',
    });
    const traceId = hex(16);
    const h = harness(gate.target, { grpcMetadata: { traceparent: traceparent(traceId, hex(8)) } });
    try {
      assert.equal((await h.request(chat({ session: 'grpc' }))).kind, 'upstream');
      h.close();
      assert.equal(await gate.stop(), 0);
      const id = Buffer.from(traceId, 'hex');
      const exp = receiver.raw.find((r) => r.transport === 'grpc' && r.body.includes(id));
      assert.ok(exp, 'the span was exported over gRPC before exit');
      assert.ok(exp.body.includes(Buffer.from('kvgate-under-test')), 'OTEL_SERVICE_NAME names the service');
      const line = gate.lines.find((l) => l['msg'] === 'tracing');
      assert.equal(line?.['tracing'], true);
    } finally {
      h.close();
      await gate.kill();
    }
  });

  test('an unreachable collector never fails or stalls a request', async () => {
    const refused = await refusedPort();
    const dead = `http://127.0.0.1:${refused.port}`;
    const env = { ...otelEnv(dead, 'http/protobuf'), OTEL_EXPORTER_OTLP_TIMEOUT: '200' };
    const tracing: Tracing = await withEnv(env, () => startTracing({ logger: silentLogger() }));
    const g = await startTestGate(FLEET);
    const h = harness(g.target, { grpcMetadata: { traceparent: traceparent(hex(16), hex(8)) } });
    try {
      for (let i = 0; i < 5; i++) assert.equal((await h.request(chat({ session: `s${i}` }))).kind, 'upstream');
    } finally {
      h.close();
      await g.close(100);
      await tracing.shutdown();
      await refused.release();
    }
  });
});

describe('tracing configuration', () => {
  test('off unless OTEL_* asks for OTLP; protocol from OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL', () => {
    assert.equal(tracingRequested({}).enabled, false);
    assert.equal(tracingRequested({ OTEL_SERVICE_NAME: 'x' }).enabled, false);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318' }).enabled, true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://jaeger:4318/v1/traces' }).enabled, true);
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'otlp' }).enabled, true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_TRACES_EXPORTER: 'none' }).enabled, false);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_SDK_DISABLED: 'true' }).enabled, false);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' }).protocol, 'http/protobuf');
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).protocol, 'grpc');
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' }).protocol, 'http/json');
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_PROTOCOL: 'carrier-pigeon' }).protocol, 'http/protobuf', 'unknown: the spec default');
    assert.match(tracingRequested({ OTEL_EXPORTER_OTLP_PROTOCOL: 'carrier-pigeon' }).warnings.join(), /carrier-pigeon/, '... and said');
  });

  test('empty OTEL_* values count as unset, enumerated values are case-insensitive, and what kvgate cannot honour is a warning', () => {
    // Helm charts and manifests often set variables to "" by default.
    const both = tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318' });
    assert.equal(both.enabled, true);
    assert.match(both.description, /jaeger:4318/);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: '', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).protocol, 'grpc');
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: ' ', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).protocol, 'http/json');
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_PROTOCOL: 'GRPC' }).protocol, 'grpc');
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'OTLP' }).enabled, true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_TRACES_EXPORTER: 'None' }).enabled, false);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_TRACES_EXPORTER: '' }).enabled, false);
    assert.deepEqual(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318' }).warnings, []);
    const console = tracingRequested({ OTEL_TRACES_EXPORTER: 'console' });
    assert.equal(console.enabled, false);
    assert.match(console.warnings.join(), /console.*OTLP only/);
    const noScheme = tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: '127.0.0.1:4318' });
    assert.equal(noScheme.enabled, true);
    assert.match(noScheme.warnings.join(), /no scheme/);
    // gRPC's usual form is host:port: no warning there.
    assert.deepEqual(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'otel-collector:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).warnings, []);
  });

  test("the endpoint's credentials and query string stay out of the startup line and its warnings", () => {
    for (const name of ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']) {
      const on = tracingRequested({ [name]: 'https://user:s3cret@collector.example:4318/v1/traces?api-key=k3y' });
      assert.equal(on.enabled, true);
      assert.equal(on.description, 'OTLP http/protobuf to https://collector.example:4318/v1/traces?…', name);
      const noScheme = tracingRequested({ [name]: 'user:s3cret@collector.example:4318?api-key=k3y' });
      assert.doesNotMatch(JSON.stringify(noScheme), /s3cret|k3y/, `${name}: a warning about the endpoint does not quote its secrets`);
    }
  });

  test('OTEL_LOG_LEVEL sets the SDK diagnostics level; unset or unknown is WARN', () => {
    assert.equal(diagLevel({}), DiagLogLevel.WARN);
    assert.equal(diagLevel({ OTEL_LOG_LEVEL: 'debug' }), DiagLogLevel.DEBUG);
    assert.equal(diagLevel({ OTEL_LOG_LEVEL: 'NONE' }), DiagLogLevel.NONE);
    assert.equal(diagLevel({ OTEL_LOG_LEVEL: 'chatty' }), DiagLogLevel.WARN);
  });

  test('SDK diagnostics that differ only in a count are throttled as one cause', () => {
    const lines: unknown[] = [];
    const logger = pino({ level: 'debug' }, { write: (l: string) => lines.push(JSON.parse(l)) });
    let now = 0;
    const d = diagToPino(logger, () => now);
    d.warn('Dropped 37 spans because maxQueueSize reached');
    d.warn('Dropped 12 spans because maxQueueSize reached');
    d.warn('Dropped 5 spans because maxQueueSize reached');
    assert.equal(lines.length, 1);
    now += 31_000;
    d.warn('Dropped 9 spans because maxQueueSize reached');
    assert.equal(lines.length, 2);
    assert.equal((lines[1] as { repeats_not_logged?: number }).repeats_not_logged, 2);
    d.info('informational');
    assert.equal(lines.length, 3, 'info reaches the log when the level lets it through');
  });

  test('the span says why the worker was chosen: rule, policy, the prompt\'s blocks, the chosen worker\'s own match and each score input', () => {
    // The gate's explanation as the policy builds it: an 8-block prompt, w2 (chosen) holds 3 of
    // them, w1 holds 5 but is fuller. The span must say "w2 matched 3 of 8", not "8".
    const routed: GateResult = {
      kind: 'route',
      pool: 'default',
      worker: 'w2',
      cluster: 'worker_2',
      outcome: 'prefix_hit',
      lease: { id: 'l', pool: 'default', worker: 'w2', shared: true },
      key: { kind: 'prefix', source: 'prompt_prefix', hash: 'abc' },
      degraded: false,
      attempts: 1,
      storeMs: 0,
      explanation: {
        mode: 'both',
        totalBlocks: 8,
        rule: 'scored',
        spilled: true,
        candidates: [
          { worker: 'w1', state: 'healthy', inflight: 7, maxInflight: 8, prefixBlocks: 5, kvUsage: 0.9, work: 12, liveSessions: 4, score: 0.1 },
          { worker: 'w2', state: 'healthy', inflight: 1, maxInflight: 8, prefixBlocks: 3, score: 0.4 },
        ],
      },
      views: [
        { id: 'w1', state: 'healthy', inflight: 7, maxInflight: 8, prefixBlocks: 5 },
        { id: 'w2', state: 'healthy', inflight: 1, maxInflight: 8, prefixBlocks: 3 },
      ],
    };
    const a = decisionAttributes(routed, outcomeOf(routed), {});
    assert.equal(a['kvgate.prefix.matched_blocks'], 3, 'the chosen worker\'s match, not the prompt\'s size');
    assert.equal(a['kvgate.prefix.total_blocks'], 8);
    assert.equal(a['kvgate.rule'], 'scored');
    assert.equal(a['kvgate.policy'], 'both');
    assert.equal(a['kvgate.spilled'], true);
    assert.deepEqual(a['kvgate.candidates.matched_blocks'], [5, 3]);
    assert.deepEqual(a['kvgate.candidates.score'], [0.1, 0.4]);
    assert.deepEqual(a['kvgate.candidates.kv_usage'], [0.9, null], 'null where the worker reports none');
    assert.deepEqual(a['kvgate.candidates.work'], [12, null]);
    assert.deepEqual(a['kvgate.candidates.live_sessions'], [4, 0], 'the sessions term\'s count, 0 where none is live');
    // The model is the client's to write: bounded on the span.
    const long = decisionAttributes({ ...routed, model: 'm'.repeat(5000) }, 'prefix_hit', {});
    assert.equal(String(long['gen_ai.request.model']).length, 256);
    // A shed carries its explanation too: why nobody could take it.
    const shed: GateResult = {
      kind: 'reject',
      error: new KvgateError('overloaded', 'every eligible worker is at its limit'),
      key: undefined,
      explanation: { mode: 'both', totalBlocks: 2, rule: 'shed', spilled: false, candidates: [{ worker: 'w1', state: 'healthy', inflight: 8, maxInflight: 8, prefixBlocks: 0 }] },
      views: [{ id: 'w1', state: 'healthy', inflight: 8, maxInflight: 8, prefixBlocks: 0 }],
    };
    const s = decisionAttributes(shed, 'shed', { status: 429 });
    assert.equal(s['kvgate.rule'], 'shed');
    assert.equal(s['kvgate.prefix.total_blocks'], 2);
    assert.equal(s['kvgate.prefix.matched_blocks'], undefined, 'no worker was chosen');
    assert.equal(s['kvgate.candidates.kv_usage'], undefined, 'no candidate reports it: no array of nulls');
    assert.equal(s['kvgate.candidates.live_sessions'], undefined, 'not counted: no array');
  });

  test('decision attributes ignore an explanation of the wrong shape, and a shed carries its status', () => {
    const base: GateResult = {
      kind: 'route',
      pool: 'default',
      worker: 'w2',
      cluster: 'worker_2',
      outcome: 'new',
      lease: { id: 'l', pool: 'default', worker: 'w2', shared: true },
      key: { kind: 'prefix', source: 'prompt_prefix', hash: 'abc' },
      degraded: false,
      attempts: 1,
      storeMs: 0,
      explanation: { mode: 'both', totalBlocks: 0, rule: 'scored', spilled: false, candidates: [] },
      views: [
        { id: 'w1', state: 'healthy', inflight: 3, maxInflight: 8, prefixBlocks: 1 },
        { id: 'w2', state: 'pressured', inflight: 1, maxInflight: 8, prefixBlocks: 3 },
      ],
    };
    for (const junk of [null, 7, 'x', { candidates: 'no' }, { candidates: [null, 1, { score: 'high' }] }]) {
      const r = { ...base, explanation: junk } as unknown as GateResult;
      const attrs = decisionAttributes(r, outcomeOf(r), {});
      assert.equal(attrs['kvgate.candidates.score'], undefined);
      assert.equal(attrs['kvgate.prefix.matched_blocks'], undefined);
      assert.equal(attrs['kvgate.worker'], 'w2');
    }
    const shed: GateResult = { kind: 'reject', error: new KvgateError('overloaded', 'full'), key: undefined };
    assert.equal(outcomeOf(shed), 'shed');
    assert.equal(decisionAttributes(shed, 'shed', { status: 429 })['kvgate.response.status'], 429);
  });
});
