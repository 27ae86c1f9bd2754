/**
 * ext_proc streams misbehaving: cancelled mid-body, answered after Envoy's message timeout, sent
 * by very slow clients, and thousands at once. However a stream ends, nothing may stay behind: no
 * open stream, no in-flight lease (in the gate or in Redis), no timer.
 * (Half-close and cancel at every phase, and wrong phase orders: test/extproc/protocol.test.ts.)
 */
import assert from 'node:assert/strict';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { describe, test } from 'node:test';
import { Redis } from 'ioredis';
import type { ProcessingRequest } from '../../src/extproc/messages.js';
import { isClosed, isTimedOut, type RawStream } from '../harness/envoy-harness.js';
import { chat, harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { startLatencyProxy } from '../helpers/latency-proxy.js';
import { FALLBACK_CLUSTER, problemWith, sleep } from '../helpers/load.js';
import { startRedis } from '../helpers/redis-server.js';

const FLEET = [
  { id: 'worker_1', cluster: 'worker_1', max_inflight: 5000 },
  { id: 'worker_2', cluster: 'worker_2', max_inflight: 5000 },
];
const REQ = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm' };
const chunk = (text: string, eos = false) => ({ request_body: { body: Buffer.from(text), end_of_stream: eos } }) as ProcessingRequest;
const respHeaders = () => ({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: false } }) as ProcessingRequest;

async function reply(s: RawStream, ms = 3000) {
  const ev = await s.next(ms);
  assert.ok(!isTimedOut(ev), `a reply within ${ms} ms`);
  return ev;
}

async function inflight(g: TestGate): Promise<number> {
  return (await workers(g.admin)).reduce((n, w) => n + w.inflight, 0);
}

async function settled(g: TestGate, timeoutMs = 5000): Promise<void> {
  await waitFor(() => g.extproc.openStreams === 0, timeoutMs, 'no open streams');
  await waitFor(async () => (await inflight(g)) === 0, timeoutMs, 'no in-flight leases');
}

const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

/** A gate on a Redis behind a latency proxy, and a direct client to that Redis. */
async function slowRedisGate(raw: Record<string, unknown>) {
  const redis = await startRedis();
  const proxy = await startLatencyProxy(redis.port);
  const g = await startTestGate({ leases: { ttl_s: 3 }, workers: FLEET, ...raw }, { store: `redis://${proxy.address}` });
  const r = new Redis(redis.port, '127.0.0.1');
  const redisInflight = async () => (await r.zcard('kvgate:{default}:f:worker_1')) + (await r.zcard('kvgate:{default}:f:worker_2'));
  return {
    g,
    proxy,
    redisInflight,
    async close() {
      r.disconnect();
      await g.close(100);
      await proxy.close();
      await redis.stop();
    },
  };
}

