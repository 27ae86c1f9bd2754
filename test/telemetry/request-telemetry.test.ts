/**
 * RequestTelemetry on its own, against an in-memory span exporter: what a decision that Envoy
 * stopped waiting for counts as, and the span attributes whose values come from the client.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SpanStatusCode, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import type { GateResult } from '../../src/gate/gate.js';
import { KvgateError } from '../../src/errors.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { RequestTelemetry } from '../../src/telemetry/request-telemetry.js';
import { installTraceContext } from '../../src/telemetry/tracing.js';

const ROUTE: GateResult = {
  kind: 'route',
  pool: 'default',
  worker: 'w1',
  cluster: 'worker_1',
  outcome: 'new',
  lease: { id: 'l1', pool: 'default', worker: 'w1', shared: false },
  key: { kind: 'session', source: 'header', hash: 'h' },
  degraded: false,
  attempts: 1,
  storeMs: 0,
  explanation: { mode: 'both', totalBlocks: 0, rule: 'scored', spilled: false, candidates: [] },
  views: [],
};

/** Decisions by outcome, summed over pools (an abandoned decision keeps the pool it named, if any). */
async function decisionCounts(m: Metrics): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const v of (await m.decisions.get()).values) counts[String(v.labels.outcome)] = (counts[String(v.labels.outcome)] ?? 0) + v.value;
  return counts;
}

/** One decision series, outcome and pool, as the pool label sees it. */
async function decisionCount(m: Metrics, outcome: string, pool: string): Promise<number> {
  return (await m.decisions.get()).values.find((v) => v.labels.outcome === outcome && v.labels.pool === pool)?.value ?? 0;
}

describe('request telemetry', () => {
  const exporter = new InMemorySpanExporter();
  before(() => {
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  });
  after(() => {
    trace.disable();
  });

  test('a decision answered after its stream ended counts as abandoned, and its span is in error', async () => {
    exporter.reset();
    const m = new Metrics();
    const t = new RequestTelemetry(m, new Map());
    t.begin(new Map(), { method: 'POST', path: '/v1/chat/completions' });
    t.deciding();
    // Envoy's message timeout: the stream is cancelled while the store is still deciding.
    t.close();
    t.decided(ROUTE);
    const counts = await decisionCounts(m);
    assert.equal(counts['abandoned'], 1);
    assert.equal(counts['new'] ?? 0, 0, 'the route Envoy never applied is not counted as one');
    const [span] = exporter.getFinishedSpans();
    assert.ok(span, "span");
    assert.equal(span.status.code, SpanStatusCode.ERROR);
    assert.equal(span.attributes['kvgate.outcome'], 'abandoned');
    assert.ok(span.events.some((e) => e.name === 'stream ended before a decision'), "span.events.some((e) => e.name === 'stream ended before a decision')");

    // A fallback after the end is abandoned too, once.
    const t2 = new RequestTelemetry(m, new Map());
    t2.begin(new Map(), { method: 'POST', path: '/v1/chat/completions' });
    t2.deciding();
    t2.close();
    t2.fallback(new Error('late'));
    t2.decided(ROUTE);
    const after2 = await decisionCounts(m);
    assert.equal(after2['abandoned'], 2);
    assert.equal(after2['fallback'] ?? 0, 0);
    // The first decision named its pool before Envoy gave up; the late fallback never had one.
    assert.equal(await decisionCount(m, 'abandoned', 'default'), 1);
    assert.equal(await decisionCount(m, 'abandoned', ''), 1);
  });

  test('a stream that ends with no decision under way is not an error, and a decision before the end counts as itself', async () => {
    exporter.reset();
    const m = new Metrics();
    const quiet = new RequestTelemetry(m, new Map());
    quiet.begin(new Map(), { method: 'GET', path: '/v1/models' });
    quiet.close();
    const routed = new RequestTelemetry(m, new Map());
    routed.begin(new Map(), { method: 'POST', path: '/v1/chat/completions' });
    routed.deciding();
    routed.decided(ROUTE);
    routed.close();
    const counts = await decisionCounts(m);
    assert.equal(counts['new'], 1);
    assert.equal(counts['abandoned'] ?? 0, 0);
    const [first, second] = exporter.getFinishedSpans();
    assert.notEqual(first!.status.code, SpanStatusCode.ERROR);
    assert.notEqual(second!.status.code, SpanStatusCode.ERROR);
  });

  test('every span in error says what kind of error (error.type), as the conventions ask of an ERROR status', () => {
    exporter.reset();
    const m = new Metrics();
    const fellBack = new RequestTelemetry(m, new Map());
    fellBack.begin(new Map(), { method: 'POST', path: '/v1/chat/completions' });
    fellBack.deciding();
    fellBack.fallback(new KvgateError('store_unavailable', 'redis is unreachable'));
    const bug = new RequestTelemetry(m, new Map());
    bug.begin(new Map(), { method: 'POST', path: '/v1/chat/completions' });
    bug.deciding();
    bug.fallback(new TypeError('x is undefined'));
    const broken = new RequestTelemetry(m, new Map());
    broken.begin(new Map(), { method: 'POST', path: '/v1/chat/completions' });
    broken.streamError('idle_timeout', new Error('no message for 60 s'));
    const spans = exporter.getFinishedSpans();
    assert.equal(spans.length, 3);
    for (const s of spans) assert.equal(s.status.code, SpanStatusCode.ERROR, s.name);
    assert.deepEqual(
      spans.map((s) => s.attributes['error.type']),
      ['store_unavailable', 'internal', 'idle_timeout'],
    );
  });

  test('method and path attributes are bounded: unknown methods as _OTHER, long paths cut', () => {
    exporter.reset();
    const m = new Metrics();
    const odd = new RequestTelemetry(m, new Map());
    odd.begin(new Map(), { method: 'BREW', path: `/v1/${'x'.repeat(5000)}` });
    odd.close();
    const known = new RequestTelemetry(m, new Map());
    known.begin(new Map(), { method: 'POST', path: '/v1/completions' });
    known.close();
    const [a, b] = exporter.getFinishedSpans();
    assert.equal(a!.attributes['http.request.method'], '_OTHER');
    assert.equal(a!.attributes['http.request.method_original'], 'BREW');
    assert.equal(String(a!.attributes['url.path']).length, 256);
    assert.equal(b!.attributes['http.request.method'], 'POST');
    assert.equal(b!.attributes['http.request.method_original'], undefined);
    assert.equal(b!.attributes['url.path'], '/v1/completions');
  });
});

