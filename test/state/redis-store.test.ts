import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import { Readiness } from '../../src/health/readiness.js';
import type { RequestInfo } from '../../src/request/request.js';
import { initHashing } from '../../src/util/xxhash.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { HOLDINGS_ENCODING_FIELD } from '../../src/state/redis-scripts.js';
import { RedisStore } from '../../src/state/redis-store.js';
import type { RoutingStore } from '../../src/state/store.js';
import { commitRequest } from '../helpers/commits.js';
import { waitFor } from '../helpers/envoy.js';
import { silentLogger } from '../helpers/logger.js';
import { startLatencyProxy, type LatencyProxy } from '../helpers/latency-proxy.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';
import { chatRequest } from '../helpers/requests.js';
import { monitorRedis, type RedisMonitor } from '../helpers/redis-monitor.js';
import { storeContract } from './store.contract.js';

type StoreOptions = ConstructorParameters<typeof RedisStore>[0];

/** A chat turn of a session, its prompt shorter than a block (placed by load alone). */
function sessionRequest(session: string): RequestInfo {
  return chatRequest('hello', { model: 'm', session });
}

/** Redis's clock (ms), as the scripts read it. */
async function redisNow(raw: Redis): Promise<number> {
  const [s, us] = await raw.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

function redisStore(url: string, overrides: Partial<StoreOptions> = {}): RedisStore {
  return new RedisStore({
    url,
    keyPrefix: 'kvgate-test',
    timeoutMs: 200,
    refreshMs: 100,
    leaseTtlMs: 30_000,
    localAffinityCacheSize: 1000,
    logger: silentLogger(),
    ...overrides,
  });
}

interface RedisEnv {
  redis: TestRedis;
  /** A plain client on the same Redis, to look at what the stores wrote. */
  raw: Redis;
  /** Present with `{ proxy: true }`: a latency proxy in front of `redis`. */
  proxy: LatencyProxy | undefined;
  /** A store on `redis` (through the proxy with `viaProxy`), ready; closed when the test ends. */
  store(overrides?: Partial<StoreOptions>, opts?: { viaProxy?: boolean }): Promise<RedisStore>;
}

/**
 * Runs `fn` on a Redis of its own (with a latency proxy in front when asked) and closes everything
 * it opened afterwards, whether it passed or not: stores first, then the raw client, the proxy and
 * Redis. A test may kill Redis or close a store itself; closing again is harmless.
 */
async function withRedis(fn: (env: RedisEnv) => Promise<void>, opts: { proxy?: boolean } = {}): Promise<void> {
  const redis = await startRedis();
  const proxy = opts.proxy ? await startLatencyProxy(redis.port) : undefined;
  const raw = new Redis(redis.url);
  const stores: RedisStore[] = [];
  const env: RedisEnv = {
    redis,
    raw,
    proxy,
    async store(overrides = {}, { viaProxy = false } = {}) {
      if (viaProxy && !proxy) throw new Error('withRedis: viaProxy needs { proxy: true }');
      const s = redisStore(viaProxy ? `redis://${proxy!.address}` : redis.url, overrides);
      stores.push(s);
      assert.ok(await s.waitReady(3000), 'the store reached Redis');
      return s;
    },
  };
  try {
    await fn(env);
  } finally {
    for (const s of stores) await s.close();
    raw.disconnect();
    await proxy?.close();
    await redis.stop();
  }
}

storeContract('redis', async () => {
  const redis = await startRedis();
  const store = redisStore(redis.url);
  assert.ok(await store.waitReady(3000), "await store.waitReady(3000)");
  return {
    store,
    cleanup: async () => {
      await store.close();
      await redis.stop();
    },
  };
});

describe('redis store specifics', () => {
  test('a response id one replica learned is read by another; Redis away, each keeps what it learned', () =>
    withRedis(async ({ redis, store }) => {
      const a = await store();
      const b = await store();
      await a.recordResponse('p', 'resp-hash', 'w2', 60_000);
      assert.equal(await b.responseWorker('p', 'resp-hash'), 'w2', 'shared through Redis');
      await redis.stop();
      await a.recordResponse('p', 'while-down', 'w1', 60_000);
      assert.equal(await a.responseWorker('p', 'while-down'), 'w1', 'kept on the replica that learned it');
      assert.equal(await a.responseWorker('p', 'resp-hash'), 'w2');
      assert.equal(await b.responseWorker('p', 'while-down'), undefined, 'never shared: the other replica routes it by its other keys');
    }));

  test('a response id write or read the client holds on to returns within store.timeout_ms, answered by this replica', () =>
    withRedis(async ({ store: open }) => {
      const store = await open({ timeoutMs: 100 });
      await store.recordResponse('p', 'known', 'w2', 60_000);
      // What a cluster client does while it retries through a failover: the command reaches no
      // node yet, so ioredis's command timeout has not started.
      const client = store as unknown as { redis: { get: unknown; set: unknown } };
      const held = () => new Promise<never>(() => {});
      client.redis.get = held;
      client.redis.set = held;
      const timed = async <T>(p: Promise<T>): Promise<{ value: T | 'still waiting'; ms: number }> => {
        const t0 = performance.now();
        const value = await Promise.race([p, new Promise<'still waiting'>((r) => setTimeout(() => r('still waiting'), 1000))]);
        return { value, ms: performance.now() - t0 };
      };
      const wrote = await timed(store.recordResponse('p', 'new', 'w1', 60_000));
      // The store timeout and then some (a loaded machine runs timers late), far below the 1 s wait.
      assert.ok(wrote.value !== 'still waiting' && wrote.ms < 500, `the write gave up within the store timeout (${Math.round(wrote.ms)} ms)`);
      for (const [hash, worker] of [['known', 'w2'], ['new', 'w1']] as const) {
        const read = await timed(store.responseWorker('p', hash));
        assert.equal(read.value, worker, 'this replica’s own record');
        assert.ok(read.ms < 500, `the read gave up within the store timeout (${Math.round(read.ms)} ms)`);
      }
    }));

  test('the background loops’ calls (signals, heartbeat, migration, operator states, readiness) the client holds on to return within store.timeout_ms', () =>
    withRedis(async ({ store: open }) => {
      const store = await open({ timeoutMs: 100 });
      // What a cluster client does while it retries through a failover: no node has the command
      // yet, so ioredis's command timeout has not started. Every command is held here, for good.
      (store as unknown as { redis: { sendCommand: unknown } }).redis.sendCommand = () => new Promise<never>(() => {});
      const calls: Array<[string, () => Promise<unknown>]> = [
        ['publishSignals', () => store.publishSignals('p', 'w1', { signals: { running: 1 } })],
        ['readSignals', () => store.readSignals('p')],
        ['heartbeat', () => store.heartbeat('p', 'g1', 3000)],
        ['coldSessions', () => store.coldSessions('p', 'w1', 10)],
        ['migrate', () => store.migrate('p', 'w1', [{ key: 's:a', to: 'w2' }], 'test', { affinityTtlMs: 60_000, streamMaxLen: 100 })],
        ['tryLock', () => store.tryLock('p', 'lock', 1000)],
        ['setWorkerState', () => store.setWorkerState('p', 'w1', 'draining')],
        ['ping', () => store.ping()],
      ];
      const outcomes = await Promise.all(
        calls.map(async ([name, call]) => {
          const t0 = performance.now();
          let timer: NodeJS.Timeout | undefined;
          const outcome = await Promise.race([
            call().then(() => 'answered', () => 'failed'),
            new Promise<string>((r) => (timer = setTimeout(() => r('still waiting'), 1000))),
          ]).finally(() => clearTimeout(timer));
          return { name, outcome, ms: Math.round(performance.now() - t0) };
        }),
      );
      // The store timeout and then some (a loaded machine runs timers late), far below the 1 s
      // wait. A loop that awaits the call (a worker's scrape loop, a migration round) goes on.
      for (const o of outcomes) assert.ok(o.outcome === 'failed' && o.ms < 500, `${o.name} gave up within the store timeout: ${JSON.stringify(o)}`);
    }));

  test('against a Redis slower than store.refresh_ms, one refresh waits at a time', () =>
    withRedis(async ({ store: open }) => {
      // A refresh every 20 ms, each allowed 400 ms: a tick per refresh regardless of the last
      // sent a command per tick, about 25 waiting at once against a Redis that holds them.
      const store = await open({ timeoutMs: 400, refreshMs: 20 });
      const res = await store.commit(commitRequest({ workers: ['w1', 'w2'], worker: 'w1', key: 's:a' }));
      assert.ok(res.ok && !res.degraded, `committed in Redis: ${JSON.stringify(res)}`);
      if (res.ok) await store.release(res.lease);
      await new Promise((r) => setTimeout(r, 50)); // the release's removal goes out
      let sent = 0;
      (store as unknown as { redis: { sendCommand: unknown } }).redis.sendCommand = () => {
        sent++;
        return new Promise<never>(() => {});
      };
      await new Promise((r) => setTimeout(r, 500));
      // The first refresh held to its 400 ms deadline, then the next: two, not twenty-five.
      assert.ok(sent >= 1 && sent <= 3, `commands sent by the refresh loop in 500 ms: ${sent}`);
    }));

  test('a lease release, a resync and a stopping store’s lease removals the client holds on to end within store.timeout_ms', () =>
    withRedis(async ({ store: open }) => {
      const store = await open({ timeoutMs: 100 });
      const workers = ['w1', 'w2'];
      const leases = [];
      for (const key of ['s:a', 's:b']) {
        const res = await store.commit(commitRequest({ workers, worker: 'w1', key }));
        assert.ok(res.ok && !res.degraded, `committed in Redis: ${JSON.stringify(res)}`);
        leases.push(res.lease);
      }
      // Every command held for good, as a cluster client holds one it retries before any node has it.
      (store as unknown as { redis: { sendCommand: unknown } }).redis.sendCommand = () => new Promise<never>(() => {});
      const timed = async (name: string, p: Promise<unknown>) => {
        const t0 = performance.now();
        let timer: NodeJS.Timeout | undefined;
        const outcome = await Promise.race([p.then(() => 'ended', () => 'ended'), new Promise<string>((r) => (timer = setTimeout(() => r('still waiting'), 1000)))]).finally(() =>
          clearTimeout(timer),
        );
        return { name, outcome, ms: Math.round(performance.now() - t0) };
      };
      // The release's removal goes out on its own after a few ms (the flush) and is held there (it
      // is then kept for the retry run, one at a time); a resync (one at a time, and what decisions
      // wait for after a reconnect), the renewal of the lease still held and the close's removal of
      // it are held likewise.
      const loops = store as unknown as { resync(): Promise<void>; retryReleases(): Promise<void>; renewLeases(): Promise<void> };
      const outcomes = [
        await timed('release', store.release(leases[0]!)),
        await timed('retry of the release', loops.retryReleases()),
        await timed('resync', loops.resync()),
        await timed('renewal', loops.renewLeases()),
        await timed('close', store.close()),
      ];
      // The store timeout and then some (a loaded machine runs timers late), far below the 1 s wait.
      for (const o of outcomes) assert.ok(o.outcome === 'ended' && o.ms < 500, `${o.name} ended within the store timeout: ${JSON.stringify(o)}`);
    }));

  test('two store instances on one Redis see each other’s affinities and loads', () =>
    withRedis(async ({ store }) => {
      const a = await store();
      const b = await store();
      const workers = ['w1', 'w2'];
      const res = await a.commit(commitRequest({ workers, worker: 'w2', key: 's:shared' }));
      assert.ok(res.ok, "res.ok");
      const seen = await b.snapshot({ pool: 'p', key: 's:shared', workers, blocks: [] });
      assert.equal(seen.affinity, 'w2');
      assert.equal(seen.inflight.get('w2'), 1);
      // A decision on s:shared made from a view older than a's commit (no affinity yet) fails at
      // commit and hands back the truth instead of overwriting a's placement; the same commit for a
      // key nobody placed goes through (the control: nothing else made it fail).
      const fresh = await b.commit(commitRequest({ workers, worker: 'w1', key: 's:other' }));
      assert.ok(fresh.ok, "fresh.ok");
      const race = await b.commit(commitRequest({ workers, worker: 'w1', key: 's:shared' }));
      assert.equal(race.ok, false);
      assert.equal(race.snapshot.affinity, 'w2');
    }));

  test('the view a decision starts from counts this replica’s commits still on their way to Redis, once each', () =>
    withRedis(async ({ store }) => {
      const a = await store();
      const workers = ['w1', 'w2'];
      const q = { pool: 'p', key: undefined, workers, blocks: [] };
      const commit = (key: string, affinity?: string) => a.commit(commitRequest({ workers, worker: 'w1', key, preconditions: { affinity } }));
      assert.ok((await commit('s:placed')).ok, "(await commit('s:placed')).ok");
      assert.equal(a.cachedSnapshot(q).inflight.get('w1'), 1);
      // Sent in this order, run by Redis in this order, answered in this order: when the failing
      // one's reply comes, the other two are still on their way.
      const failing = commit('s:placed', 'w2');
      const sent = [commit('s:one'), commit('s:two')];
      assert.equal(a.cachedSnapshot(q).inflight.get('w1'), 4, 'the held lease and the three commits on their way');
      const lost = await failing;
      assert.equal(lost.ok, false);
      // A failed commit's state answers for Redis: commits that may yet fail do not fill a worker there.
      if (!lost.ok) assert.equal(lost.snapshot.inflight.get('w1'), 1);
      for (const r of await Promise.all(sent)) assert.ok(r.ok, "r.ok");
      assert.equal(a.cachedSnapshot(q).inflight.get('w1'), 3, 'each held commit counted once, through Redis’s reply');
      assert.equal(a.cachedSnapshot(q).inflight.get('w2'), 0);
    }));

  test('a view that answers for a Redis that did not answer (a read that timed out, a commit checked locally) leaves out commits still on their way', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000, timeoutMs: 150 });
      const workers = ['w1', 'w2'];
      const q = { pool: 'p', key: undefined, workers, blocks: [] };
      // A view, and Redis's clock: the commits carry their deadline, so none writes once Redis wakes.
      await store.snapshot(q);
      const commit = (below: Array<{ worker: string; limit: number }>) => store.commit(commitRequest({ workers, worker: 'w1', preconditions: { below } }));
      // Timed: a paused Redis would hold an UNPAUSE from another connection too.
      const PAUSE_MS = 600;
      assert.equal(await raw.client('PAUSE', String(PAUSE_MS), 'ALL'), 'OK');
      const pausedAt = Date.now();
      // Sent in this order, so they time out in this order: the read, then the first commit, each
      // while the commits after it are still on their way.
      const read = store.snapshot(q);
      const first = commit([{ worker: 'w1', limit: 1 }]);
      const second = commit([]);
      assert.equal(store.cachedSnapshot(q).inflight.get('w1'), 2, 'the view a decision starts from counts both commits');
      const seen = await read;
      assert.equal(seen.inflight.get('w1'), 0, 'the read that timed out: commits that may yet fail do not fill w1');
      const held = await first;
      assert.ok(held.ok && held.degraded, 'checked locally below 1 on w1: the second commit, still on its way, is not counted');
      const other = await second;
      assert.ok(other.ok && other.degraded, "other.ok && other.degraded");
      assert.ok(Date.now() - pausedAt < PAUSE_MS, `all of it happened while Redis was paused (${Date.now() - pausedAt} ms)`);
      await new Promise((r) => setTimeout(r, PAUSE_MS - (Date.now() - pausedAt) + 50));
      for (const l of [held, other]) if (l.ok) await store.release(l.lease);
    }));

  test('a burst of new sessions one gate decides before any reply is placed as on counts kept at once (the memory store)', () =>
    withRedis(async ({ store }) => {
      await initHashing();
      const config = parseConfig({ workers: ['w1', 'w2', 'w3'].map((id) => ({ id, cluster: id, max_inflight: 50 })) }, 'test');
      const workers = ['w1', 'w2', 'w3'];
      // Requests busy w2 and w3, so every decision of the burst starts from w1 alone being idle.
      const busy = async (s: RoutingStore) => {
        for (const worker of ['w2', 'w3']) {
          const r = await s.commit(commitRequest({ pool: 'default', workers, worker }));
          assert.ok(r.ok, "r.ok");
        }
      };
      const burst = async (s: RoutingStore) => {
        const gate = new Gate(config, s, silentLogger());
        const results = await Promise.all(Array.from({ length: 12 }, (_, i) => gate.route(sessionRequest(`burst-${i}`))));
        return results.map((r) => (r.kind === 'route' ? r.worker : r.error.code));
      };
      const memory = new MemoryStore();
      await busy(memory);
      const expected = await burst(memory);
      const redis = await store();
      await busy(redis);
      const placed = await burst(redis);
      assert.ok(new Set(expected).size > 1, `the burst spreads on counts kept at once: ${expected.join(' ')}`);
      assert.deepEqual(placed, expected);
    }));

  test('a gate whose view says every worker is full reads Redis before shedding: another replica freed one', () =>
    withRedis(async ({ store: open }) => {
      await initHashing();
      const workers = ['w1', 'w2'];
      // One request per worker, no overflow past it: two leases fill the pool.
      const config = parseConfig({ workers: workers.map((id) => ({ id, cluster: id, max_inflight: 1 })), limits: { overflow_factor: 1 } }, 'test');
      // No refresh: this replica learns what others did only from its own reads and commits.
      const a = await open({ refreshMs: 60_000, timeoutMs: 5000 });
      const b = await open({ refreshMs: 60_000 });
      const gate = new Gate(config, a, silentLogger());
      const held = [];
      for (const worker of workers) {
        const r = await b.commit(commitRequest({ pool: 'default', workers, worker }));
        assert.ok(r.ok && !r.degraded, 'the other replica fills the worker in Redis');
        held.push(r.lease);
      }
      const q = { pool: 'default', key: undefined, workers, blocks: [] };
      await a.snapshot(q);
      // The control: with both held, the gate sheds (its re-read finds them full too).
      const full = await gate.route(sessionRequest('full'));
      assert.equal(full.kind, 'reject', 'shed while both workers are full');
      for (const l of held) await b.release(l);
      assert.deepEqual([...a.cachedSnapshot(q).inflight.values()], [1, 1], 'this replica’s view still says full');
      const routed = await gate.route(sessionRequest('room'));
      assert.equal(routed.kind, 'route', 'routed: the re-read before shedding found the room');
      if (routed.kind === 'route') await gate.release(routed.lease);
    }));

  test('with Redis down, commits succeed on local state (degraded) and never throw', () =>
    withRedis(async ({ redis, store: open }) => {
      const store = await open({ timeoutMs: 100 });
      const workers = ['w1', 'w2'];
      const first = await store.commit(commitRequest({ workers, worker: 'w1', key: 's:d' }));
      assert.ok(first.ok, "first.ok");
      await redis.kill();
      const t0 = Date.now();
      const res = await store.commit(commitRequest({ workers, worker: 'w1', key: 's:d', preconditions: { affinity: 'w1', below: [{ worker: 'w1', limit: 10 }] } }));
      assert.ok(res.ok, "res.ok");
      assert.equal(res.degraded, true);
      assert.equal(res.lease.shared, false);
      assert.ok(Date.now() - t0 < 1000, 'falls back quickly');
      assert.equal(store.cachedSnapshot({ pool: 'p', key: 's:d', workers, blocks: [] }).affinity, 'w1', 'affinity known locally survives');
      await store.release(res.lease);
      await assert.rejects(store.ping(), /unreachable/);
      await store.release(first.lease); // never throws
    }));

  test('Redis time decides lease expiry: a renewed lease stays, an unrenewed one lapses', () =>
    withRedis(
      async ({ proxy, store }) => {
        // Renewal runs every max(1 s, TTL / 3): with a 1.5 s TTL, once at 1 s, to 2.5 s.
        const kept = await store({ leaseTtlMs: 1500 });
        const cut = await store({ leaseTtlMs: 1500 }, { viaProxy: true });
        const other = await store();
        const workers = ['w1', 'w2'];
        assert.ok((await kept.commit(commitRequest({ workers, worker: 'w1' }))).ok);
        assert.ok((await cut.commit(commitRequest({ workers, worker: 'w2' }))).ok);
        const seen = async () => (await other.snapshot({ pool: 'p', key: undefined, workers, blocks: [] })).inflight;
        assert.deepEqual([...(await seen())], [['w1', 1], ['w2', 1]]);
        // The second gate is cut off from Redis (a crash or a partition looks the same to Redis):
        // nobody renews its lease.
        proxy!.setDown(true);
        await new Promise((r) => setTimeout(r, 2200));
        assert.deepEqual([...(await seen())], [['w1', 1], ['w2', 0]], 'w1 renewed past its first TTL; w2 lapsed');
      },
      { proxy: true },
    ));

  test('a commit ioredis resends after NOSCRIPT, landing past the decision’s deadline, writes nothing', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        // No refresh meanwhile: the only script call in flight is the commit under test.
        const store = await open({ timeoutMs: 200, refreshMs: 60_000 }, { viaProxy: true });
        const workers = ['w1', 'w2'];
        const warm = await store.commit(commitRequest({ workers, key: 's:warm', worker: 'w1' }));
        assert.ok(warm.ok && !warm.degraded, 'the script is loaded on this connection');
        await store.release(warm.lease);
        // Redis forgets the script (a restart or failover does that); every hop now takes 80 ms.
        await raw.script('FLUSH');
        proxy!.setLatency(80);
        // EVALSHA reaches Redis at 80 ms, NOSCRIPT comes back at 160 ms,
        // so ioredis resends the script as EVAL; it reaches Redis at 240 ms, after the 200 ms
        // deadline at which the gate decided locally.
        const late = await store.commit(commitRequest({ workers, key: 's:late', worker: 'w2' }));
        assert.ok(late.ok, "late.ok");
        assert.equal(late.degraded, true, 'decided locally past the deadline');
        await new Promise((r) => setTimeout(r, 900));
        assert.equal(await raw.zcard('kvgate-test:{p}:f:w2'), 0, 'no lease nobody holds (it would count against w2 until its TTL)');
        assert.equal(await raw.get('kvgate-test:{p}:a:s:late'), null, 'no affinity written behind the local decision’s back');
        await store.release(late.lease);
      },
      { proxy: true },
    ));

  test('a Redis that lags gets at most maxWaitingDecisions of a replica’s decisions; the rest are decided locally at once, and it takes them again once caught up', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        // A Redis answering slower than decisions arrive keeps its connection (never silent long
        // enough to be replaced) and the client kept every command until its reply, however long
        // ago its caller gave up: that queue grew by the request rate. Here 400 decisions at once
        // against 300 ms each way (within the 500 ms silence limit of a 100 ms store timeout).
        const store = await open({ timeoutMs: 100, refreshMs: 60_000, maxWaitingDecisions: 50 }, { viaProxy: true });
        const workers = ['w1', 'w2'];
        const warm = await store.commit(commitRequest({ workers, key: 's:warm', worker: 'w1' }));
        assert.ok(warm.ok && !warm.degraded, 'the script is loaded on this connection');
        await store.release(warm.lease);
        await new Promise((r) => setTimeout(r, 50)); // the release's removal goes out
        const scriptCalls = async () => {
          const stats = await raw.info('commandstats');
          return [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
        };
        const before = await scriptCalls();
        proxy!.setLatency(300);
        const t0 = performance.now();
        const results = await Promise.all(Array.from({ length: 400 }, (_, i) => store.commit(commitRequest({ workers, key: `s:lag${i}`, worker: i % 2 ? 'w1' : 'w2' }))));
        const tookMs = performance.now() - t0;
        assert.ok(results.every((r) => r.ok && r.degraded), 'every decision went local (Redis answered past the timeout)');
        assert.ok(tookMs < 1000, `every decision answered within the store timeout and then some (${Math.round(tookMs)} ms)`);
        for (const r of results) if (r.ok) await store.release(r.lease);
        proxy!.setLatency(0);
        // What reached Redis: the 50 sent, not the 400 asked for (each is refused there as late).
        await waitFor(async () => (await scriptCalls()) - before >= 50, 3000, 'the sent decisions reach Redis');
        await new Promise((r) => setTimeout(r, 700)); // anything else on its way arrives
        const reached = (await scriptCalls()) - before;
        assert.ok(reached <= 55, `script calls that reached Redis: ${reached} of 400 decisions`);
        // Caught up: its replies are in, and decisions go to Redis again.
        const again = await store.commit(commitRequest({ workers, key: 's:again', worker: 'w1' }));
        assert.ok(again.ok && !again.degraded, `committed in Redis again: ${JSON.stringify(again)}`);
        await store.release(again.lease);
      },
      { proxy: true },
    ));

  test('the cap counts what the client holds, not what callers still wait for: under a steady stream the decisions past the store timeout still count until Redis answers them', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        // With ioredis's own command timeout a command's promise settled at store.timeout_ms while
        // the client kept the command until its reply: a steady stream against a lagging Redis
        // never reached the cap, however long the client's queue. 200 decisions/s for 1 s, 300 ms
        // each way: 20 waiting by the callers' clock, about 120 by the client's.
        const store = await open({ timeoutMs: 100, refreshMs: 60_000, maxWaitingDecisions: 30 }, { viaProxy: true });
        const workers = ['w1', 'w2'];
        const warm = await store.commit(commitRequest({ workers, key: 's:warm', worker: 'w1' }));
        assert.ok(warm.ok && !warm.degraded, 'the script is loaded on this connection');
        await store.release(warm.lease);
        await new Promise((r) => setTimeout(r, 50));
        const scriptCalls = async () => {
          const stats = await raw.info('commandstats');
          return [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
        };
        const before = await scriptCalls();
        proxy!.setLatency(300);
        const pending = [];
        for (let i = 0; i < 200; i++) {
          pending.push(store.commit(commitRequest({ workers, key: `s:steady${i}`, worker: i % 2 ? 'w1' : 'w2' })));
          await new Promise((r) => setTimeout(r, 5));
        }
        for (const r of await Promise.all(pending)) if (r.ok) await store.release(r.lease);
        proxy!.setLatency(0);
        await new Promise((r) => setTimeout(r, 1000)); // everything on its way arrives
        const reached = (await scriptCalls()) - before;
        // About 30 (31 seen); with the count dropped at the callers' timeout, three times as many
        // (94 seen).
        assert.ok(reached <= 60, `script calls that reached Redis: ${reached} of 200 decisions`);
      },
      { proxy: true },
    ));

  test('a commit issued while another is on its way goes out at once, not after the first one’s reply', () =>
    withRedis(
      async ({ proxy, store: open }) => {
        // ioredis's auto-pipelining holds every command issued while a pipeline is in flight until
        // all of that pipeline's replies are back: under load each decision waited a round trip
        // more. 100 ms each way through the proxy: a round trip is 200 ms, waiting for one first 400.
        const store = await open({ timeoutMs: 5000, refreshMs: 60_000 }, { viaProxy: true });
        const workers = ['w1', 'w2'];
        const warm = await store.commit(commitRequest({ workers, key: 's:warm', worker: 'w1' }));
        assert.ok(warm.ok && !warm.degraded, 'the script is loaded on this connection');
        await store.release(warm.lease);
        proxy!.setLatency(100);
        const first = store.commit(commitRequest({ workers, key: 's:first', worker: 'w1' }));
        // A later turn of the event loop, as the next stream's decision would be.
        await new Promise((r) => setImmediate(r));
        const t0 = performance.now();
        const second = await store.commit(commitRequest({ workers, key: 's:second', worker: 'w2' }));
        const tookMs = performance.now() - t0;
        assert.ok(second.ok && !second.degraded, 'committed in Redis');
        assert.ok(tookMs < 330, `the second commit took ${Math.round(tookMs)} ms: it waited for the first one's reply`);
        const firstResult = await first;
        assert.ok(firstResult.ok, "firstResult.ok");
        await store.release(firstResult.lease);
        await store.release(second.lease);
      },
      { proxy: true },
    ));

  test('a stall longer than the lease TTL: the leases still held count again within a renewal interval of its end', () =>
    withRedis(async ({ raw, store: open }) => {
      // Renewal runs every max(1 s, TTL / 3): 1 s with a 1.5 s TTL. No refresh of its own, so
      // nothing but the renewal and resync could put the lease back.
      const store = await open({ leaseTtlMs: 1500, refreshMs: 60_000 });
      const workers = ['w1', 'w2'];
      const leases = 'kvgate-test:{p}:f:w1';
      const held = await store.commit(commitRequest({ workers, key: 's:long', worker: 'w1' }));
      assert.ok(held.ok && !held.degraded, "held.ok && !held.degraded");
      const live = async () => raw.zcount(leases, `(${await redisNow(raw)}`, '+inf');
      assert.equal(await live(), 1);
      // Redis blocked past the lease's TTL: the renewals sent meanwhile time out in the store and
      // run once Redis is back, the lease already lapsed. The silent connection is replaced (its
      // socket timeout, 750 ms here) and the resync on reconnection re-adds the lease; a connection
      // kept through the stall would have it re-added by the next renewal.
      const PAUSE_MS = 2000;
      assert.equal(await raw.client('PAUSE', String(PAUSE_MS), 'ALL'), 'OK');
      await new Promise((r) => setTimeout(r, PAUSE_MS + 50));
      assert.equal(store.cachedSnapshot({ pool: 'p', key: undefined, workers, blocks: [] }).inflight.get('w1'), 1, 'the request still runs');
      // The next renewal comes within a second; the request is still running all along.
      const until = Date.now() + 2500;
      while ((await live()) !== 1) {
        assert.ok(Date.now() < until, 'the running request counts in Redis again after the stall');
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.deepEqual(await raw.zrange(leases, '0', '-1'), [held.lease.id]);
      await store.release(held.lease);
      assert.equal(await raw.zcard(leases), 0);
    }));

  test('after Redis lost its data, an affinity that lapsed meanwhile is not restored, and a live one keeps what it had left', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const workers = ['w1', 'w2'];
      // Learned from a commit and from a read (another replica's commit): both lapse in 150 ms.
      assert.ok((await store.commit(commitRequest({ workers, key: 's:brief', worker: 'w1', affinityTtlMs: 150 }))).ok);
      const other = await open({ refreshMs: 60_000 });
      assert.ok((await other.commit(commitRequest({ workers, key: 's:read', worker: 'w2', affinityTtlMs: 150 }))).ok);
      assert.equal((await store.snapshot({ pool: 'p', key: 's:read', workers, blocks: [] })).affinity, 'w2');
      await other.close();
      // The latest commit's TTL is a minute: what the restore once gave every cached affinity.
      assert.ok((await store.commit(commitRequest({ workers, key: 's:kept', worker: 'w2', affinityTtlMs: 60_000 }))).ok);
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(await raw.get('kvgate-test:{p}:a:s:brief'), null, 'lapsed in Redis');
      // Redis loses its data and drops its clients: the store reconnects, finds the marker gone and restores.
      await raw.flushall();
      await raw.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      const until = Date.now() + 5000;
      while ((await raw.exists('kvgate-test:{p}:alive')) === 0) {
        assert.ok(Date.now() < until, 'the store restored what it knew (marker written last)');
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.equal(await raw.get('kvgate-test:{p}:a:s:brief'), null, 'a lapsed one stays lapsed');
      assert.equal(await raw.get('kvgate-test:{p}:a:s:read'), null, 'a lapsed one learned from a read too');
      assert.equal(await raw.get('kvgate-test:{p}:a:s:kept'), 'w2', 'a live affinity is restored');
      const left = await raw.pttl('kvgate-test:{p}:a:s:kept');
      assert.ok(left > 50_000 && left <= 60_000 - 400, `with what it had left, not a fresh TTL (${left} ms)`);
    }));

  test('with Redis away, decisions do not follow an affinity that lapsed', () =>
    withRedis(async ({ redis, store: open }) => {
      const store = await open({ refreshMs: 60_000, timeoutMs: 100 });
      const workers = ['w1', 'w2'];
      const q = (key: string) => ({ pool: 'p', key, workers, blocks: [] });
      assert.ok((await store.commit(commitRequest({ workers, key: 's:brief', worker: 'w1', affinityTtlMs: 150 }))).ok);
      assert.ok((await store.commit(commitRequest({ workers, key: 's:kept', worker: 'w2', affinityTtlMs: 60_000 }))).ok);
      await new Promise((r) => setTimeout(r, 400));
      await redis.kill();
      assert.equal((await store.snapshot(q('s:kept'))).affinity, 'w2', 'a live affinity is followed on local state');
      assert.equal((await store.snapshot(q('s:brief'))).affinity, undefined, 'a lapsed one is not: the worker may have dropped its cache');
      // Placed anew while degraded: the commit expects no affinity, as Redis would have had none.
      const placed = await store.commit(commitRequest({ workers, key: 's:brief', worker: 'w2', affinityTtlMs: 60_000 }));
      assert.ok(placed.ok && placed.degraded, "placed.ok && placed.degraded");
      await store.release(placed.lease);
    }));

  test('an affinity written back after Redis was unreachable is listed among its worker’s sessions', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        const store = await open({ timeoutMs: 100, refreshMs: 100 }, { viaProxy: true });
        const workers = ['w1', 'w2'];
        assert.ok((await store.commit(commitRequest({ workers, key: 's:before', worker: 'w1' }))).ok);
        proxy!.setDown(true);
        // Decided on local state; Redis keeps its data.
        const during = await store.commit(commitRequest({ workers, key: 's:during', worker: 'w1' }));
        assert.ok(during.ok && during.degraded, "during.ok && during.degraded");
        proxy!.setDown(false);
        const until = Date.now() + 5000;
        while ((await raw.get('kvgate-test:{p}:a:s:during')) !== 'w1') {
          assert.ok(Date.now() < until, 'written back once Redis is reachable');
          await new Promise((r) => setTimeout(r, 25));
        }
        const cold = await store.coldSessions('p', 'w1', 10);
        assert.deepEqual(cold.keys, ['s:before', 's:during'], 'migration sees the session written back, in the order the two lapse');
        assert.equal(cold.total, 2);
        await store.release(during.lease);
      },
      { proxy: true },
    ));

  test('affinities restored after Redis lost its data are listed among their workers’ sessions', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const workers = ['w1', 'w2'];
      for (const [key, worker] of [['s:a', 'w1'], ['s:b', 'w2'], ['s:c', 'w1']] as const) {
        assert.ok((await store.commit(commitRequest({ workers, key, worker }))).ok);
        // Distinct milliseconds: the session sets order by lapse time.
        await new Promise((r) => setTimeout(r, 3));
      }
      await raw.flushall();
      await raw.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      const until = Date.now() + 5000;
      while ((await raw.exists('kvgate-test:{p}:alive')) === 0) {
        assert.ok(Date.now() < until, 'the store restored what it knew (marker written last)');
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.equal(await raw.get('kvgate-test:{p}:a:s:c'), 'w1');
      assert.deepEqual(await store.coldSessions('p', 'w1', 10), { keys: ['s:a', 's:c'], total: 2 });
      assert.deepEqual(await store.coldSessions('p', 'w2', 10), { keys: ['s:b'], total: 1 });
    }));

  test('offload events are entries of the pool’s Redis Stream with the documented fields', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open();
      const workers = ['w1', 'w2'];
      assert.ok((await store.commit(commitRequest({ workers, key: 's:abc', worker: 'w1' }))).ok);
      await store.migrate('p', 'w1', [{ key: 's:abc', to: 'w2' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 });
      const entries = await raw.xrange(store.offloadStreamKey('p'), '-', '+');
      assert.equal(entries.length, 1);
      const fields = Object.fromEntries(chunk(entries[0]![1]));
      assert.deepEqual({ ...fields, time: undefined }, { session: 'abc', from: 'w1', to: 'w2', reason: 'kv_pressure', time: undefined });
      assert.ok(Number(fields['time']) > 1e12, "Number(fields['time']) > 1e12");
      assert.equal(store.offloadStreamKey('p'), 'kvgate-test:{p}:offload');
    }));

  test('two replicas heartbeating on one Redis both see each other', () =>
    withRedis(async ({ store }) => {
      const a = await store();
      const b = await store();
      await a.heartbeat('p', 'gate-a', 5000);
      const live = await b.heartbeat('p', 'gate-b', 5000);
      assert.deepEqual([...live].sort(), ['gate-a', 'gate-b']);
    }));
});

