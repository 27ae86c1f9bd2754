/**
 * Signals from workers that cannot be reached, and from gates whose clocks are wrong.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import type { Pool } from '../../src/gate/pools.js';
import { SignalCollector } from '../../src/signals/collector.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { RedisStore } from '../../src/state/redis-store.js';
import { waitFor } from '../helpers/envoy.js';
import { startTestGate, workers } from '../helpers/gate.js';
import { recordingLogger, silentLogger } from '../helpers/logger.js';
import { startMetricsServer } from '../helpers/metrics-server.js';
import { refusedPort } from '../helpers/refused-port.js';
import { startRedis } from '../helpers/redis-server.js';
import { chatRequest } from '../helpers/requests.js';

test('a worker whose metrics endpoint refuses connections is down, with the reason, and the gate routes around it', async () => {
  const dead = await refusedPort();
  const g = await startTestGate({ workers: [{ id: 'gone', cluster: 'worker_1', metrics_url: `http://127.0.0.1:${dead.port}/metrics` }, { id: 'plain', cluster: 'worker_2' }] });
  try {
    await waitFor(async () => (await workers(g.admin)).find((w) => w.id === 'gone')?.state === 'down', 3000, 'down');
    const ws = (await (await fetch(`${g.admin}/workers`)).json()) as { workers: Array<{ id: string; state: string; reasons?: string[] }> };
    const gone = ws.workers.find((w) => w.id === 'gone')!;
    assert.ok(gone.reasons?.some((r) => /failed scrapes|no successful scrape|no metrics/.test(r)), JSON.stringify(gone.reasons));
    assert.equal(ws.workers.find((w) => w.id === 'plain')?.state, 'healthy', 'a worker without metrics is judged by in-flight counts alone');
  } finally {
    await g.close(100);
    await dead.release();
  }
});

test('a DCGM exporter that refuses connections leaves the engine metrics in place: the worker stays healthy, and it is logged', async () => {
  const metrics = await startMetricsServer({ running: 2, waiting: 1, kv: 0.3 });
  const dead = await refusedPort();
  const { logger, lines } = recordingLogger('warn');
  const g = await startTestGate({ workers: [{ id: 'w', cluster: 'worker_1', metrics_url: metrics.url, dcgm_url: `http://127.0.0.1:${dead.port}/metrics` }] }, { logger });
  try {
    await waitFor(async () => (await workers(g.admin)).find((w) => w.id === 'w')?.state === 'healthy', 3000, 'healthy');
    // Well past failures_down (3) scrapes at interval_ms (50).
    await new Promise((r) => setTimeout(r, 600));
    const ws = (await (await fetch(`${g.admin}/workers`)).json()) as { workers: Array<{ id: string; state: string; signals?: { waiting?: number } }> };
    const w = ws.workers.find((x) => x.id === 'w')!;
    assert.equal(w.state, 'healthy', JSON.stringify(w));
    const warned = lines.filter((l) => String(l['msg']).includes('DCGM scrape failed'));
    assert.ok(warned.length >= 1, 'the DCGM failure is logged');
    assert.ok(warned.length <= 2, `rate-limited (${warned.length} lines)`);
    assert.match(String(warned[0]!['err']), /ECONNREFUSED/);
  } finally {
    await g.close(100);
    await metrics.close();
    await dead.release();
  }
});

test('signal ages come from the store’s clock: a replica whose clock is an hour off reads the same ages', async () => {
  const redis = await startRedis();
  const opts = { url: redis.url, keyPrefix: 'skew', timeoutMs: 1000, refreshMs: 100, leaseTtlMs: 30_000, localAffinityCacheSize: 100, logger: silentLogger() };
  const store = new RedisStore(opts);
  const realNow = Date.now;
  try {
    assert.ok(await store.waitReady(3000), "await store.waitReady(3000)");
    Date.now = () => realNow() + 3_600_000; // this process believes it is an hour later
    await store.publishSignals('p', 'w', { signals: { kvUsage: 0.3 } });
    const rec = (await store.readSignals('p')).get('w');
    assert.ok(rec && rec.ageMs < 1000, `age ${rec?.ageMs} ms`);
  } finally {
    Date.now = realNow;
    await store.close();
    await redis.stop();
  }
});

test('a collector stopped while its first scrape hangs starts no loops afterwards', async () => {
  const metrics = await startMetricsServer();
  metrics.mode('hang');
  const config = parseConfig({ signals: { timeout_ms: 300 }, workers: [{ id: 'slow', cluster: 'worker_1', metrics_url: metrics.url }] });
  const store = new MemoryStore();
  const collector = new SignalCollector<Pool>({ gate: new Gate(config, store, silentLogger()), store, logger: silentLogger() });
  try {
    const started = collector.start();
    collector.stop(); // shutdown while the first scrape waits on a worker that does not answer
    await started;
    assert.deepEqual(collector.loopIntervals, { heartbeatMs: 0, readMs: 0 }, 'no heartbeat or read loop left running');
  } finally {
    collector.stop();
    await metrics.close();
  }
});

test("a session whose worker went down by its signals alone moves in one attempt: the commit accepts the store's 'none' for that state", async () => {
  // The decision relies on w's state being what the signals say (down) while no operator set one;
  // the store holds only operator states, so the commit's check must accept its 'none' there too
  // (src/gate/gate.ts `checkable`). Without that the check fails on every attempt.
  const { initHashing } = await import('../../src/request/hashing.js');
  await initHashing();
  const config = parseConfig({ workers: ['w1', 'w2'].map((id) => ({ id, cluster: id, metrics_url: `http://127.0.0.1:9/${id}` })) }, 'test');
  const store = new MemoryStore();
  const gate = new Gate(config, store, silentLogger());
  const fresh = { signals: { kvUsage: 0.1, running: 0, waiting: 0 }, ageMs: 0, failures: 0 };
  gate.setSignals(new Map([['w1', fresh], ['w2', fresh]]));
  const request = chatRequest('hello', { model: 'm', session: 'moves' });
  const first = await gate.route(request);
  assert.equal(first.kind, 'route');
  if (first.kind !== 'route') return;
  await gate.release(first.lease);
  const other = first.worker === 'w1' ? 'w2' : 'w1';
  gate.setSignals(new Map([[first.worker, { ...fresh, failures: 99 }], [other, fresh]]));
  const moved = await gate.route(request);
  assert.equal(moved.kind, 'route');
  if (moved.kind !== 'route') return;
  assert.equal(moved.worker, other);
  assert.equal(moved.attempts, 1, 'committed at the first attempt');
  assert.equal(moved.degraded, false);
  await gate.release(moved.lease);
});

test('while the store cannot be read, the last figures age: past stale_after_ms a worker is down, as on stale figures', async () => {
  // The verdicts were computed only when a read succeeded, so through a store outage a worker that
  // crashed kept its traffic and a pressured one stayed pressured (`ageSignals`).
  let now = 0;
  const config = parseConfig({ signals: { stale_after_ms: 1000 }, workers: ['ok', 'hot'].map((id) => ({ id, cluster: id, metrics_url: `http://127.0.0.1:9/${id}` })) }, 'test');
  const store = new MemoryStore();
  const gate = new Gate(config, store, silentLogger(), () => now);
  const states = () => gate.views(store.cachedSnapshot({ pool: 'default', key: undefined, workers: ['ok', 'hot'], blocks: [] })).map((v) => v.state);
  gate.setSignals(new Map([['ok', { signals: { running: 1, waiting: 0, kvUsage: 0.2 }, ageMs: 100, failures: 0 }], ['hot', { signals: { running: 1, waiting: 0, kvUsage: 0.99 }, ageMs: 0, failures: 0 }]]));
  assert.deepEqual(states(), ['healthy', 'pressured']);
  now = 800; // the store does not answer: the collector ages what it last read
  const early = gate.ageSignals();
  assert.deepEqual([...early.values()].map((v) => v.state), ['healthy', 'pressured'], 'within stale_after_ms nothing changes');
  assert.equal(gate.signalsOf('ok')?.record?.ageMs, 900, 'the record ages from the age it was read at');
  now = 1050;
  const late = gate.ageSignals();
  assert.deepEqual([...late.values()].map((v) => v.codes), [['stale'], ['stale']]);
  assert.deepEqual(states(), ['down', 'down']);
  const view = gate.views(store.cachedSnapshot({ pool: 'default', key: undefined, workers: ['ok', 'hot'], blocks: [] }))[0]!;
  assert.equal(view.engineRoom, false, 'stale figures give no room past the limit either');
  // The next read that succeeds judges the store's figures again.
  gate.setSignals(new Map([['ok', { signals: { running: 1, waiting: 0, kvUsage: 0.2 }, ageMs: 0, failures: 0 }], ['hot', { signals: { running: 1, waiting: 0, kvUsage: 0.2 }, ageMs: 0, failures: 0 }]]));
  assert.deepEqual(states(), ['healthy', 'healthy']);
});

test('a collector whose store reads fail stops routing to a worker that died meanwhile', async () => {
  const { initHashing } = await import('../../src/request/hashing.js');
  await initHashing();
  const metrics = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
  const config = parseConfig({ signals: { stale_after_ms: 300 }, workers: [{ id: 'w1', cluster: 'c1', metrics_url: metrics.url }] }, 'test');
  class FlakyStore extends MemoryStore {
    down = false;
    override readSignals(pool: string) {
      return this.down ? Promise.reject(new Error('redis timeout')) : super.readSignals(pool);
    }
    override publishSignals(...args: Parameters<MemoryStore['publishSignals']>) {
      return this.down ? Promise.reject(new Error('redis timeout')) : super.publishSignals(...args);
    }
  }
  const store = new FlakyStore();
  const gate = new Gate(config, store, silentLogger());
  const collector = new SignalCollector<Pool>({ gate, store, logger: silentLogger() });
  try {
    await collector.start();
    assert.equal(gate.signalsOf('w1')?.verdict.state, 'healthy');
    store.down = true; // the store is unreachable and the worker dies
    await metrics.close();
    // Judged on this replica's own scrapes while the store is away: they fail.
    await waitFor(() => gate.signalsOf('w1')?.verdict.state === 'down', 3000, 'the worker down on its own failed scrapes');
    // Its scrapes fail, or stop succeeding for longer than stale_after_ms, whichever shows first.
    assert.ok(['scrape_failed', 'stale'].includes(gate.signalsOf('w1')!.verdict.codes[0]!), String(gate.signalsOf('w1')?.verdict.codes));
    const r = await gate.route(chatRequest('hello'));
    assert.equal(r.kind, 'reject');
  } finally {
    collector.stop();
  }
});

test('while the store cannot be reached, a replica scrapes every worker itself: live workers keep serving on fresh figures, a peer\'s included', async () => {
  // Before, a store outage past stale_after_ms left every worker with metrics down (its figures
  // aged and nothing replaced them), and workers another replica scraped were never scraped here.
  const { initHashing } = await import('../../src/request/hashing.js');
  const { rendezvousScore } = await import('../../src/routing/rendezvous.js');
  await initHashing();
  const m1 = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
  const m2 = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
  const config = parseConfig(
    { signals: { stale_after_ms: 300, interval_ms: 25 }, workers: [{ id: 'w1', cluster: 'c1', metrics_url: m1.url }, { id: 'w2', cluster: 'c2', metrics_url: m2.url }] },
    'test',
  );
  const gateId = 'this-gate';
  // A peer that wins w2 by rendezvous hashing, so this replica does not scrape w2 while the store answers.
  let peer = 'peer-0';
  for (let i = 1; rendezvousScore(peer, 'w2') <= rendezvousScore(gateId, 'w2'); i++) peer = `peer-${i}`;
  class FlakyStore extends MemoryStore {
    down = false;
    override readSignals(pool: string) {
      return this.down ? Promise.reject(new Error('redis timeout')) : super.readSignals(pool);
    }
    override publishSignals(...args: Parameters<MemoryStore['publishSignals']>) {
      return this.down ? Promise.reject(new Error('redis timeout')) : super.publishSignals(...args);
    }
    override heartbeat(_pool: string, id: string) {
      return this.down ? Promise.reject(new Error('redis timeout')) : Promise.resolve([id, peer]);
    }
  }
  const store = new FlakyStore();
  // The peer's scrape of w2, as it would publish it.
  const peerPublish = setInterval(() => void store.publishSignals('default', 'w2', { signals: { running: 1, waiting: 0, kvUsage: 0.2 } }).catch(() => {}), 25);
  const gate = new Gate(config, store, silentLogger());
  const collector = new SignalCollector<Pool>({ gate, store, logger: silentLogger(), gateId });
  try {
    await collector.start();
    assert.deepEqual([...collector.ownedWorkers], ['w1'], 'w2 is the peer\'s');
    await waitFor(() => gate.signalsOf('w2')?.verdict.state === 'healthy', 3000, 'w2 healthy on the peer\'s figures');
    clearInterval(peerPublish);
    store.down = true;
    await waitFor(() => collector.ownedWorkers.size === 2, 3000, 'every worker scraped here');
    // Well past stale_after_ms: both still serve, on this replica's own figures.
    await new Promise((r) => setTimeout(r, 900));
    assert.equal(gate.signalsOf('w1')?.verdict.state, 'healthy');
    assert.equal(gate.signalsOf('w2')?.verdict.state, 'healthy');
    assert.ok(gate.signalsOf('w2')!.record!.ageMs < 300, `w2's figures are fresh: ${gate.signalsOf('w2')!.record!.ageMs} ms`);
    // ...and follow the workers: w2 fills its KV and is judged on it.
    m2.set({ running: 1, waiting: 0, kv: 0.99 });
    await waitFor(() => gate.signalsOf('w2')?.verdict.state === 'pressured', 3000, 'w2 pressured on its own page');
    const r = await gate.route(chatRequest('hello'));
    assert.equal(r.kind, 'route', 'requests are still routed through the outage');
    // The store answers again: the workers are shared out again.
    store.down = false;
    await waitFor(() => collector.ownedWorkers.size === 1, 3000, 'w2 back to the peer');
    assert.deepEqual([...collector.ownedWorkers], ['w1']);
  } finally {
    clearInterval(peerPublish);
    collector.stop();
    await m1.close();
    await m2.close();
  }
});

test('against a slow store the collector runs one heartbeat and one read at a time, however short its intervals', async () => {
  // Each tick started a call whether or not the last had come back: at a 20 ms read interval and a
  // store answering in 150 ms, eight reads waited at once, and their replies could land out of
  // order, an older picture replacing a newer one.
  class SlowStore extends MemoryStore {
    inFlight = { read: 0, heartbeat: 0 };
    most = { read: 0, heartbeat: 0 };
    calls = { read: 0, heartbeat: 0 };
    private async slowly<T>(what: 'read' | 'heartbeat', ms: number, call: () => Promise<T>): Promise<T> {
      this.calls[what]++;
      this.most[what] = Math.max(this.most[what], ++this.inFlight[what]);
      try {
        await new Promise((r) => setTimeout(r, ms));
        return await call();
      } finally {
        this.inFlight[what]--;
      }
    }
    override readSignals(pool: string) {
      return this.slowly('read', 150, () => super.readSignals(pool));
    }
    override heartbeat(pool: string, gateId: string) {
      return this.slowly('heartbeat', 350, () => super.heartbeat(pool, gateId));
    }
  }
  const { initHashing } = await import('../../src/request/hashing.js');
  await initHashing();
  const metrics = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
  // interval_ms 10: a read every 20 ms; stale_after_ms 400: a heartbeat every 100 ms.
  const config = parseConfig({ signals: { interval_ms: 10, stale_after_ms: 400 }, workers: [{ id: 'w', cluster: 'worker_1', metrics_url: metrics.url }] });
  const store = new SlowStore();
  const collector = new SignalCollector<Pool>({ gate: new Gate(config, store, silentLogger()), store, logger: silentLogger() });
  try {
    await collector.start();
    assert.deepEqual(collector.loopIntervals, { heartbeatMs: 100, readMs: 20 }, 'the intervals the test is built on');
    await new Promise((r) => setTimeout(r, 1200));
    assert.equal(store.most.read, 1, `reads at once: ${store.most.read}`);
    assert.equal(store.most.heartbeat, 1, `heartbeats at once: ${store.most.heartbeat}`);
    // And the loops keep going: each starts again once the last has come back.
    assert.ok(store.calls.read >= 5, `reads in 1.2 s: ${store.calls.read}`);
    assert.ok(store.calls.heartbeat >= 3, `heartbeats in 1.2 s: ${store.calls.heartbeat}`);
  } finally {
    collector.stop();
    await metrics.close();
  }
});