describe('request telemetry with no tracer provider (export off)', () => {
  before(() => {
    trace.disable();
    installTraceContext();
  });
  const begun = (call: Record<string, string>, headers: Record<string, string>) => {
    const t = new RequestTelemetry(new Metrics(), new Map(Object.entries(call)));
    t.begin(new Map(Object.entries(headers)), { method: 'POST', path: '/v1/chat/completions' });
    return t;
  };
  const [trace1, span1, trace2, span2] = ['0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331', '463ac35c9f6413ad48485a3953bb6124', 'a2fb4a1d1a96d312'];

  test("log lines carry the parent's ids: Envoy's from the call, else the client's, W3C or B3", () => {
    assert.deepEqual(begun({ traceparent: `00-${trace1}-${span1}-01` }, { traceparent: `00-${trace2}-${span2}-01` }).logIds, { trace_id: trace1, span_id: span1 });
    assert.deepEqual(begun({}, { traceparent: `00-${trace2}-${span2}-01` }).logIds, { trace_id: trace2, span_id: span2 });
    assert.deepEqual(begun({}, { 'x-b3-traceid': trace2, 'x-b3-spanid': span2, 'x-b3-sampled': '1' }).logIds, { trace_id: trace2, span_id: span2 });
    assert.deepEqual(begun({ b3: `${trace1}-${span1}-1` }, {}).logIds, { trace_id: trace1, span_id: span1 });
  });

  test('no trace anywhere, or one that does not parse: no ids', () => {
    assert.equal(begun({}, { 'content-type': 'application/json' }).logIds, undefined);
    assert.equal(begun({ traceparent: 'garbage' }, { 'x-b3-sampled': '1' }).logIds, undefined);
  });

  test('the decision is still counted', async () => {
    const m = new Metrics();
    const t = new RequestTelemetry(m, new Map());
    t.begin(new Map(), { method: 'POST', path: '/' });
    t.deciding();
    t.decided(ROUTE);
    t.close();
    assert.equal(await decisionCount(m, 'new', 'default'), 1);
  });
});