describe('redis store: releases ride on the next command', () => {
  const workers = ['w1', 'w2'];

  test('a release no command follows reaches Redis on its own, and release() resolves once it has', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const res = await store.commit(commitRequest({ workers, key: 's:alone', worker: 'w1' }));
      assert.ok(res.ok && !res.degraded, "res.ok && !res.degraded");
      assert.equal(await raw.zcard('kvgate-test:{p}:f:w1'), 1);
      // No refresh (60 s) and no other command: only the flush timer can send it, and the 30 s
      // lease TTL is far off.
      await store.release(res.lease);
      assert.equal(await raw.zcard('kvgate-test:{p}:f:w1'), 0, 'removed from Redis by the time release() resolved');
    }));

  test('a release made before the session’s next commit is removed before that commit counts, in the same script call', () =>
    withRedis(async ({ redis, raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      let mon: RedisMonitor | undefined;
      const lines = () => (mon?.commands ?? []).map((c) => ({ source: c.source, cmd: c.args[0]!.toLowerCase() }));
      try {
        const first = await store.commit(commitRequest({ workers, key: 's:k', worker: 'w1' }));
        assert.ok(first.ok && !first.degraded, "first.ok && !first.degraded");
        mon = monitorRedis(redis.port);
        await mon.ready;
        await new Promise((r) => setTimeout(r, 50));
        // Not awaited: the next commit, made at once, carries it. It may only pass if w1 has nothing
        // in flight and counts the session's requests afresh: the release must come first.
        const released = store.release(first.lease);
        const second = await store.commit(commitRequest({ workers, key: 's:k', worker: 'w1', preconditions: { affinity: 'w1', below: [{ worker: 'w1', limit: 1 }] } }));
        await released;
        assert.ok(second.ok, 'the commit saw w1 free: the release ran before it');
        assert.equal(store.cachedSnapshot({ pool: 'p', key: 's:k', workers, blocks: [] }).keyInflight, 1, 'the session has one request in flight, not two');
        assert.deepEqual(await raw.zrange('kvgate-test:{p}:f:w1', '0', '-1'), [second.lease.id]);
        await new Promise((r) => setTimeout(r, 50));
        const seen = lines();
        const zrems = seen.filter((l) => l.cmd === 'zrem');
        assert.ok(zrems.length >= 1 && zrems.every((l) => l.source === 'lua'), `the removal ran inside the commit's script, not as a command of its own: ${JSON.stringify(seen)}`);
        assert.equal(seen.filter((l) => l.cmd === 'evalsha' || l.cmd === 'eval').length, 1, 'one round trip for release and commit');
      } finally {
        mon?.close();
      }
    }));

  test('a release whose carrying commit failed is not lost: it is retried once Redis is reachable', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        const store = await open({ timeoutMs: 100, refreshMs: 100 }, { viaProxy: true });
        const first = await store.commit(commitRequest({ workers, key: 's:lost', worker: 'w1' }));
        assert.ok(first.ok && !first.degraded, "first.ok && !first.degraded");
        proxy!.setDown(true);
        await new Promise((r) => setTimeout(r, 50));
        // The release rides on this commit, which cannot reach Redis (it is decided locally).
        const released = store.release(first.lease);
        const during = await store.commit(commitRequest({ workers, key: 's:other', worker: 'w2' }));
        assert.ok(during.ok && during.degraded, "during.ok && during.degraded");
        await released;
        assert.equal(await raw.zcard('kvgate-test:{p}:f:w1'), 1, 'Redis still counts it (30 s lease TTL)');
        proxy!.setDown(false);
        const until = Date.now() + 5000;
        while ((await raw.zcard('kvgate-test:{p}:f:w1')) !== 0) {
          assert.ok(Date.now() < until, 'the release reached Redis after it came back');
          await new Promise((r) => setTimeout(r, 50));
        }
        await store.release(during.lease);
      },
      { proxy: true },
    ));

  test('a commit that timed out but ran has its lease taken back, though the connection broke before the removal went', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        // The 30 s lease TTL is far off: only the take-back can remove the lease below.
        const store = await open({ timeoutMs: 200, refreshMs: 100, leaseTtlMs: 30_000 }, { viaProxy: true });
        const warm = await store.commit(commitRequest({ workers, worker: 'w1' }));
        assert.ok(warm.ok && !warm.degraded, 'the script is loaded on this connection');
        await store.release(warm.lease);
        // 150 ms each way: the commit runs in Redis at 150 ms, its reply would come at 300 ms, and
        // the store gives up at 200 ms. Any removal sent then reaches Redis at 350 ms at the earliest.
        proxy!.setLatency(150);
        const res = await store.commit(commitRequest({ workers, worker: 'w2' }));
        assert.ok(res.ok && res.degraded, 'decided locally');
        proxy!.setDown(true);
        assert.equal(await raw.zcard('kvgate-test:{p}:f:w2'), 1, 'the commit ran: Redis counts a lease nobody holds');
        await new Promise((r) => setTimeout(r, 300));
        proxy!.setLatency(0);
        proxy!.setDown(false);
        // Back, Redis counts the request decided locally (resync re-adds its lease), and only it.
        const until = Date.now() + 5000;
        while ((await raw.zrange('kvgate-test:{p}:f:w2', '0', '-1')).join() !== res.lease.id) {
          assert.ok(Date.now() < until, `taken back once Redis is reachable, not after the lease TTL: ${(await raw.zrange('kvgate-test:{p}:f:w2', '0', '-1')).join()}`);
          await new Promise((r) => setTimeout(r, 50));
        }
        await store.release(res.lease);
        assert.equal(await raw.zcard('kvgate-test:{p}:f:w2'), 0);
      },
      { proxy: true },
    ));

  test('closing sends the releases still waiting for a command', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const res = await store.commit(commitRequest({ workers, key: 's:closing', worker: 'w2' }));
      assert.ok(res.ok, "res.ok");
      const released = store.release(res.lease);
      await store.close();
      await released;
      assert.equal(await raw.zcard('kvgate-test:{p}:f:w2'), 0);
    }));
});

