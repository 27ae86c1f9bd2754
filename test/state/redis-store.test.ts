import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { RedisStore } from '../../src/state/redis-store.js';
import { silentLogger } from '../helpers/logger.js';
import { startRedis } from '../helpers/redis-server.js';
import { storeContract } from './store.contract.js';

function redisStore(url: string, overrides: Partial<ConstructorParameters<typeof RedisStore>[0]> = {}): RedisStore {
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
  test('a response id one replica learned is read by another; Redis away, each keeps what it learned', async () => {
    const redis = await startRedis();
    const a = redisStore(redis.url);
    const b = redisStore(redis.url);
    try {
      assert.ok(await a.waitReady(3000));
      assert.ok(await b.waitReady(3000));
      await a.recordResponse('p', 'resp-hash', 'w2', 60_000);
      assert.equal(await b.responseWorker('p', 'resp-hash'), 'w2', 'shared through Redis');
      await redis.stop();
      await a.recordResponse('p', 'while-down', 'w1', 60_000);
      assert.equal(await a.responseWorker('p', 'while-down'), 'w1', 'kept on the replica that learned it');
      assert.equal(await a.responseWorker('p', 'resp-hash'), 'w2');
      assert.equal(await b.responseWorker('p', 'while-down'), undefined, 'never shared: the other replica routes it by its other keys');
    } finally {
      await a.close();
      await b.close();
      await redis.stop();
    }
  });

  test('two store instances on one Redis see each other’s affinities and loads', async () => {
    const redis = await startRedis();
    const a = redisStore(redis.url);
    const b = redisStore(redis.url);
    try {
      assert.ok(await a.waitReady(3000));
      assert.ok(await b.waitReady(3000));
      const workers = ['w1', 'w2'];
      const res = await a.commit({ pool: 'p', key: 's:shared', workers, worker: 'w2', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(res.ok);
      const seen = await b.snapshot({ pool: 'p', key: 's:shared', workers, blocks: [] });
      assert.equal(seen.affinity, 'w2');
      assert.equal(seen.inflight.get('w2'), 1);
      // b's cached view is stale for this key until it reads: a commit on the stale view fails
      // and hands back the truth instead of overwriting a's placement.
      const stale = await b.commit({ pool: 'p', key: 's:other', workers, worker: 'w1', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(stale.ok);
      const race = await b.commit({ pool: 'p', key: 's:shared', workers, worker: 'w1', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.equal(race.ok, false);
      assert.equal(race.snapshot.affinity, 'w2');
    } finally {
      await a.close();
      await b.close();
      await redis.stop();
    }
  });

  test('with Redis down, commits succeed on local state (degraded) and never throw', async () => {
    const redis = await startRedis();
    const store = redisStore(redis.url, { timeoutMs: 100 });
    try {
      assert.ok(await store.waitReady(3000));
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
    } finally {
      await store.close();
      await redis.stop();
    }
  });

  test('Redis time decides lease expiry: an unrenewed lease lapses', async () => {
    const redis = await startRedis();
    const store = redisStore(redis.url, { leaseTtlMs: 300 });
    const other = redisStore(redis.url);
    try {
      assert.ok(await store.waitReady(3000));
      assert.ok(await other.waitReady(3000));
      const workers = ['w1'];
      const res = await store.commit({ pool: 'p', key: undefined, workers, worker: 'w1', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, affinityTtlMs: 60_000, blocks: [], prefixTtlMs: 60_000, capacityBlocks: 100 });
      assert.ok(res.ok);
      assert.equal((await other.snapshot({ pool: 'p', key: undefined, workers, blocks: [] })).inflight.get('w1'), 1);
      // Renewal runs every max(1 s, ttl/3); stop it by closing without release (as a crash would).
      (store as unknown as { liveLeases: Map<string, unknown> }).liveLeases.clear();
      await new Promise((r) => setTimeout(r, 600));
      assert.equal((await other.snapshot({ pool: 'p', key: undefined, workers, blocks: [] })).inflight.get('w1'), 0);
    } finally {
      await store.close();
      await other.close();
      await redis.stop();
    }
  });

  test('offload events are entries of the pool’s Redis Stream with the documented fields', async () => {
    const redis = await startRedis();
    const store = redisStore(redis.url);
    const { Redis } = await import('ioredis');
    const raw = new Redis(redis.url);
    try {
      assert.ok(await store.waitReady(3000));
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
    } finally {
      raw.disconnect();
      await store.close();
      await redis.stop();
    }
  });

  test('two replicas heartbeating on one Redis both see each other', async () => {
    const redis = await startRedis();
    const a = redisStore(redis.url);
    const b = redisStore(redis.url);
    try {
      assert.ok(await a.waitReady(3000));
      assert.ok(await b.waitReady(3000));
      await a.heartbeat('p', 'gate-a', 5000);
      const live = await b.heartbeat('p', 'gate-b', 5000);
      assert.deepEqual([...live].sort(), ['gate-a', 'gate-b']);
    } finally {
      await a.close();
      await b.close();
      await redis.stop();
    }
  });
});

function chunk(flat: string[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, flat[i + 1]!]);
  return out;
}
