/**
 * The Redis store on a real Redis Cluster (three masters, one replica each, made once for this
 * file): a decision is one script call on the master owning the pool's hash slot, and the gate
 * keeps answering, and keeps its placements, through a master's death and its replica's promotion.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { closeRedis, connectRedis } from '../../src/state/redis-connection.js';
import { chat, harness } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { problemWith, sleep, startLoad } from '../helpers/load.js';
import { startRedisCluster, type ClusterNode, type TestCluster } from '../helpers/redis-cluster.js';
import { waitFor } from '../helpers/envoy.js';

const FLEET = [
  { id: 'worker_1', cluster: 'worker_1', max_inflight: 500 },
  { id: 'worker_2', cluster: 'worker_2', max_inflight: 500 },
  { id: 'worker_3', cluster: 'worker_3', max_inflight: 500 },
];

let cluster: TestCluster;
let slot: number;
before(async () => {
  cluster = await startRedisCluster({ masters: 3, replicas: 1 });
  slot = await on(cluster.nodes[0]!, (r) => r.cluster('KEYSLOT', 'kvgate:{default}:s') as Promise<number>);
});
after(async () => {
  await cluster.stop();
});

async function on<T>(node: ClusterNode, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = node.client();
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/** Script calls a node has run or refused (EVAL and EVALSHA, including MOVED/ASK refusals). */
async function scriptCalls(node: ClusterNode): Promise<number> {
  const info = await on(node, (r) => r.info('commandstats'));
  let n = 0;
  for (const m of info.matchAll(/^cmdstat_(?:eval|evalsha):calls=(\d+).*?rejected_calls=(\d+)/gm)) n += Number(m[1]) + Number(m[2]);
  return n;
}

async function masters(): Promise<ClusterNode[]> {
  const out: ClusterNode[] = [];
  for (const n of cluster.nodes.filter((x) => x.alive)) {
    if (/role:master/.test(await on(n, (r) => r.info('replication')))) out.push(n);
  }
  return out;
}

async function kvgateKeys(node: ClusterNode): Promise<string[]> {
  return on(node, async (r) => {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await r.scan(cursor, 'MATCH', 'kvgate:*', 'COUNT', 1000);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    return keys;
  });
}

describe('Redis Cluster', () => {
  test('a decision is one script call, on the one master that owns the pool’s hash slot', async () => {
    // No refresh during the count: only decisions run scripts.
    const g = await startTestGate({ store: { timeout_ms: 500, refresh_ms: 600_000 }, workers: FLEET }, { store: cluster.url });
    const h = harness(g.target);
    try {
      await h.request(chat({ session: 'warm-up' })); // loads the script on the owner
      const owner = await cluster.masterOf(slot);
      const all = await masters();
      assert.equal(all.length, 3);
      const before = await Promise.all(all.map(scriptCalls));
      const n = 20;
      for (let i = 0; i < n; i++) assert.equal(problemWith(await h.request(chat({ session: `one-trip-${i}` }))), undefined);
      const after = await Promise.all(all.map(scriptCalls));
      all.forEach((m, i) => assert.equal(after[i]! - before[i]!, m === owner ? n : 0, `script calls on :${m.port}`));
      const decisions = g.results.slice(-n);
      assert.ok(decisions.every((r) => r.kind === 'route' && !r.degraded && r.attempts === 1), 'committed in Redis at the first try');

      // Every key of the pool is on the owner, in the one slot.
      const keys = await kvgateKeys(owner);
      assert.ok(keys.length >= n + 1, `${keys.length} keys`);
      for (const k of keys) assert.equal(await on(owner, (r) => r.cluster('KEYSLOT', k) as Promise<number>), slot, k);
      for (const m of all.filter((x) => x !== owner)) assert.deepEqual(await kvgateKeys(m), []);
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('a closed cluster client arms no timer again, even when a slot-map refresh completes after the close', async () => {
    // ioredis re-arms its slot refresh timer when a refresh completes, closed or not: a refresh on
    // its way at the close (after a failover, when refreshes are slow) kept a process alive for ever.
    const client = connectRedis(cluster.url, { lazyConnect: false });
    await new Promise<void>((resolve, reject) => {
      client.once('ready', () => resolve());
      client.once('error', reject);
    });
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    closeRedis(client);
    const before = timers();
    // What a refresh in flight does when it completes: nextRound() arms the next one.
    (client as unknown as { resetNodesRefreshInterval(): void }).resetNodesRefreshInterval();
    assert.equal(timers(), before, 'no refresh timer armed after the close');
  });

  test('a master dies: requests are answered throughout, its replica takes over, no session moves', async () => {
    const g = await startTestGate({ store: { timeout_ms: 100, refresh_ms: 100 }, leases: { ttl_s: 3 }, workers: FLEET }, { store: cluster.url });
    const h = harness(g.target);
    let load: ReturnType<typeof startLoad> | undefined;
    try {
      const placed = new Map<string, string>();
      for (let i = 0; i < 20; i++) {
        const out = await h.request(chat({ session: `fo-${i}` }));
        assert.equal(problemWith(out), undefined);
        placed.set(`fo-${i}`, out.cluster!);
      }
      const owner = await cluster.masterOf(slot);
      // Replication is asynchronous: let the replica catch up, as it would between real requests.
      assert.equal(await on(owner, (r) => r.wait(1, 2000)), 1);

      load = startLoad(h, { concurrency: 4, session: (n) => `fo-${n % 20}` });
      await sleep(200);
      await owner.kill();
      await cluster.waitHealthy(20_000);
      const promoted = await cluster.masterOf(slot);
      assert.notEqual(promoted.port, owner.port);
      // The gate finds the new master: decisions commit in Redis again.
      await waitFor(
        async () => {
          await h.request(chat({ session: 'after-failover' }));
          const last = g.results.at(-1)!;
          return last.kind === 'route' && !last.degraded;
        },
        10_000,
        'decisions on the promoted replica',
      );
      const tally = await load.stop();
      load = undefined;
      assert.equal(tally.problemCount, 0, tally.problems.join('\n'));
      for (const [session, clusters] of tally.placements) {
        assert.deepEqual(new Set(clusters), new Set([placed.get(session)]), `${session} stayed on ${placed.get(session)}`);
      }
      assert.ok(g.results.some((r) => r.kind === 'route' && r.degraded), 'some decisions fell back while the slot had no master');
      // The promoted replica holds the placements.
      const keys = new Set(await kvgateKeys(promoted));
      assert.ok([...keys].filter((k) => k.includes(':a:s:')).length >= 20, "[...keys].filter((k) => k.includes(':a:s:')).length >= 20");
    } finally {
      await load?.stop();
      h.close();
      await g.close(100);
    }
  });
});