describe('redis store: prompt blocks, a hash and a recency set per worker', () => {
  const workers = ['w1', 'w2', 'w3'];
  const commitOn = async (store: RedisStore, worker: string, blocks: readonly string[], extra: { prefixTtlMs?: number; capacityBlocks?: number } = {}) => {
    const res = await store.commit(commitRequest({ workers, blocks, worker, capacityBlocks: 1000, ...extra }));
    assert.ok(res.ok && !res.degraded, "res.ok && !res.degraded");
    await store.release(res.lease);
  };
  const depths = async (store: RedisStore, blocks: readonly string[]) => (await store.snapshot({ pool: 'p', key: undefined, workers, blocks })).prefix;

  test('a commit rewrites the chosen worker’s holdings once they are older than the freshness window: each lapses one TTL after its latest routing past it', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      // A 400 s TTL: the window is a thousandth of it, 400 ms, so that two commits made one after
      // the other fall inside it on a loaded machine too (a 20 ms window saw them 30 ms apart in CI).
      const TTL = 400_000;
      const blocks = Array.from({ length: 40 }, (_, i) => `again${i}`);
      const held = async () => (await raw.hmget('kvgate-test:{p}:bh:w1', ...blocks)).map(Number);
      const t1 = await redisNow(raw);
      await commitOn(store, 'w1', blocks, { prefixTtlMs: TTL });
      const first = await held();
      for (const u of first) assert.ok(u >= t1 + TTL, 'written: until now + TTL');
      // Again at once, and longer: the prompt's holdings stand as written, the blocks past it lapse with them.
      const longer = [...blocks, 'again40', 'again41'];
      await commitOn(store, 'w1', longer, { prefixTtlMs: TTL });
      assert.deepEqual(await held(), first, 'inside the window: left as written');
      assert.deepEqual((await raw.hmget('kvgate-test:{p}:bh:w1', 'again40', 'again41')).map(Number), [first[39], first[39]]);
      await new Promise((r) => setTimeout(r, 450));
      // Again past the window: rewritten.
      const t2 = await redisNow(raw);
      await commitOn(store, 'w1', blocks, { prefixTtlMs: TTL });
      for (const u of await held()) assert.ok(u >= t2 + TTL, `rewritten: until ${t2} + TTL`);
      for (const k of ['bh', 'br']) assert.ok((await raw.pttl(`kvgate-test:{p}:${k}:w1`)) > TTL - 1000, `${k}:w1 lives as long as its newest holding`);
      assert.equal((await depths(store, longer)).get('w1'), longer.length);
    }));


  test('a holding that lapsed mid-run ends the worker’s run there, wherever it falls among the chunks a scan or the probes of a search read', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const blocks = Array.from({ length: 200 }, (_, i) => `run${i}`);
      await commitOn(store, 'w1', blocks);
      await commitOn(store, 'w2', blocks.slice(0, 50));
      const hk = 'kvgate-test:{p}:bh:w1';
      const mark = (await raw.hget(hk, HOLDINGS_ENCODING_FIELD))!;
      const untils = await raw.hmget(hk, ...blocks);
      // A scan (a hash without the mark commits write is read block by block) takes 8 blocks, then
      // 32, then 128; a search probes 2, 4, 8, ... 128, 200, then 7 points a bracket: runs ending
      // on either side of each boundary. One holding lapsed among live ones (no commit leaves that,
      // hence the unmarked hash) for the scan; every holding from there on lapsed for the search.
      for (const k of [0, 1, 2, 3, 4, 7, 8, 9, 16, 39, 40, 41, 63, 64, 65, 100, 127, 128, 129, 167, 168, 169, 198, 199]) {
        const lapsed = String((await redisNow(raw)) - 1);
        await raw.hset(hk, HOLDINGS_ENCODING_FIELD, 'unmarked', blocks[k]!, lapsed);
        let d = await depths(store, blocks);
        assert.equal(d.get('w1') ?? 0, k, `scan, block ${k} lapsed: w1 holds the ${k} before it`);
        assert.equal(d.get('w2'), 50, 'w2’s own holding of the same blocks is untouched');
        await raw.hset(hk, HOLDINGS_ENCODING_FIELD, mark, ...blocks.slice(k).flatMap((b) => [b, lapsed]));
        d = await depths(store, blocks);
        assert.equal(d.get('w1') ?? 0, k, `search, blocks ${k}.. lapsed: w1 holds the ${k} before them`);
        assert.equal(d.get('w2'), 50, 'w2’s own holding of the same blocks is untouched');
        await raw.hset(hk, ...blocks.flatMap((b, j) => [b, untils[j]!]));
      }
      assert.equal((await depths(store, blocks)).get('w1'), 200);
      // A holding lapsing a second from now is still live.
      await raw.hset(hk, blocks[3]!, String((await redisNow(raw)) + 1000));
      assert.equal((await depths(store, blocks)).get('w1'), 200);
    }));

  test('a holding lapses on its own while another worker keeps being sent the block and its own worker other prompts', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const blocks = Array.from({ length: 20 }, (_, i) => `own${i}`);
      const other = Array.from({ length: 20 }, (_, i) => `other${i}`);
      const ttl = { prefixTtlMs: 400 };
      await commitOn(store, 'w1', blocks, ttl);
      // Every 100 ms, well past the TTL: w2 is sent the prompt, and w1 another one, which keeps
      // w1's keys alive: only the holding's own lapse time can end it.
      for (let i = 0; i < 6; i++) {
        await commitOn(store, 'w2', blocks, ttl);
        await commitOn(store, 'w1', other, ttl);
        await new Promise((r) => setTimeout(r, 100));
      }
      const d = await depths(store, blocks);
      assert.equal(d.get('w1') ?? 0, 0, 'w1 was last sent these blocks 600 ms ago');
      assert.equal(d.get('w2'), 20);
      assert.equal((await depths(store, other)).get('w1'), 20);
      assert.ok((await raw.hexists('kvgate-test:{p}:bh:w1', 'own0')) === 1, 'the lapsed holding is still stored: its time ended it');
    }));

  test('a trim past capacity runs inside the commit: the deepest, least recent blocks leave both of the worker’s keys, and no per-block key is written', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const older = Array.from({ length: 6 }, (_, i) => `old${i}`);
      const newer = Array.from({ length: 6 }, (_, i) => `new${i}`);
      await commitOn(store, 'w1', older, { capacityBlocks: 8 });
      await new Promise((r) => setTimeout(r, 3));
      await commitOn(store, 'w1', newer, { capacityBlocks: 8 });
      const kept = ['old0', 'old1', ...newer].sort();
      const blocksHeld = async () => (await raw.hkeys('kvgate-test:{p}:bh:w1')).filter((f) => f !== HOLDINGS_ENCODING_FIELD);
      assert.deepEqual((await blocksHeld()).sort(), kept, 'the older prompt lost its 4 deepest blocks');
      assert.deepEqual((await raw.zrange('kvgate-test:{p}:br:w1', '0', '-1')).sort(), kept, 'the recency set has the same members');
      assert.equal((await depths(store, older)).get('w1'), 2);
      assert.equal((await depths(store, newer)).get('w1'), 6);
      // A prompt longer than the capacity keeps its first blocks only.
      const long = Array.from({ length: 12 }, (_, i) => `long${i}`);
      await new Promise((r) => setTimeout(r, 3));
      await commitOn(store, 'w1', long, { capacityBlocks: 8 });
      assert.equal((await blocksHeld()).length, 8);
      assert.equal((await depths(store, long)).get('w1'), 8);
      const keys = await raw.keys('kvgate-test:*');
      assert.deepEqual(keys.filter((k) => /:(b|bw):/.test(k)), [], `no key of the per-block layout: ${keys.join(' ')}`);
    }));

  test('a trim takes the least recently routed blocks first, even when a routing of more than 1000 blocks follows another within milliseconds', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000, timeoutMs: 5000 });
      const short = Array.from({ length: 10 }, (_, i) => `short${i}`);
      const long = Array.from({ length: 3000 }, (_, i) => `long${i}`);
      const commit = (blocks: string[]) => store.commit(commitRequest({ workers, blocks, worker: 'w1', capacityBlocks: 3005 }));
      // Sent together, run back to back: the long prompt is the newer by well under a millisecond
      // or two, and the 5 blocks past capacity are the short one's deepest (as in process).
      const [a, b] = await Promise.all([commit(short), commit(long)]);
      assert.ok(a.ok && b.ok && !a.degraded && !b.degraded, "a.ok && b.ok && !a.degraded && !b.degraded");
      const held = new Set((await raw.hkeys('kvgate-test:{p}:bh:w1')).filter((f) => f !== HOLDINGS_ENCODING_FIELD));
      assert.deepEqual(short.filter((s) => !held.has(s)), short.slice(5), 'the older prompt lost its deepest blocks');
      assert.equal(long.filter((s) => !held.has(s)).length, 0, 'the newer prompt is whole');
      const memory = new MemoryStore();
      for (const blocks of [short, long]) {
        const r = await memory.commit(commitRequest({ workers, blocks, worker: 'w1', capacityBlocks: 3005 }));
        assert.ok(r.ok, "r.ok");
      }
      for (const blocks of [short, long]) {
        const q = { pool: 'p', key: undefined, workers, blocks };
        assert.deepEqual((await store.snapshot(q)).prefix, (await memory.snapshot(q)).prefix);
      }
      await memory.close();
      for (const l of [a, b]) if (l.ok) await store.release(l.lease);
    }));

  test('a recency set Redis evicted without its holdings (maxmemory-policy) leaves no holding past capacity that no trim would remove', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const hk = 'kvgate-test:{p}:bh:w1';
      const blocksHeld = async () => (await raw.hkeys(hk)).filter((f) => f !== HOLDINGS_ENCODING_FIELD);
      const older = Array.from({ length: 6 }, (_, i) => `gone${i}`);
      await commitOn(store, 'w1', older, { capacityBlocks: 8 });
      // volatile-lru (envoy/kubernetes/redis.yaml) picks the recency set first: only commits touch
      // it, where every decision reads the holdings.
      assert.equal(await raw.del('kvgate-test:{p}:br:w1'), 1);
      for (let r = 0; r < 3; r++) {
        await new Promise((res) => setTimeout(res, 3));
        await commitOn(store, 'w1', Array.from({ length: 6 }, (_, i) => `later${r}-${i}`), { capacityBlocks: 8 });
      }
      const held = await blocksHeld();
      assert.equal(held.length, 8, `at most the worker's capacity: ${held.join(' ')}`);
      assert.deepEqual(held.sort(), (await raw.zrange('kvgate-test:{p}:br:w1', '0', '-1')).sort(), 'both keys have the same blocks again');
      assert.equal((await depths(store, older)).get('w1') ?? 0, 0, 'the blocks the recency set lost are no longer matched');
    }));

  test('a worker’s holdings are a hash table from its first commit, not a listpack that finds a block by scanning them all', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      await commitOn(store, 'w1', ['one', 'two', 'three']);
      assert.equal(await raw.object('ENCODING', 'kvgate-test:{p}:bh:w1'), 'hashtable');
      assert.equal((await depths(store, ['one', 'two', 'three'])).get('w1'), 3, 'the extra field is no block');
    }));

  test('matches what the memory store matches, over random prompts, workers and capacities', () =>
    withRedis(async ({ store: open }) => {
      const { default: fc } = await import('fast-check');
      // Every commit recorded in full, as the memory store records it: the freshness window (which
      // the store's own tests cover) would leave a prompt routed again within milliseconds at its
      // first routing's rank, and these capacities are small enough for that rank to decide a trim.
      const redis = await open({ refreshMs: 60_000, prefixFreshMs: 0 });
      // Prompts branch off shared roots, as chained block hashes do: a branch's block i is named by
      // its root and the branch it left the root at, so two prompts share exactly their common prefix.
      const prompt = (root: number, forkAt: number, branch: number, length: number) =>
        Array.from({ length }, (_, i) => (i < forkAt ? `r${root}-${i}` : `r${root}-f${forkAt}b${branch}-${i}`));
      const arbPrompt = fc.tuple(fc.integer({ min: 0, max: 1 }), fc.integer({ min: 0, max: 60 }), fc.integer({ min: 0, max: 2 }), fc.integer({ min: 1, max: 180 }));
      let run = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.record({ worker: fc.constantFrom(...workers), prompt: arbPrompt }), { minLength: 1, maxLength: 12 }),
          fc.constantFrom(40, 150, 1000),
          fc.array(arbPrompt, { minLength: 1, maxLength: 4 }),
          async (commits, capacityBlocks, queries) => {
            const pool = `diff${run++}`;
            const memory = new MemoryStore();
            for (const c of commits) {
              const blocks = prompt(...c.prompt);
              const r = commitRequest({ pool, workers, blocks, worker: c.worker, capacityBlocks });
              const [a, b] = [await memory.commit(r), await redis.commit(r)];
              assert.ok(a.ok && b.ok && !b.degraded, "a.ok && b.ok && !b.degraded");
              await Promise.all([memory.release(a.lease), redis.release(b.lease)]);
            }
            for (const qp of [...commits.map((c) => c.prompt), ...queries]) {
              const q = { pool, key: undefined, workers, blocks: prompt(...qp) };
              assert.deepEqual(new Map([...(await redis.snapshot(q)).prefix].sort()), new Map([...(await memory.snapshot(q)).prefix].sort()), `prompt ${qp.join('/')}`);
            }
            await memory.close();
          },
        ),
        { numRuns: 25 },
      );
    }));
});

