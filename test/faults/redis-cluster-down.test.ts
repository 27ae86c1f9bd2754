/**
 * The Redis store on a Redis Cluster whose pool's hash slot has lost its master, with no replica to
 * take over (three masters, no replicas, made once for this file; the master is killed in `before`,
 * after the healthy store is checked): readiness must say so, not answer from another node.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { RedisStore } from '../../src/state/redis-store.js';
import { silentLogger } from '../helpers/logger.js';
import { startRedisCluster, type TestCluster } from '../helpers/redis-cluster.js';

const TIMEOUT_MS = 100;
let cluster: TestCluster;
let store: RedisStore;

before(async () => {
  cluster = await startRedisCluster({ masters: 3, replicas: 0 });
  store = new RedisStore({ url: cluster.url, keyPrefix: 'kvgate', timeoutMs: TIMEOUT_MS, refreshMs: 250, leaseTtlMs: 30_000, localAffinityCacheSize: 1000, logger: silentLogger() });
  assert.ok(await store.waitReady(5000), "await store.waitReady(5000)");
  store.retainPools(['default']); // as the gate does at start
  // Healthy: the store answers for the pool.
  await store.ping();
  const probe = cluster.nodes[0]!.client();
  const slot = (await probe.cluster('KEYSLOT', 'kvgate:{default}:s')) as number;
  probe.disconnect();
  await (await cluster.masterOf(slot)).kill();
});

after(async () => {
  await store?.close();
  await cluster?.stop();
});

describe('Redis Cluster: the pool’s hash slot without a master', () => {
  test('readiness fails within store.timeout_ms, though other nodes still answer PING', async () => {
    const t0 = performance.now();
    await assert.rejects(store.ping(), (e: Error & { code?: string }) => e.code === 'store_unavailable' && /default/.test(e.message));
    // The store timeout and then some: a loaded machine runs timers late.
    assert.ok(performance.now() - t0 < TIMEOUT_MS + 400, `failed within the store timeout (${Math.round(performance.now() - t0)} ms)`);
  });
});