describe('cancel mid-body', () => {
  test('streamed body: cancelled between chunks, the lease taken at the headers is released', async () => {
    const g = await startTestGate({ routing: { request_body_mode: 'streamed' }, workers: FLEET });
    const h = harness(g.target, { processingModeOverride: { request_body_mode: 'STREAMED' } });
    try {
      for (let i = 0; i < 2; i++) {
        const s = h.openRawStream();
        s.write(headersMsg({ ...REQ, 'x-session-id': `mid-${i}` }, false) as never);
        assert.ok(routedCluster((await reply(s)) as never), 'decided on the headers');
        s.write(chunk('{"model": "m", "messages": [{"role": "user", "content": "'));
        assert.ok(!isClosed(await reply(s)), "!isClosed(await reply(s))");
        assert.equal(await inflight(g), 1);
        s.cancel();
        await settled(g);
      }
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('buffered body: cancelled while the store decides, the late lease is released in Redis too', async () => {
    const env = await slowRedisGate({ store: { timeout_ms: 1000, refresh_ms: 100 } });
    const h = harness(env.g.target);
    try {
      env.proxy.setLatency(40); // a decision now takes ~80 ms
      for (let i = 0; i < 5; i++) {
        const s = h.openRawStream();
        s.write(headersMsg(REQ, false) as never);
        await reply(s);
        s.write(chunk(`{"user": "cancel-${i}"}`, true));
        await sleep(20);
        s.cancel(); // Envoy resets the stream before the body's reply arrives
      }
      await waitFor(() => env.g.results.length >= 5, 3000, 'the decisions completed');
      await settled(env.g);
      await waitFor(async () => (await env.redisInflight()) === 0, 3000, 'no lease left in Redis');
    } finally {
      h.close();
      await env.close();
    }
  });
});

describe('the message timeout exceeded (a store slower than Envoy waits)', () => {
  // Misconfigured on purpose: store.timeout_ms above Envoy's message_timeout, on a Redis
  // answering in ~800 ms. Envoy gives up on the gate first.
  const raw = { store: { timeout_ms: 2000, refresh_ms: 60_000 } };

  test('fail-open: Envoy routes by its fallback route; fail-closed: 504; the late decision leaks nothing', async () => {
    const env = await slowRedisGate(raw);
    const open = harness(env.g.target, { extProcOverride: { messageTimeoutMs: 200 } });
    const closed = harness(env.g.target, { extProcOverride: { messageTimeoutMs: 200, failureModeAllow: false } });
    try {
      await open.request(chat({ session: 'warm' })); // script loaded, view filled
      env.proxy.setLatency(400);
      const [o, c] = await Promise.all([open.request(chat({ session: 'late-open' })), closed.request(chat({ session: 'late-closed' }))]);
      assert.equal(o.kind, 'upstream');
      assert.equal(o.cluster, FALLBACK_CLUSTER);
      assert.equal(o.stats?.messageTimeouts, 1);
      assert.equal(o.stats?.failureModeAllowed, 1);
      assert.equal(c.kind, 'local');
      assert.equal(c.kind === 'local' && c.status, 504);
      assert.equal(c.kind === 'local' && c.details, 'ext_proc_error_per-message_timeout_exceeded');
      // The gate finishes deciding for streams Envoy already closed, then gives the leases back.
      await waitFor(() => env.g.results.length >= 3, 15_000, 'late decisions');
      env.proxy.setLatency(0);
      await settled(env.g);
      await waitFor(async () => (await env.redisInflight()) === 0, 5000, 'no lease left in Redis');
    } finally {
      open.close();
      closed.close();
      await env.close();
    }
  });

  test('with store.timeout_ms inside the message timeout, the same slow Redis is answered in time', async () => {
    // Redis answers in 2 s, the gate gives it 100 ms, Envoy waits 1 s: the margin is for a loaded
    // CI machine, the property is the same (a store slower than Envoy waits never makes Envoy wait).
    const env = await slowRedisGate({ store: { timeout_ms: 100, refresh_ms: 100 } });
    const h = harness(env.g.target, { extProcOverride: { messageTimeoutMs: 1000 } });
    try {
      await h.request(chat({ session: 'warm' }));
      env.proxy.setLatency(2000);
      const outs = await Promise.all(Array.from({ length: 10 }, (_, i) => h.request(chat({ session: `in-time-${i}` }))));
      for (const o of outs) assert.equal(problemWith(o), undefined, problemWith(o));
    } finally {
      h.close();
      await env.close();
    }
  });
});

describe('very slow clients', () => {
  test('a stream that trickles its body (a chunk every 150 ms) is served to the end', async () => {
    const g = await startTestGate({ routing: { request_body_mode: 'streamed' }, limits: { stream_idle_s: 3 }, workers: FLEET });
    const h = harness(g.target);
    try {
      const s = h.openRawStream();
      s.write(headersMsg({ ...REQ, 'x-session-id': 'trickle' }, false) as never);
      assert.ok(routedCluster((await reply(s)) as never), "routedCluster((await reply(s)) as never)");
      for (let i = 0; i < 8; i++) {
        await sleep(150);
        s.write(chunk(`part ${i} `, i === 7));
        assert.ok(!isClosed(await reply(s)), `chunk ${i} answered`);
      }
      assert.equal(await inflight(g), 1, 'still in flight');
      s.write(respHeaders());
      assert.ok(!isClosed(await reply(s)), "!isClosed(await reply(s))");
      s.end();
      const end = await reply(s);
      assert.ok(isClosed(end) && end.status.code === GrpcStatus.OK, "isClosed(end) && end.status.code === GrpcStatus.OK");
      await settled(g);
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('a client silent past limits.stream_idle_s mid-request: the stream ends DEADLINE_EXCEEDED, the lease is released', async () => {
    // Long enough that a loaded CI machine reads the in-flight count before the sweep ends the stream.
    const g = await startTestGate({ routing: { request_body_mode: 'streamed' }, limits: { stream_idle_s: 1.5 }, workers: FLEET });
    const h = harness(g.target);
    try {
      const s = h.openRawStream();
      s.write(headersMsg({ ...REQ, 'x-session-id': 'silent' }, false) as never);
      await reply(s);
      assert.equal(await inflight(g), 1);
      const ev = await reply(s, 6000);
      assert.ok(isClosed(ev), "isClosed(ev)");
      assert.equal(ev.status.code, GrpcStatus.DEADLINE_EXCEEDED);
      await settled(g);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});

describe('thousands of concurrent streams', () => {
  test('2000 at once, ending every way (complete, half-close, cancel): no stream, lease or timer left', async () => {
    // The default idle limit (600 s): every stream here is started before it ends, so each end
    // must reach the gate on its own, without the idle sweep's help.
    const g = await startTestGate({ workers: FLEET });
    // The message timeout is about latency, not leaks: keep it out of the way on a busy machine.
    // No retry of a refused stream, as behind Envoy: the burst crosses the connection's retirement
    // at its 500th stream, and every stream after it must still be served by kvgate itself (with
    // a plain first GOAWAY nghttp2 ignored them: 832 of 2000 lost, in every run).
    const h = harness(g.target, { extProcOverride: { messageTimeoutMs: 60_000 }, retryRefused: false });
    try {
      await h.request(chat({ session: 'warm' }));
      const baseline = timers();
      const n = 2000;
      const runs = Array.from({ length: n }, async (_, i) => {
        const s = h.openRawStream();
        s.write(headersMsg({ ...REQ, ':method': 'GET', 'x-session-id': `many-${i % 300}` }, true) as never);
        const first = await reply(s, 30_000);
        assert.ok(routedCluster(first as never), `stream ${i} routed: ${JSON.stringify(first)}`);
        if (i % 3 === 0) {
          s.write(respHeaders());
          await reply(s, 30_000);
          s.end();
          await reply(s, 30_000);
        } else if (i % 3 === 1) {
          s.end();
          await reply(s, 30_000);
        } else {
          s.cancel();
        }
      });
      await Promise.all(runs);
      const routed = g.results.filter((r) => r.kind === 'route').length;
      assert.ok(routed >= n, `${routed} routed`);
      await settled(g, 10_000);
      // Allow the odd timer that comes and goes (grpc keepalive, the test's own waits).
      await waitFor(() => timers() <= baseline + 2, 3000, `timers back to baseline (${baseline}, now ${timers()})`);
      // Full requests through the same gate still work.
      const outs = await Promise.all(Array.from({ length: 50 }, (_, i) => h.request(chat({ session: `after-${i}` }))));
      for (const o of outs) assert.equal(problemWith(o), undefined);
      await settled(g);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});

describe('Envoy resets every stream it is done with', () => {
  test('1500 requests at full speed, each ended with END_STREAM then RST_STREAM, keep their connection', async () => {
    // Envoy's default closeStream() half-closes and then resets, once per HTTP request. nghttp2
    // limits incoming resets (a burst of 1000, then 33/s) and tears the whole connection down past
    // it, failing every stream on it. kvgate retires each connection after a second (GOAWAY), so
    // none receives that many. (Found by scripts/soak.ts: ~2% of requests failed at 200 req/s.)
    const g = await startTestGate({ workers: FLEET });
    const h = harness(g.target, { extProcOverride: { messageTimeoutMs: 60_000 } });
    try {
      let n = 0;
      const problems: string[] = [];
      const client = async () => {
        while (n < 1500) {
          const out = await h.request(chat({ session: `reset-${n++ % 100}` }));
          const p = problemWith(out);
          if (p && problems.length < 5) problems.push(p);
        }
      };
      await Promise.all(Array.from({ length: 16 }, () => client()));
      assert.deepEqual(problems, []);
      await settled(g);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});