describe('redis store: live sessions are counted in Redis, for every replica', () => {
  const workers = ['w1', 'w2'];
  const WINDOW = 10_000;
  const commit = async (store: RedisStore, key: string, worker: string, live: boolean | undefined, affinity?: string) => {
    const res = await store.commit(commitRequest({ key, workers, worker, live, liveWindowMs: WINDOW, preconditions: { affinity } }));
    assert.ok(res.ok && !res.degraded, 'res.ok && !res.degraded');
    await store.release(res.lease);
  };
  const sorted = (m: ReadonlyMap<string, number> | undefined) => [...(m ?? [])].sort();

  test('a replica counts the sessions another one routed; its decisions start from the count the last reply or refresh brought', () =>
    withRedis(async ({ store: open }) => {
      const a = await open({ refreshMs: 60_000 });
      const b = await open({ refreshMs: 50 });
      await commit(a, 's:1', 'w1', true);
      await commit(a, 's:2', 'w1', true);
      await commit(a, 's:3', 'w2', true);
      await commit(a, 's:4', 'w2', false); // a chat turn: not counted
      const q = { pool: 'p', key: undefined, workers, blocks: [], liveWindowMs: WINDOW };
      // b routed none of them.
      assert.deepEqual(sorted((await b.snapshot(q)).live), [['w1', 2], ['w2', 1]]);
      assert.deepEqual(sorted(b.cachedSnapshot(q).live), [['w1', 2], ['w2', 1]], 'the read taught its view');
      // A session that moves leaves its old worker's count, on whichever replica routes it.
      await commit(b, 's:1', 'w2', true, 'w1');
      assert.deepEqual(sorted(b.cachedSnapshot(q).live), [['w1', 1], ['w2', 2]], "the commit's own reply counts it");
      // a's view has not seen that: its refresh (every 60 s) has not run, and it decided nothing since.
      assert.deepEqual(sorted(a.cachedSnapshot(q).live), [['w1', 2], ['w2', 1]]);
      // b's refresh asks again with the window its decisions asked for.
      await commit(a, 's:5', 'w1', true);
      await waitFor(() => sorted(b.cachedSnapshot(q).live).join() === [['w1', 2], ['w2', 2]].join(), 3000, "b's refresh counts a's new session");
    }));

  test('the refresh stops counting once no decision has asked for a while (a reload turned the term off), and starts again with the next that asks', () =>
    withRedis(async ({ raw, store: open }) => {
      const a = await open({ refreshMs: 60_000 });
      const b = await open({ refreshMs: 30, liveAskIdleMs: 300 });
      const calls = async (command: string) => Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await raw.info('commandstats'))?.[1] ?? 0);
      const q = { pool: 'p', key: undefined, workers, blocks: [], liveWindowMs: WINDOW };
      await commit(b, 's:1', 'w1', true);
      // While b's decisions ask, its refresh counts what a routes.
      await commit(a, 's:2', 'w2', true);
      await waitFor(() => sorted(b.cachedSnapshot(q).live).join() === [['w1', 1], ['w2', 1]].join(), 3000, "b's refresh counts a's session");
      // b asks no more: past the idle time its refresh forgets the count and stops asking Redis.
      await waitFor(() => b.cachedSnapshot(q).live?.size === 0, 3000, 'the count is forgotten');
      const zcounts = await calls('zcount');
      const evals = await calls('evalsha');
      await waitFor(async () => (await calls('evalsha')) >= evals + 3, 3000, 'three more refreshes');
      assert.equal(await calls('zcount'), zcounts, 'no refresh counted live sessions');
      // The next decision that asks brings the counting back, the other replica's sessions too.
      await commit(b, 's:3', 'w1', true);
      await commit(a, 's:4', 'w2', true);
      await waitFor(() => sorted(b.cachedSnapshot(q).live).join() === [['w1', 2], ['w2', 2]].join(), 3000, "b's refresh counts again");
    }));

  test('through a gate: a long-prompt session\'s commit asks for the counts, so the next decision on this replica weighs the fleet\'s', () =>
    withRedis(async ({ store: open }) => {
      await initHashing();
      const config = parseConfig({ workers: workers.map((id) => ({ id, cluster: id })), scoring: { sessions_min_tokens: 1000 } }, 'test');
      const other = await open({ refreshMs: 60_000 });
      const mine = await open({ refreshMs: 60_000 });
      // Another replica routed two agents to w1.
      for (const key of ['s:x', 's:y']) {
        const res = await other.commit(commitRequest({ pool: 'default', key, workers, worker: 'w1', live: true, liveWindowMs: WINDOW }));
        assert.ok(res.ok, 'res.ok');
        await other.release(res.lease);
      }
      const gate = new Gate(config, mine, silentLogger());
      const long = 'an agent with a long prompt '.padEnd(8000, 'x');
      const r = await gate.route(chatRequest(long, { session: 'agent-1' }));
      assert.equal(r.kind, 'route');
      if (r.kind === 'route') await gate.release(r.lease);
      const worker = r.kind === 'route' ? r.worker : '';
      // No read: this replica's view holds what its commit's reply counted, its own session too.
      const q = { pool: gate.pool, key: undefined, workers, blocks: [], liveWindowMs: config.scoring.sessions_window_s * 1000 };
      assert.deepEqual(sorted(mine.cachedSnapshot(q).live), worker === 'w1' ? [['w1', 3]] : [['w1', 2], ['w2', 1]]);
    }));

  test('a session moved without a mark (the proxy named another worker) takes its count along; migrated, too', () =>
    withRedis(async ({ store: open }) => {
      const a = await open({ refreshMs: 60_000 });
      await commit(a, 's:1', 'w1', true);
      await commit(a, 's:1', 'w2', undefined, 'w1');
      const q = { pool: 'p', key: undefined, workers, blocks: [], liveWindowMs: WINDOW };
      assert.deepEqual(sorted((await a.snapshot(q)).live), [['w2', 1]]);
      await a.migrate('p', 'w2', [{ key: 's:1', to: 'w1' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 });
      assert.deepEqual(sorted((await a.snapshot(q)).live), [['w1', 1]]);
    }));
});

