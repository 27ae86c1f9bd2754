import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import type { RequestInfo } from '../../src/request/request.js';
import { initHashing } from '../../src/util/xxhash.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { RedisStore } from '../../src/state/redis-store.js';
import type { RoutingStore } from '../../src/state/store.js';
import { silentLogger } from '../helpers/logger.js';
import { startLatencyProxy, type LatencyProxy } from '../helpers/latency-proxy.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';
import { storeContract } from './store.contract.js';

type StoreOptions = ConstructorParameters<typeof RedisStore>[0];

/** A chat turn of a session, its prompt shorter than a block (placed by load alone). */
function sessionRequest(session: string): RequestInfo {
  const headers = new Map([
    ['content-type', 'application/json'],
    ['x-session-id', session],
  ]);
  return { method: 'POST', path: '/v1/chat/completions', headers, body: Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] })) };
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
  assert.ok(await store.waitReady(3000));
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

  test('two store instances on one Redis see each other’s affinities and loads', () =>
    withRedis(async ({ store }) => {
      const a = await store();
      const b = await store();
      const workers = ['w1', 'w2'];
      const res = await a.commit({ pool: 'p', key: 's:shared', workers, worker: 'w2', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(res.ok);
      const seen = await b.snapshot({ pool: 'p', key: 's:shared', workers, blocks: [] });
      assert.equal(seen.affinity, 'w2');
      assert.equal(seen.inflight.get('w2'), 1);
      // A decision on s:shared made from a view older than a's commit (no affinity yet) fails at
      // commit and hands back the truth instead of overwriting a's placement; the same commit for a
      // key nobody placed goes through (the control: nothing else made it fail).
      const fresh = await b.commit({ pool: 'p', key: 's:other', workers, worker: 'w1', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(fresh.ok);
      const race = await b.commit({ pool: 'p', key: 's:shared', workers, worker: 'w1', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.equal(race.ok, false);
      assert.equal(race.snapshot.affinity, 'w2');
    }));

  test('the view a decision starts from counts this replica’s commits still on their way to Redis, once each', () =>
    withRedis(async ({ store }) => {
      const a = await store();
      const workers = ['w1', 'w2'];
      const q = { pool: 'p', key: undefined, workers, blocks: [] };
      const commit = (key: string, affinity?: string) =>
        a.commit({ pool: 'p', key, workers, worker: 'w1', preconditions: { affinity, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok((await commit('s:placed')).ok);
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
      for (const r of await Promise.all(sent)) assert.ok(r.ok);
      assert.equal(a.cachedSnapshot(q).inflight.get('w1'), 3, 'each held commit counted once, through Redis’s reply');
      assert.equal(a.cachedSnapshot(q).inflight.get('w2'), 0);
    }));

  test('a burst of new sessions one gate decides before any reply is placed as on counts kept at once (the memory store)', () =>
    withRedis(async ({ store }) => {
      await initHashing();
      const config = parseConfig({ workers: ['w1', 'w2', 'w3'].map((id) => ({ id, cluster: id, max_inflight: 50 })) }, 'test');
      const workers = ['w1', 'w2', 'w3'];
      // Requests busy w2 and w3, so every decision of the burst starts from w1 alone being idle.
      const busy = async (s: RoutingStore) => {
        for (const worker of ['w2', 'w3']) {
          const r = await s.commit({ pool: 'default', key: undefined, workers, worker, preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
          assert.ok(r.ok);
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

  test('with Redis down, commits succeed on local state (degraded) and never throw', () =>
    withRedis(async ({ redis, store: open }) => {
      const store = await open({ timeoutMs: 100 });
      const workers = ['w1', 'w2'];
      const first = await store.commit({ pool: 'p', key: 's:d', workers, worker: 'w1', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(first.ok);
      await redis.kill();
      const t0 = Date.now();
      const res = await store.commit({ pool: 'p', key: 's:d', workers, worker: 'w1', preconditions: { affinity: 'w1', below: [{ worker: 'w1', limit: 10 }], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(res.ok);
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
        const base = { pool: 'p', key: undefined, workers, preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 };
        assert.ok((await kept.commit({ ...base, worker: 'w1' })).ok);
        assert.ok((await cut.commit({ ...base, worker: 'w2' })).ok);
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
        const base = { pool: 'p', workers, blocks: [], preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, prefixTtlMs: 60_000, capacityBlocks: 100 };
        const warm = await store.commit({ ...base, key: 's:warm', worker: 'w1' });
        assert.ok(warm.ok && !warm.degraded, 'the script is loaded on this connection');
        await store.release(warm.lease);
        // Redis forgets the script (a restart or failover does that); every hop now takes 80 ms.
        await raw.script('FLUSH');
        proxy!.setLatency(80);
        // EVALSHA reaches Redis at 80 ms, NOSCRIPT comes back at 160 ms, within the command timeout,
        // so ioredis resends the script as EVAL; it reaches Redis at 240 ms, after the 200 ms
        // deadline at which the gate decided locally.
        const late = await store.commit({ ...base, key: 's:late', worker: 'w2' });
        assert.ok(late.ok);
        assert.equal(late.degraded, true, 'decided locally past the deadline');
        await new Promise((r) => setTimeout(r, 900));
        assert.equal(await raw.zcard('kvgate-test:{p}:f:w2'), 0, 'no lease nobody holds (it would count against w2 until its TTL)');
        assert.equal(await raw.get('kvgate-test:{p}:a:s:late'), null, 'no affinity written behind the local decision’s back');
        await store.release(late.lease);
      },
      { proxy: true },
    ));

  test('offload events are entries of the pool’s Redis Stream with the documented fields', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open();
      const workers = ['w1', 'w2'];
      const base = { pool: 'p', workers, blocks: [], preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, prefixTtlMs: 60_000, capacityBlocks: 100 };
      assert.ok((await store.commit({ ...base, key: 's:abc', worker: 'w1' })).ok);
      await store.migrate('p', 'w1', [{ key: 's:abc', to: 'w2' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 });
      const entries = await raw.xrange(store.offloadStreamKey('p'), '-', '+');
      assert.equal(entries.length, 1);
      const fields = Object.fromEntries(chunk(entries[0]![1]));
      assert.deepEqual({ ...fields, time: undefined }, { session: 'abc', from: 'w1', to: 'w2', reason: 'kv_pressure', time: undefined });
      assert.ok(Number(fields['time']) > 1e12);
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
  const none = { affinity: undefined, below: [], atOrAbove: [], states: [] };
  const base = { pool: 'p', workers, blocks: [], preconditions: none, affinityTtlMs: 60_000, prefixTtlMs: 60_000, capacityBlocks: 100 };

  test('a release no command follows reaches Redis on its own, and release() resolves once it has', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const res = await store.commit({ ...base, key: 's:alone', worker: 'w1' });
      assert.ok(res.ok && !res.degraded);
      assert.equal(await raw.zcard('kvgate-test:{p}:f:w1'), 1);
      // No refresh (60 s) and no other command: only the flush timer can send it, and the 30 s
      // lease TTL is far off.
      await store.release(res.lease);
      assert.equal(await raw.zcard('kvgate-test:{p}:f:w1'), 0, 'removed from Redis by the time release() resolved');
    }));

  test('a release made before the session’s next commit is removed before that commit counts, in the same script call', () =>
    withRedis(async ({ redis, raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const monitor = new Redis(redis.url);
      const lines: Array<{ source: string; cmd: string }> = [];
      let mon: Awaited<ReturnType<typeof monitor.monitor>> | undefined;
      try {
        const first = await store.commit({ ...base, key: 's:k', worker: 'w1' });
        assert.ok(first.ok && !first.degraded);
        mon = await monitor.monitor();
        mon.on('monitor', (_t: string, args: string[], source: string) => lines.push({ source, cmd: args[0]!.toLowerCase() }));
        await new Promise((r) => setTimeout(r, 50));
        // Not awaited: the next commit, made at once, carries it. It may only pass if w1 has nothing
        // in flight and counts the session's requests afresh: the release must come first.
        const released = store.release(first.lease);
        const second = await store.commit({ ...base, key: 's:k', worker: 'w1', preconditions: { ...none, affinity: 'w1', below: [{ worker: 'w1', limit: 1 }] } });
        await released;
        assert.ok(second.ok, 'the commit saw w1 free: the release ran before it');
        assert.equal(store.cachedSnapshot({ pool: 'p', key: 's:k', workers, blocks: [] }).keyInflight, 1, 'the session has one request in flight, not two');
        assert.deepEqual(await raw.zrange('kvgate-test:{p}:f:w1', '0', '-1'), [second.lease.id]);
        await new Promise((r) => setTimeout(r, 50));
        const zrems = lines.filter((l) => l.cmd === 'zrem');
        assert.ok(zrems.length >= 1 && zrems.every((l) => l.source === 'lua'), `the removal ran inside the commit's script, not as a command of its own: ${JSON.stringify(lines)}`);
        assert.equal(lines.filter((l) => l.cmd === 'evalsha' || l.cmd === 'eval').length, 1, 'one round trip for release and commit');
      } finally {
        mon?.disconnect();
        monitor.disconnect();
      }
    }));

  test('a release whose carrying commit failed is not lost: it is retried once Redis is reachable', () =>
    withRedis(
      async ({ raw, proxy, store: open }) => {
        const store = await open({ timeoutMs: 100, refreshMs: 100 }, { viaProxy: true });
        const first = await store.commit({ ...base, key: 's:lost', worker: 'w1' });
        assert.ok(first.ok && !first.degraded);
        proxy!.setDown(true);
        await new Promise((r) => setTimeout(r, 50));
        // The release rides on this commit, which cannot reach Redis (it is decided locally).
        const released = store.release(first.lease);
        const during = await store.commit({ ...base, key: 's:other', worker: 'w2' });
        assert.ok(during.ok && during.degraded);
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

  test('closing sends the releases still waiting for a command', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const res = await store.commit({ ...base, key: 's:closing', worker: 'w2' });
      assert.ok(res.ok);
      const released = store.release(res.lease);
      await store.close();
      await released;
      assert.equal(await raw.zcard('kvgate-test:{p}:f:w2'), 0);
    }));
});

describe('redis store: prompt blocks a commit does not rewrite', () => {
  const workers = ['w1', 'w2'];
  const none = { affinity: undefined, below: [], atOrAbove: [], states: [] };
  const blocks = Array.from({ length: 40 }, (_, i) => `fresh${i}`);
  // A 60 s prefix TTL: holdings written less than 60 ms ago are left as they are.
  const TTL = 60_000;
  const WINDOW = 60;

  test('a holding is rewritten unless written within the window, and never lapses earlier than that allows', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const redisNow = async () => {
        const [s, us] = await raw.time();
        return Number(s) * 1000 + Math.floor(Number(us) / 1000);
      };
      const held = async () => Promise.all(blocks.map(async (b) => Number(await raw.hget(`kvgate-test:{p}:b:${b}`, 'w1'))));
      const commitAt = async () => {
        const t = await redisNow();
        const res = await store.commit({ pool: 'p', key: undefined, workers, blocks, worker: 'w1', preconditions: none, affinityTtlMs: 60_000, prefixTtlMs: TTL, capacityBlocks: 1000 });
        assert.ok(res.ok && !res.degraded);
        await store.release(res.lease);
        return t;
      };
      const t1 = await commitAt();
      const first = await held();
      for (const u of first) assert.ok(u >= t1 + TTL, 'written: until now + TTL');
      // Again at once: within the window, left as written.
      const t2 = await commitAt();
      const second = await held();
      if (t2 - t1 < WINDOW / 2) assert.deepEqual(second, first, 'a holding written just now is not rewritten');
      for (const u of second) assert.ok(u >= t2 + TTL - WINDOW, `lapses at most ${WINDOW} ms early`);
      for (const b of blocks) assert.ok((await raw.pttl(`kvgate-test:{p}:b:${b}`)) >= TTL - WINDOW - 50, 'the block key lives as long as its holding');
      // Past the window: rewritten.
      await new Promise((r) => setTimeout(r, WINDOW * 3));
      const t3 = await commitAt();
      for (const u of await held()) assert.ok(u >= t3 + TTL, 'rewritten once older than the window');
      // The prefix still matches in full.
      assert.equal((await store.snapshot({ pool: 'p', key: undefined, workers, blocks })).prefix.get('w1'), blocks.length);
    }));
});

describe('redis store: what a commit counts and writes', () => {
  const workers = ['w1', 'w2'];
  const none = { affinity: undefined, below: [], atOrAbove: [], states: [] };
  const redisNow = async (raw: Redis) => {
    const [s, us] = await raw.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };

  test('a lapsed lease still in the set counts neither against a limit nor as the session’s request; a read drops it', () =>
    withRedis(async ({ raw, store: open }) => {
      // No refresh: nothing reads (and so purges) the lease sets behind the commits' backs.
      const store = await open({ refreshMs: 60_000 });
      const leases = 'kvgate-test:{p}:f:w1';
      await raw.zadd(leases, (await redisNow(raw)) - 1000, 'lapsed|s:k');
      const first = await store.commit({ pool: 'p', key: 's:k', workers, blocks: [], worker: 'w1', preconditions: { ...none, below: [{ worker: 'w1', limit: 1 }] }, affinityTtlMs: 60_000, prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(first.ok && !first.degraded, 'w1 has nothing live in flight: below 1');
      // The session's second request: one live lease of its own on w1, and the lapsed one.
      const second = await store.commit({ pool: 'p', key: 's:k', workers, blocks: [], worker: 'w1', preconditions: { ...none, affinity: 'w1', below: [{ worker: 'w1', limit: 2 }] }, affinityTtlMs: 60_000, prefixTtlMs: 60_000, capacityBlocks: 100 });
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

  test('a renewal never brings back a lease that lapsed', () =>
    withRedis(async ({ raw }) => {
      const { defineScripts } = await import('../../src/state/redis-commands.js');
      defineScripts(raw);
      const leases = 'kvgate-test:{p}:f:w1';
      const now = await redisNow(raw);
      await raw.zadd(leases, now + 10_000, 'live', now - 1000, 'lapsed');
      await raw.kvgateRenew(leases, 30_000, 'live', 'lapsed');
      assert.equal(await raw.zscore(leases, 'lapsed'), null, 'a lapsed lease stays lapsed (commits no longer purge it first)');
      assert.ok(Number(await raw.zscore(leases, 'live')) >= now + 30_000, 'the live one is renewed');
    }));

  test('the times and recency scores a commit writes are exact integers (no rounding in their formatting)', () =>
    withRedis(async ({ raw, store: open }) => {
      const store = await open({ refreshMs: 60_000 });
      const blocks = Array.from({ length: 40 }, (_, i) => `exact${i}`);
      const before = await redisNow(raw);
      const res = await store.commit({ pool: 'p', key: 's:x', workers, blocks, worker: 'w1', preconditions: none, affinityTtlMs: 3_600_000, prefixTtlMs: 1_800_000, capacityBlocks: 1000 });
      assert.ok(res.ok && !res.degraded);
      const after = await redisNow(raw);
      const integer = /^\d+$/;
      const within = (v: string | null, offset: number, what: string) => {
        assert.match(String(v), integer, `${what} is written as an integer: ${v}`);
        assert.ok(Number(v) >= before + offset && Number(v) <= after + offset, `${what}: ${v} is Redis's now + ${offset}`);
      };
      const held = await Promise.all(blocks.map((b) => raw.hget(`kvgate-test:{p}:b:${b}`, 'w1')));
      for (const v of held) within(v, 1_800_000, 'a holding');
      assert.equal(new Set(held).size, 1, 'one time for the whole prompt');
      within(await raw.zscore('kvgate-test:{p}:f:w1', res.ok ? res.lease.id : ''), 30_000, 'the lease');
      within(await raw.zscore('kvgate-test:{p}:ws:w1', 's:x'), 3_600_000, 'the session');
      // Recency: ms * 1000 minus the block's depth, so within one routing the deepest go first.
      const scores = await Promise.all(blocks.map((b) => raw.zscore('kvgate-test:{p}:bw:w1', b)));
      const first = Number(scores[0]);
      scores.forEach((v, i) => {
        assert.match(String(v), integer);
        assert.equal(first - Number(v), i, `block ${i + 1} scores ${i} below the first`);
      });
      assert.ok(first >= before * 1000 + 100_000 - 1 && first <= after * 1000 + 100_000 - 1);
      if (res.ok) await store.release(res.lease);
    }));
});

function chunk(flat: string[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, flat[i + 1]!]);
  return out;
}
