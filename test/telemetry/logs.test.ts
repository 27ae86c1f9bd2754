/**
 * Logs: every pino line about a request carries the request's trace_id and span_id (kvgate's span
 * when tracing exports, Envoy's when only Envoy traces); prompts are never logged and session ids
 * only as hashes.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { context, createContextKey, ROOT_CONTEXT } from '@opentelemetry/api';
import { hashSessionId } from '../../src/request/hashing.js';
import { startTracing } from '../../src/telemetry/tracing.js';
import { chat, harness, headersMsg, waitFor } from '../helpers/envoy.js';
import { setWorkerState, startTestGate } from '../helpers/gate.js';
import { startLatencyProxy } from '../helpers/latency-proxy.js';
import { recordingLogger, silentLogger } from '../helpers/logger.js';
import { startRedis } from '../helpers/redis-server.js';
import { OtlpReceiver } from './otlp-receiver.js';

const hex = (n: number) => randomBytes(n).toString('hex');
const SECRETS = ['session-secret-42', 'alice@example.com', 'my very private prompt', 'top secret system prompt'];

/** Lines about a request: written by a stream's logger or by the gate while deciding. */
const aboutRequest = (l: Record<string, unknown>) => l['stream'] !== undefined || l['component'] === 'gate';

describe('request logs', () => {
  test('carry the trace and span ids of the request; no prompt, no raw session id', async () => {
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate(
      { limits: { malformed_body: 'forward' }, workers: [{ id: 'w1', cluster: 'worker_1', max_inflight: 1 }] },
      { logger },
    );
    const envoyTrace = hex(16);
    const envoySpan = hex(8);
    const h = harness(g.target, { grpcMetadata: { traceparent: `00-${envoyTrace}-${envoySpan}-01` } });
    try {
      await h.request(chat({ session: SECRETS[0], system: SECRETS[3], text: SECRETS[2] }));
      await h.request(chat({ user: SECRETS[1], text: SECRETS[2] }));
      // Malformed body: an info line from the gate.
      await h.request({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: `{"messages": "${SECRETS[2]}` });
      // Shed: debug lines from the gate and the stream.
      await setWorkerState(g.admin, 'w1', 'down');
      await h.request(chat({ session: SECRETS[0], text: SECRETS[2] }));
      // A protocol violation after the headers: a warning from the stream.
      const raw = h.openRawStream();
      raw.write(headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions', 'x-session-id': SECRETS[0]! }, false) as never);
      await raw.next(3000);
      raw.write(headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions' }, false) as never);
      await raw.next(3000);
      await waitFor(() => lines.some((l) => l['msg'] === 'ending ext_proc stream'), 3000, 'the protocol warning');

      const about = lines.filter(aboutRequest);
      const msgs = new Set(about.map((l) => l['msg']));
      for (const m of ['routed', 'request body unusable; routing without a body key', 'shed', 'answered immediately', 'ending ext_proc stream']) {
        assert.ok(msgs.has(m), `logged "${m}" (got ${[...msgs].join(' | ')})`);
      }
      for (const l of about) {
        assert.equal(l['trace_id'], envoyTrace, `trace_id on "${String(l['msg'])}"`);
        // Export off: kvgate's span does not record; the ids are Envoy's.
        assert.equal(l['span_id'], envoySpan, `span_id on "${String(l['msg'])}"`);
      }
      const routed = about.find((l) => l['msg'] === 'routed')!;
      assert.equal(routed['key_hash'], hashSessionId(SECRETS[0]!));
      const all = JSON.stringify(lines);
      for (const s of SECRETS) assert.ok(!all.includes(s), `"${s}" never logged`);
      // Lines not about a request (startup) carry no ids.
      const serving = lines.find((l) => l['msg'] === 'kvgate serving');
      assert.equal(serving?.['trace_id'], undefined);
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('with export on, log lines name kvgate’s own exported span', async () => {
    const receiver = await new OtlpReceiver().start();
    // The SDK's exporter reads OTEL_* from process.env itself; set them for its start only.
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '20' };
    Object.assign(process.env, otel);
    const tracing = await startTracing({ logger: silentLogger() }).finally(() => {
      for (const k of Object.keys(otel)) delete process.env[k];
    });
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] }, { logger });
    const envoyTrace = hex(16);
    const h = harness(g.target, { grpcMetadata: { traceparent: `00-${envoyTrace}-${hex(8)}-01` } });
    try {
      await h.request(chat({ session: 'exported' }));
      await waitFor(() => receiver.spans.some((s) => s.traceId === envoyTrace), 5000, 'the span');
      const span = receiver.spans.find((s) => s.traceId === envoyTrace)!;
      const routed = lines.find((l) => l['msg'] === 'routed')!;
      assert.equal(routed['trace_id'], envoyTrace);
      assert.equal(routed['span_id'], span.spanId, 'the log line points at the kvgate.route span');
      const key = createContextKey('probe');
      assert.equal(context.with(ROOT_CONTEXT.setValue(key, 1), () => context.active().getValue(key)), undefined, 'no context manager with export on either');
    } finally {
      h.close();
      await g.close(100);
      await tracing.shutdown();
      await receiver.close();
    }
  });
  test('a line the store writes about a request, after an await, carries its trace ids', async () => {
    // Redis answers later than store.timeout_ms: the commit fails after awaiting Redis, and the
    // Redis store says so (once a minute) while the request goes on on local state. No refresh
    // runs meanwhile (its failure would take the once-a-minute line first).
    const redis = await startRedis();
    const proxy = await startLatencyProxy(redis.port);
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate(
      { store: { timeout_ms: 100, refresh_ms: 600_000 }, workers: [{ id: 'w1', cluster: 'worker_1' }] },
      { logger, store: `redis://${proxy.address}` },
    );
    const envoyTrace = hex(16);
    const envoySpan = hex(8);
    const h = harness(g.target, { grpcMetadata: { traceparent: `00-${envoyTrace}-${envoySpan}-01` } });
    try {
      proxy.setLatency(300);
      const out = await h.request(chat({ session: 'slow-store' }));
      assert.equal(out.kind, 'upstream');
      const last = g.results.at(-1)!;
      assert.ok(last.kind === 'route' && last.degraded, 'decided on local state: the commit did fail');
      const line = lines.find((l) => l['msg'] === 'redis commit failed; routing on local state');
      assert.ok(line, `the store's line (got ${lines.map((l) => l['msg']).join(' | ')})`);
      assert.equal(line['component'], 'redis-store');
      assert.equal(line['trace_id'], envoyTrace);
      assert.equal(line['span_id'], envoySpan);
      // The gate's line after the same await carries them too.
      const routed = lines.find((l) => l['msg'] === 'routed' && l['degraded'] === true);
      assert.equal(routed?.['trace_id'], envoyTrace);
    } finally {
      h.close();
      proxy.setLatency(0);
      await g.close(100);
      await proxy.close();
      await redis.stop();
    }
  });

  test('a knob problem is logged with the ids of the request that showed it', async () => {
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] }, { logger });
    const envoyTrace = hex(16);
    const envoySpan = hex(8);
    const h = harness(g.target, { grpcMetadata: { traceparent: `00-${envoyTrace}-${envoySpan}-01`, 'x-kvgate-colour': 'blue' } });
    try {
      assert.equal((await h.request(chat({ session: 'knobbed' }))).kind, 'upstream');
      const line = lines.find((l) => String(l['msg']).startsWith('knob rejected'));
      assert.ok(line, `the knob line (got ${lines.map((l) => l['msg']).join(' | ')})`);
      assert.equal(line['key'], 'x-kvgate-colour');
      assert.equal(line['trace_id'], envoyTrace);
      assert.equal(line['span_id'], envoySpan);
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('lines of requests in flight at once each carry their own ids', async () => {
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] }, { logger });
    const traces = Array.from({ length: 8 }, () => ({ trace: hex(16), span: hex(8) }));
    const harnesses = traces.map((t) => harness(g.target, { grpcMetadata: { traceparent: `00-${t.trace}-${t.span}-01` } }));
    try {
      await Promise.all(harnesses.map((h, i) => h.request(chat({ session: `s-${i}`, text: 'x'.repeat(2000) }))));
      const routed = lines.filter((l) => l['msg'] === 'routed');
      assert.equal(routed.length, traces.length);
      const byHash = new Map(routed.map((l) => [l['key_hash'], l]));
      traces.forEach((t, i) => {
        const l = byHash.get(hashSessionId(`s-${i}`));
        assert.equal(l?.['trace_id'], t.trace, `request ${i}'s line names its own trace`);
        assert.equal(l?.['span_id'], t.span);
      });
    } finally {
      for (const h of harnesses) h.close();
      await g.close(100);
    }
  });

  test('no async context manager is installed: ids travel with the request, not through async hooks', async () => {
    // An AsyncLocalStorage context manager runs async hooks on every promise of the process
    // (src/telemetry/tracing.ts, installTraceContext): the lines above must get their ids without one.
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] });
    try {
      const key = createContextKey('probe');
      assert.equal(context.with(ROOT_CONTEXT.setValue(key, 1), () => context.active().getValue(key)), undefined, 'context.with is the no-op manager’s');
    } finally {
      await g.close(100);
    }
  });
});