describe('redis store: what a commit counts and writes', () => {
  const workers = ['w1', 'w2'];

  test('a lapsed lease still in the set counts neither against a limit nor as the session’s request; a read drops it', () =>
    withRedis(async ({ raw, store: open }) => {
      // No refresh: nothing reads (and so purges) the lease sets behind the commits' backs.
      const store = await open({ refreshMs: 60_000 });
      const leases = 'kvgate-test:{p}:f:w1';
      await raw.zadd(leases, (await redisNow(raw)) - 1000, 'lapsed|s:k');
      const first = await store.commit(commitRequest({ workers, key: 's:k', worker: 'w1', preconditions: { below: [{ worker: 'w1', limit: 1 }] } }));
      assert.ok(first.ok && !first.degraded, 'w1 has nothing live in flight: below 1');
      // The session's second request: one live lease of its own on w1, and the lapsed one.
      const second = await store.commit(commitRequest({ workers, key: 's:k', worker: 'w1', preconditions: { affinity: 'w1', below: [{ worker: 'w1', limit: 2 }] } }));
      assert.ok(second.ok && !second.degraded, 'w1 counts one lease, not two');
      const seen = store.cachedSnapshot({ pool: 'p', key: 's:k', workers, blocks: [] });
      assert.equal(seen.keyInflight, 2, 'the session has two requests in flight, not three');
      assert.equal(seen.inflight.get('w1'), 2);
      const read = await store.snapshot({ pool: 'p', key: 's:k', workers, blocks: [] });
      assert.equal(read.inflight.get('w1'), 2);
      assert.equal(await raw.zscore(leases, 'lapsed|s:k'), null, 'a read purges lapsed leases, so sets do not grow');
      await store.release(first.lease);
      await store.release(second.lease);
    }));

  test('a worker’s session set holds about its live affinities: a commit to the worker drops the lapsed ones', () =>
    withRedis(async ({ raw, store: open }) => {
      // No refresh, no migration: only commits touch the session sets.
      const store = await open({ refreshMs: 60_000, timeoutMs: 2000 });
      const sessions = 'kvgate-test:{p}:ws:w1';
      const live = await store.commit(commitRequest({ workers, worker: 'w1', key: 's:long', affinityTtlMs: 60_000 }));
      assert.ok(live.ok && !live.degraded, "live.ok && !live.degraded");
      await store.release(live.lease);
      // Fifty sessions at once, each affinity lapsing 300 ms later.
      const short = await Promise.all(Array.from({ length: 50 }, (_, i) => store.commit(commitRequest({ workers, worker: 'w1', key: `s:short-${i}`, affinityTtlMs: 300 }))));
      for (const r of short) assert.ok(r.ok && !r.degraded, "r.ok && !r.degraded");
      await Promise.all(short.map((r) => r.ok && store.release(r.lease)));
      assert.equal(await raw.zcard(sessions), 51);
      await new Promise((r) => setTimeout(r, 350)); // the 50 short affinities lapse
      const next = await store.commit(commitRequest({ workers, worker: 'w1', key: 's:next', affinityTtlMs: 60_000 }));
      assert.ok(next.ok && !next.degraded, "next.ok && !next.degraded");
      await store.release(next.lease);
      assert.deepEqual((await raw.zrange(sessions, '0', '-1')).sort(), ['s:long', 's:next'], 'only the live sessions are left');
    }));

  test('a renewal keeps every lease it names, adding back one that lapsed or is gone, and says which', () =>
    withRedis(async ({ raw }) => {
      const { defineScripts } = await import('../../src/state/redis-commands.js');
      defineScripts(raw);
      const leases = 'kvgate-test:{p}:f:w1';
      const now = await redisNow(raw);
      await raw.zadd(leases, now + 10_000, 'live', now - 1000, 'lapsed', now - 1000, 'another-gate');
      const back = await raw.kvgateRenew(leases, 30_000, 'live', 'lapsed', 'gone');
      assert.deepEqual(back, ['lapsed', 'gone'], 'the renewing replica still holds them: their requests are running');
      for (const m of ['live', 'lapsed', 'gone']) assert.ok(Number(await raw.zscore(leases, m)) >= now + 30_000, `${m} lapses a TTL from now`);
      assert.equal(await raw.zscore(leases, 'another-gate'), null, 'a lapsed lease nobody renews is purged');
    }));

  test('the times and recency scores a commit writes are exact integers (no rounding in their formatting)', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const blocks = Array.from({ length: 40 }, (_, i) => `exact${i}`);
      const before = await redisNow(raw);
      const res = await store.commit(commitRequest({ workers, key: 's:x', blocks, worker: 'w1', affinityTtlMs: 3_600_000, prefixTtlMs: 1_800_000, capacityBlocks: 1000 }));
      assert.ok(res.ok && !res.degraded, "res.ok && !res.degraded");
      const after = await redisNow(raw);
      const integer = /^\d+$/;
      const within = (v: string | null, offset: number, what: string) => {
        assert.match(String(v), integer, `${what} is written as an integer: ${v}`);
        assert.ok(Number(v) >= before + offset && Number(v) <= after + offset, `${what}: ${v} is Redis's now + ${offset}`);
      };
      const held = await raw.hmget('kvgate-test:{p}:bh:w1', ...blocks);
      for (const v of held) within(v, 1_800_000, 'a holding');
      assert.equal(new Set(held).size, 1, 'one time for the whole prompt');
      within(await raw.zscore('kvgate-test:{p}:f:w1', res.ok ? res.lease.id : ''), 30_000, 'the lease');
      within(await raw.zscore('kvgate-test:{p}:ws:w1', 's:x'), 3_600_000, 'the session');
      // Recency: ms * 1000 minus the block's depth, so within one routing the deepest go first.
      const scores = await Promise.all(blocks.map((b) => raw.zscore('kvgate-test:{p}:br:w1', b)));
      const first = Number(scores[0]);
      scores.forEach((v, i) => {
        assert.match(String(v), integer);
        assert.equal(first - Number(v), i, `block ${i + 1} scores ${i} below the first`);
      });
      assert.ok(first >= before * 1000 + 100_000 - 1 && first <= after * 1000 + 100_000 - 1, "first >= before * 1000 + 100_000 - 1 && first <= after * 1000 + 100_000 - 1");
      if (res.ok) await store.release(res.lease);
    }));
});

