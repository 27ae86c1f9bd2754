/**
 * Worker signals end to end: real `kvgate fake-worker` processes, two gate replicas sharing one real Redis,
 * the Envoy harness in front. A worker past 85% KV use gets no new sessions and keeps its hot ones
 * while its cold ones move (one offload event each on the Redis Stream); a worker whose metrics go
 * stale is routed around within 2 s and comes back when fresh; everything pressured sheds at once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { hashSessionId } from '../../src/request/hashing.js';
import type { RedisStore } from '../../src/state/redis-store.js';
import type { InstrumentedStore } from '../../src/telemetry/instrumented-store.js';
import type { EnvoyHarness } from '../harness/envoy-harness.js';
import { chat, clusterOf, harness, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { startFakeWorkerProcess, type FakeWorkerProcess } from '../helpers/fake-worker-process.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

let redis: TestRedis;
let m: FakeWorkerProcess[];
let a: TestGate;
let b: TestGate;
let ha: EnvoyHarness;
let hb: EnvoyHarness;

before(async () => {
  redis = await startRedis();
  m = await Promise.all([1, 2, 3].map((i) => startFakeWorkerProcess(`w${i}`, ['--kv-usage', '0.1'])));
  const config = {
    store: { timeout_ms: 1000 },
    // One migration round per pressure episode in this test, moving half of the sessions.
    migration: { fraction: 0.5, interval_ms: 60_000 },
    workers: m.map((s, i) => ({ id: `w${i + 1}`, cluster: `worker_${i + 1}`, max_inflight: 8, metrics_url: s.metricsUrl })),
  };
  [a, b] = await Promise.all([startTestGate(config, { store: redis.url }), startTestGate(config, { store: redis.url })]);
  ha = harness(a.target);
  hb = harness(b.target);
});
after(async () => {
  ha.close();
  hb.close();
  await a.close(100);
  await b.close(100);
  await Promise.all(m.map((s) => s.stop()));
  await redis.stop();
});

const stateOf = async (g: TestGate, id: string) => (await workers(g.admin)).find((w) => w.id === id)?.state;

describe('worker load and health', () => {
  test('the replicas share the scraping and report the same worker states', async () => {
    // Both replicas, not only the first: until a replica's first read of the shared signals it has
    // no fresh scrape of the workers another replica scrapes, and reports them down (the full
    // suite on two busy cores once caught the second replica there).
    const healthy = async (g: TestGate) => (await workers(g.admin)).every((w) => w.state === 'healthy');
    await waitFor(async () => (await healthy(a)) && (await healthy(b)), 3000, 'all healthy on both replicas');
    // Once both have heartbeated, each worker is scraped by exactly one replica.
    const owned = () => [...a.collector.ownedWorkers, ...b.collector.ownedWorkers].sort().join(',');
    await waitFor(() => owned() === 'w1,w2,w3', 3000, 'disjoint ownership');
    assert.deepEqual((await workers(a.admin)).map((w) => w.state), (await workers(b.admin)).map((w) => w.state));
  });

  test('a worker past 85% KV gets no new sessions, keeps its hot ones, and its cold ones move with one offload event each', async () => {
    // New sessions until worker_1 holds at least four: where each lands depends on the load the
    // replicas see at that moment, so a fixed count of sessions gave it three on a busy machine.
    const home = new Map<string, string>();
    const onWorker1 = () => [...home].filter(([, c]) => c === 'worker_1').map(([s]) => s);
    for (let i = 0; i < 60 && (i < 18 || onWorker1().length < 4); i++) {
      const out = await (i % 2 ? ha : hb).request(chat({ session: `conv-${i}` }));
      home.set(`conv-${i}`, out.cluster!);
    }
    const onW1 = onWorker1();
    assert.ok(onW1.length >= 4, `some sessions on worker_1 (${onW1.length})`);
    // A round moves the coldest half (migration.fraction 0.5, rounded up); the rest are active again
    // just before the pressure: they are the hot ones.
    const hot = onW1.slice(Math.ceil(onW1.length * 0.5));
    for (const s of hot) assert.equal((await ha.request(chat({ session: s, text: 'still here' }))).cluster, 'worker_1');

    await m[0]!.control({ kv_usage: 0.91 });
    await waitFor(async () => (await stateOf(a, 'w1')) === 'pressured' && (await stateOf(b, 'w1')) === 'pressured', 3000, 'w1 pressured on both replicas');

    const raw = new Redis(redis.url);
    try {
      const stream = ((a.store as InstrumentedStore).wrapped as RedisStore).offloadStreamKey(a.gate.pool);
      const cold = onW1.slice(0, onW1.length - hot.length);
      await waitFor(async () => (await raw.xlen(stream)) >= cold.length, 3000, 'offload events');
      const entries = await raw.xrange(stream, '-', '+');
      const events = entries.map(([, f]) => Object.fromEntries(f.flatMap((v, i) => (i % 2 ? [] : [[v, f[i + 1]]]))) as Record<string, string>);
      assert.equal(events.length, cold.length, 'one event per moved session');
      assert.deepEqual(events.map((e) => e['session']).sort(), cold.map((s) => hashSessionId(s)).sort(), 'the cold sessions moved');
      for (const e of events) {
        assert.equal(e['from'], 'w1');
        assert.ok(['w2', 'w3'].includes(e['to']!));
        assert.equal(e['reason'], 'kv_pressure');
        assert.ok(Number(e['time']) > 0, "Number(e['time']) > 0");
      }
      for (const s of cold) assert.notEqual(clusterOf(await hb.request(chat({ session: s, text: 'moved?' }))), 'worker_1', `${s} moved`);
    } finally {
      raw.disconnect();
    }
    for (const s of hot) assert.equal((await hb.request(chat({ session: s, text: 'hot' }))).cluster, 'worker_1', `${s} keeps its worker`);
    for (let i = 0; i < 12; i++) assert.notEqual(clusterOf(await ha.request(chat({ session: `fresh-${i}` }))), 'worker_1', 'no new sessions');

    await m[0]!.control({ kv_usage: 0.2 });
    await waitFor(async () => (await stateOf(a, 'w1')) === 'healthy', 3000, 'w1 healthy again');
  });

  test('a worker whose metrics go stale is routed around within 2 s and comes back when fresh', async () => {
    await m[1]!.control({ metrics: 'timeout' });
    const t0 = Date.now();
    await waitFor(async () => (await stateOf(a, 'w2')) === 'down', 4000, 'w2 down');
    const took = Date.now() - t0;
    assert.ok(took <= 2500, `down after ${took} ms`);
    // The other replica reads the same shared signals on its next read (every 100 ms).
    await waitFor(async () => (await stateOf(b, 'w2')) === 'down', 1000, 'both replicas agree');
    for (let i = 0; i < 9; i++) assert.notEqual(clusterOf(await ha.request(chat({ session: `stale-${i}` }))), 'worker_2');
    await m[1]!.control({ metrics: 'ok' });
    await waitFor(async () => (await stateOf(a, 'w2')) === 'healthy', 3000, 'w2 back');
  });

  test('garbage or error pages count as failed scrapes: down, never healthy on no data', async () => {
    for (const mode of ['garbage', 'error', 'empty', 'nan', 'negative'] as const) {
      await m[2]!.control({ metrics: mode });
      await waitFor(async () => (await stateOf(a, 'w3')) === 'down', 3000, `w3 down on ${mode}`);
      await m[2]!.control({ metrics: 'ok' });
      await waitFor(async () => (await stateOf(a, 'w3')) === 'healthy', 3000, 'w3 back');
    }
  });

  test('every worker pressured or full: 429 at once', async () => {
    for (const s of m) await s.control({ kv_usage: 0.95 });
    await waitFor(async () => (await workers(a.admin)).every((w) => w.state === 'pressured'), 3000, 'all pressured');
    const t0 = Date.now();
    const out = await ha.request(chat({ session: 'nobody-home' }));
    assert.equal(out.kind === 'local' && out.status, 429);
    assert.ok(Date.now() - t0 < 1000, "Date.now() - t0 < 1000");
    for (const s of m) await s.control({ kv_usage: 0.1 });
    await waitFor(async () => (await workers(a.admin)).every((w) => w.state === 'healthy'), 3000, 'all healthy again');
  });

  test('the admin API shows each worker’s signals and their age', async () => {
    const ws = (await (await fetch(`${a.admin}/workers`)).json()) as { workers: Array<{ id: string; signals: { kv_usage: number; age_ms: number } }> };
    for (const w of ws.workers) {
      assert.equal(typeof w.signals.kv_usage, 'number');
      assert.ok(w.signals.age_ms >= 0 && w.signals.age_ms < 2000, "w.signals.age_ms >= 0 && w.signals.age_ms < 2000");
    }
  });
});
