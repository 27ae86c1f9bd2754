/**
 * The idle sweep (limits.stream_idle_s) reclaims streams whose peer went quiet, but a stream still
 * waiting for kvgate's own answer is not idle: a store slower than the idle limit must not get
 * the request failed under it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { startLatencyProxy, type LatencyProxy } from '../helpers/latency-proxy.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const IDLE_S = 0.4;

describe('idle sweep and a slow decision', () => {
  let redis: TestRedis;
  let proxy: LatencyProxy;
  let g: TestGate;
  let h: EnvoyHarness;
  before(async () => {
    redis = await startRedis();
    proxy = await startLatencyProxy(redis.port);
    g = await startTestGate(
      { limits: { stream_idle_s: IDLE_S }, store: { timeout_ms: 5000 }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] },
      { store: `redis://${proxy.address}` },
    );
    h = harness(g.target);
  });
  after(async () => {
    h.close();
    await g.close(100);
    await proxy.close();
    await redis.stop();
  });

  test('a request whose store answers slower than stream_idle_s is routed, not failed by the sweep', async () => {
    proxy.setLatency(300);
    try {
      const s = h.openRawStream();
      const t0 = Date.now();
      s.write(headersMsg({ ':method': 'GET', ':path': '/v1/models', ':scheme': 'http', ':authority': 'llm', 'x-session-id': 'slow-store' }, true) as never);
      const ev = await s.next(4000);
      const took = Date.now() - t0;
      assert.ok(!isTimedOut(ev), 'an answer within 4 s');
      assert.ok(took > IDLE_S * 1000 * 1.5, `the decision outlasted the idle limit (${took} ms), so the sweep had its chance`);
      assert.ok(!isClosed(ev), `routed, not ended (${isClosed(ev) ? ev.status.details : ''})`);
      assert.ok(routedCluster(ev), 'a routing reply');
      s.end();
      await waitFor(() => g.extproc.openStreams === 0, 2000, 'no open streams');
    } finally {
      proxy.setLatency(0);
    }
    await waitFor(async () => (await workers(g.admin)).every((w) => w.inflight === 0), 2000, 'no in-flight leases');
  });
});