function chunk(flat: string[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, flat[i + 1]!]);
  return out;
}

describe('redis store: a worker state this replica wrote', () => {
  const workers = ['w1', 'w2'];
  const q = { pool: 'p', key: undefined, workers, blocks: [] };

  /**
   * Runs `write` while a read of the pool (a refresh's, a decision's) is on its way: Redis is paused
   * (CLIENT PAUSE, from another connection), the read is sent, then the write. Once the pause ends
   * Redis runs both in order and answers both in one packet, so the store handles the read's reply
   * (taken before the write) and the write's acknowledgement in the same turn, as a busy gate does
   * whenever its event loop falls behind its socket. `read` picks what is in flight.
   */
  async function acrossRead(raw: Redis, store: RedisStore, write: () => Promise<void>, read: 'read' | 'commit' = 'read'): Promise<void> {
    // Timed: a paused Redis would hold an UNPAUSE from another connection too.
    const PAUSE_MS = 500;
    assert.equal(await raw.client('PAUSE', String(PAUSE_MS), 'ALL'), 'OK');
    const pausedAt = Date.now();
    const inFlight =
      read === 'read'
        ? store.snapshot(q)
        : store.commit(commitRequest({ workers, worker: 'w1' }));
    // A socket write of its own for the state write, as an admin call arriving later makes.
    await new Promise((r) => setImmediate(r));
    const written = write();
    // Otherwise the read may have been answered on its own before the write was sent: a pass would prove nothing.
    assert.ok(Date.now() - pausedAt < PAUSE_MS / 2, `both were sent while Redis was paused (${Date.now() - pausedAt} ms after the pause)`);
    await Promise.all([inFlight, written]);
  }

  test('a reply read before this replica’s state write does not undo it in the replica’s view', () =>
    withRedis(async ({ raw, store: open }) => {
      // No refresh of its own: the only reads are the test's.
      const store = await open({ refreshMs: 60_000, timeoutMs: 5000 });
      await store.snapshot(q);
      await acrossRead(raw, store, () => store.setWorkerState('p', 'w2', 'draining'));
      assert.equal(await raw.hget('kvgate-test:{p}:s', 'w2'), 'draining', 'Redis has the write');
      assert.equal(store.cachedSnapshot(q).states.get('w2'), 'draining', 'a drained worker stays drained on the replica that drained it');
      await acrossRead(raw, store, () => store.setWorkerState('p', 'w2', 'healthy'));
      assert.equal(store.cachedSnapshot(q).states.get('w2'), undefined, 'and a worker put back is back at once');
      // A commit's reply carries the states too.
      await acrossRead(raw, store, () => store.setWorkerState('p', 'w2', 'down'), 'commit');
      assert.equal(store.cachedSnapshot(q).states.get('w2'), 'down', 'a commit’s reply read before the write does not undo it either');
    }));

  test('a state written before this replica decided anything in the pool is in its first view', () =>
    withRedis(async ({ store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      // An operator drains w2 on a replica that has not routed yet: its first decisions (before
      // any reply, or on local state if Redis is slow) must not see w2 healthy.
      await store.setWorkerState('p', 'w2', 'draining');
      assert.equal(store.cachedSnapshot(q).states.get('w2'), 'draining');
    }));

  test('a reply read after the write is the truth again: another replica’s later state is learned', () =>
    withRedis(async ({ raw, store: open }) => {
      const a = await open({ refreshMs: 60_000, timeoutMs: 5000 });
      const b = await open({ refreshMs: 60_000 });
      await a.snapshot(q);
      await acrossRead(raw, a, () => a.setWorkerState('p', 'w2', 'draining'));
      assert.equal(a.cachedSnapshot(q).states.get('w2'), 'draining');
      await b.setWorkerState('p', 'w2', 'healthy');
      assert.equal(a.cachedSnapshot(q).states.get('w2'), 'draining', 'not seen before a’s next read');
      await a.snapshot(q);
      assert.equal(a.cachedSnapshot(q).states.get('w2'), undefined, 'a’s own write no longer stands in for Redis once a reply read after it came');
    }));
});

describe('redis store: the operator state a decision relied on is checked at commit', () => {
  /** A request without a session whose prompt is `blocks` blocks long (256 characters each). */
  function promptRequest(blocks: number): RequestInfo {
    const content = Array.from({ length: blocks }, (_, i) => `block ${i} of the shared document `.padEnd(256, '.')).join('');
    return chatRequest(content, { model: 'm' });
  }
  const signals = (kvUsage: number) => ({ signals: { kvUsage, running: 1, waiting: 0 }, ageMs: 0, failures: 0 });

  test('a worker pressured by its signals, drained by another replica, gets no request its prompt would bring it', () =>
    withRedis(async ({ raw, store: open }) => {
      await initHashing();
      const workers = ['w1', 'w2'];
      const config = parseConfig({ workers: workers.map((id) => ({ id, cluster: id, max_inflight: 50, metrics_url: `http://127.0.0.1:9/${id}` })) }, 'test');
      // No refresh: this replica learns another's drain only through a commit's reply.
      const store = await open({ refreshMs: 60_000, timeoutMs: 5000 });
      const gate = new Gate(config, store, silentLogger());
      const route = async () => {
        const r = await gate.route(promptRequest(12));
        assert.equal(r.kind, 'route');
        if (r.kind !== 'route') throw new Error('unreachable');
        assert.equal(r.degraded, false);
        await gate.release(r.lease);
        return r;
      };
      gate.setSignals(new Map([['w1', signals(0.1)], ['w2', signals(0.1)]]));
      // The prompt lands on w1 (w2 drained for the moment, by this replica).
      await store.setWorkerState('default', 'w2', 'draining');
      assert.equal((await route()).worker, 'w1');
      await store.setWorkerState('default', 'w2', undefined);
      // w1 reports KV pressure: it keeps what it holds, the prompt among it (the control: the path is reached).
      gate.setSignals(new Map([['w1', signals(0.95)], ['w2', signals(0.1)]]));
      const kept = await route();
      assert.equal(kept.worker, 'w1', 'a pressured worker keeps a prompt it holds');
      assert.equal(kept.explanation.candidates.find((c) => c.worker === 'w1')?.state, 'pressured');
      // Another replica drains w1; this one has not read it yet.
      await raw.hset('kvgate-test:{default}:s', 'w1', 'draining');
      assert.equal(store.cachedSnapshot({ pool: 'default', key: undefined, workers, blocks: [] }).states.get('w1'), undefined, 'the view is stale');
      const after = await route();
      assert.equal(after.worker, 'w2', 'the commit saw the drain (w1 had no operator state when decided) and the decision was made again');
      assert.equal(after.attempts, 2);
    }));
});

describe('redis store: a master demoted to a replica (READONLY)', () => {
  const workers = ['w1', 'w2'];

  /** ZREMs a server ran or refused (READONLY among the refusals). */
  async function zrems(r: Redis): Promise<number> {
    const m = /^cmdstat_zrem:calls=(\d+).*?rejected_calls=(\d+)/m.exec(await r.info('commandstats'));
    return m ? Number(m[1]) + Number(m[2]) : 0;
  }

  test('a commit refused with an error reply wrote nothing: no removal is sent for it, however many requests come', () =>
    withRedis(async ({ raw, store: open }) => {
      const master = await startRedis();
      try {
        // A timeout no reply comes near, even on a loaded machine: only error replies fail commits.
        const store = await open({ timeoutMs: 1000, refreshMs: 50 });
        const warm = await store.commit(commitRequest({ workers, worker: 'w1' }));
        assert.ok(warm.ok && !warm.degraded, "warm.ok && !warm.degraded");
        await store.release(warm.lease);
        // Demoted, and the address still leads here: every commit is answered READONLY.
        assert.equal(await raw.replicaof('127.0.0.1', String(master.port)), 'OK');
        const before = await zrems(raw);
        for (let i = 0; i < 100; i++) {
          const r = await store.commit(commitRequest({ workers, worker: 'w1' }));
          assert.ok(r.ok && r.degraded, 'decided locally');
          await store.release(r.lease);
        }
        // Several refreshes: a removal kept for retry would be sent on each.
        await new Promise((r) => setTimeout(r, 300));
        assert.equal((await zrems(raw)) - before, 0, 'no lease to take back: Redis wrote none');
      } finally {
        await master.stop();
      }
    }));

  test('releases Redis refuses are retried only until Redis has lapsed their leases', () =>
    withRedis(async ({ raw, store: open }) => {
      const master = await startRedis();
      try {
        const store = await open({ timeoutMs: 1000, refreshMs: 50, leaseTtlMs: 1000 });
        const held = [];
        for (let i = 0; i < 3; i++) {
          const r = await store.commit(commitRequest({ workers, worker: 'w1' }));
          assert.ok(r.ok && !r.degraded, "r.ok && !r.degraded");
          held.push(r.lease);
        }
        assert.equal(await raw.replicaof('127.0.0.1', String(master.port)), 'OK');
        const releasedAt = Date.now();
        for (const l of held) await store.release(l);
        const before = await zrems(raw);
        await new Promise((r) => setTimeout(r, 300));
        assert.ok((await zrems(raw)) > before, 'retried on the refreshes (the control)');
        // Past the lease TTL since the release, Redis would have lapsed them: no more retries.
        await new Promise((r) => setTimeout(r, releasedAt + 1000 + 100 - Date.now()));
        const lapsed = await zrems(raw);
        await new Promise((r) => setTimeout(r, 300));
        assert.equal((await zrems(raw)) - lapsed, 0, 'no removal sent for a lease Redis has lapsed');
      } finally {
        await master.stop();
      }
    }));

  test('readiness fails while the server is a replica: it answers PING, but every write is refused', () =>
    withRedis(async ({ raw, store: open }) => {
      const master = await startRedis();
      try {
        const store = await open({ timeoutMs: 1000 });
        const readiness = new Readiness({ store, readyWhenUnreachable: false, intervalMs: 60_000, logger: silentLogger(), onChange: () => undefined });
        assert.equal((await readiness.check()).status, 'ready');
        assert.equal(await raw.replicaof('127.0.0.1', String(master.port)), 'OK');
        assert.equal(await raw.ping(), 'PONG', 'the replica still answers PING');
        await assert.rejects(store.ping(), /READONLY/);
        const report = await readiness.check();
        assert.deepEqual([report.ready, report.status], [false, 'not_ready']);
        // Promoted back: ready again (after the reconnection READONLY asked for, if it is under way).
        assert.equal(await raw.replicaof('NO', 'ONE'), 'OK');
        const until = Date.now() + 3000;
        while ((await readiness.check()).status !== 'ready') {
          assert.ok(Date.now() < until, 'ready again within seconds of the promotion');
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.deepEqual(await raw.keys('*'), [], 'the readiness probe leaves no key behind');
      } finally {
        await master.stop();
      }
    }));

  test('the store reconnects, and commits again once its address leads to the new master', async () => {
    const [a, b] = await Promise.all([startRedis(), startRedis()]);
    const proxy = await startLatencyProxy(a.port);
    const rawA = new Redis(a.url);
    const rawB = new Redis(b.url);
    const store = redisStore(`redis://${proxy.address}`, { timeoutMs: 100, refreshMs: 100 });
    try {
      assert.ok(await store.waitReady(3000), "await store.waitReady(3000)");
      const first = await store.commit(commitRequest({ workers, worker: 'w1', key: 's:a' }));
      assert.ok(first.ok && !first.degraded, "first.ok && !first.degraded");
      await store.release(first.lease);
      // The failover: b is the master now, the address leads to it (a DNS name or virtual IP moved),
      // and a, still holding the store's connection, replicates b and refuses writes.
      proxy.setTarget(b.port);
      assert.equal(await rawA.replicaof('127.0.0.1', String(b.port)), 'OK');
      const until = Date.now() + 3000;
      for (;;) {
        const r = await store.commit(commitRequest({ workers, worker: 'w2' }));
        assert.ok(r.ok, "r.ok");
        if (!r.degraded) {
          assert.deepEqual(await rawB.zrange('kvgate-test:{p}:f:w2', '0', '-1'), [r.lease.id], 'committed on the new master');
          await store.release(r.lease);
          break;
        }
        await store.release(r.lease);
        assert.ok(Date.now() < until, 'commits reach the new master within seconds of the failover');
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      await store.close();
      rawA.disconnect();
      rawB.disconnect();
      await proxy.close();
      await Promise.all([a.stop(), b.stop()]);
    }
  });
});

describe('redis store: releases Redis refuses, retried on a slow connection', () => {
  test('one retry run at a time, however many refreshes come while it is on its way', () =>
    withRedis(
      async ({ raw, proxy }) => {
        const workers = ['w1', 'w2'];
        // A user that may do all but ZREM: every removal is refused (NOPERM), nothing else is, and
        // unlike READONLY no reconnection cuts a run short.
        assert.equal(await raw.call('ACL', 'SETUSER', 'noremove', 'on', '>pw', '~*', '&*', '+@all', '-zrem'), 'OK');
        const store = redisStore(`redis://noremove:pw@${proxy!.address}`, { timeoutMs: 2000, refreshMs: 50 });
        try {
          assert.ok(await store.waitReady(3000), 'the store reached Redis');
          const held = [];
          for (const worker of workers) {
            const r = await store.commit(commitRequest({ workers, worker }));
            assert.ok(r.ok && !r.degraded, 'committed on Redis');
            held.push(r.lease);
          }
          // Each retry run now waits 0.6 s for its replies, a dozen refreshes.
          proxy!.setLatency(300);
          await Promise.all(held.map((l) => store.release(l)));
          const zrems = async () => {
            const m = /^cmdstat_zrem:calls=(\d+).*?rejected_calls=(\d+)/m.exec(await raw.info('commandstats'));
            return m ? Number(m[1]) + Number(m[2]) : 0;
          };
          const before = await zrems();
          await new Promise((r) => setTimeout(r, 2000));
          const sent = (await zrems()) - before;
          // One ZREM per worker a run: about four runs in 2 s, where a run per refresh sent forty.
          assert.ok(sent > 0, 'the refused removals are retried (the control)');
          assert.ok(sent <= 2 * 6, `one run at a time (${sent} removals in 2 s)`);
        } finally {
          await store.close();
        }
      },
      { proxy: true },
    ));
});

describe('redis store: a connection that goes silent (packets dropped, nothing closed)', () => {
  test('is replaced within a few store timeouts, and the commands waiting on it stay bounded meanwhile', () =>
    withRedis(
      async ({ proxy, store: open }) => {
        const workers = ['w1', 'w2'];
        // timeout_ms 50: replaced after 250 ms of silence.
        const store = await open({ timeoutMs: 50, refreshMs: 50 }, { viaProxy: true });
        // ioredis's queue of commands written and waiting for their reply: what grew without bound.
        const queued = () => (store as unknown as { redis: { commandQueue: { length: number } } }).redis.commandQueue.length;
        let n = 0;
        let maxQueued = 0;
        let replacedAfter: number | undefined;
        let silentSince = 0;
        const before = proxy!.accepted;
        // 200 requests a second, each released 20 ms after its decision.
        const load = setInterval(() => {
          for (let i = 0; i < 10; i++) {
            void store.commit(commitRequest({ workers, worker: n++ % 2 ? 'w1' : 'w2' })).then((r) => {
              if (r.ok) setTimeout(() => void store.release(r.lease), 20);
            });
          }
        }, 50);
        const watch = setInterval(() => {
          maxQueued = Math.max(maxQueued, queued());
          if (silentSince > 0 && replacedAfter === undefined && proxy!.accepted > before) replacedAfter = Date.now() - silentSince;
        }, 5);
        try {
          await new Promise((r) => setTimeout(r, 300));
          proxy!.setBlackhole(true);
          silentSince = Date.now();
          maxQueued = 0;
          await new Promise((r) => setTimeout(r, 1500));
          assert.ok(replacedAfter !== undefined && replacedAfter < 1000, `the silent connection was replaced within a second (after ${replacedAfter} ms)`);
          assert.ok(maxQueued < 400, `at most a few timeouts' worth of commands waited on it (${maxQueued})`);
        } finally {
          clearInterval(load);
          clearInterval(watch);
          proxy!.setBlackhole(false);
        }
      },
      { proxy: true },
    ));
});
