/**
 * Every key a store script touches is declared in its KEYS, checked on a real Redis Cluster.
 *
 * Redis Cluster routes a script by its declared keys and checks only those: during a resharding
 * a script whose declared keys are all still on the source node runs there, and a key it reaches
 * without declaring may already have moved (it then reads nothing and writes a stray copy). Proxies
 * (Envoy's Redis proxy, twemproxy) route by declared keys alone. So the store declares every key.
 *
 * The check: MONITOR on the master owning the pool's slot shows each script call with its KEYS,
 * then every command the script ran (`[0 lua]`); COMMAND GETKEYS names each command's keys, and
 * each must be among the declared ones.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { defineScripts, PoolKeys, writeBackCall } from '../../src/state/redis-commands.js';
import { closeRedis, connectRedis } from '../../src/state/redis-connection.js';
import { RedisStore } from '../../src/state/redis-store.js';
import { commitRequest } from '../helpers/commits.js';
import { silentLogger } from '../helpers/logger.js';
import { startRedisCluster, type TestCluster } from '../helpers/redis-cluster.js';
import { monitorRedis, type MonitoredCommand } from '../helpers/redis-monitor.js';

const POOL = 'keys';
const WORKERS = ['w1', 'w2', 'w3'];

let cluster: TestCluster;
before(async () => {
  cluster = await startRedisCluster({ masters: 3, replicas: 0 });
});
after(async () => cluster.stop());

/** The quoted arguments of one MONITOR line. */
function args(line: string): string[] {
  const out: string[] = [];
  for (const m of line.matchAll(/"((?:[^"\\]|\\.)*)"/g)) out.push(m[1]!.replace(/\\(.)/g, '$1'));
  return out;
}

describe('store scripts on a Redis Cluster', () => {
  test('touch only the keys they declare', async () => {
    const slot = await (async () => {
      const r = cluster.nodes[0]!.client();
      try {
        return (await r.cluster('KEYSLOT', `kvgate:{${POOL}}:s`)) as number;
      } finally {
        r.disconnect();
      }
    })();
    const master = await cluster.masterOf(slot);
    const probe: Redis = master.client();
    // MONITOR takes a connection of its own.
    const mon = monitorRedis(master.port);
    await mon.ready;
    const lineOf = (c: MonitoredCommand) => `${c.source} ${c.args.map((x) => JSON.stringify(x)).join(' ')}`;
    const store = new RedisStore({ url: cluster.url, keyPrefix: 'kvgate', timeoutMs: 2000, refreshMs: 60_000, leaseTtlMs: 30_000, localAffinityCacheSize: 1000, logger: silentLogger() });
    try {
      assert.ok(await store.waitReady(5000), "await store.waitReady(5000)");
      const blocks = Array.from({ length: 24 }, (_, i) => `blk${i}`);
      const base = { pool: POOL, workers: WORKERS, blocks, capacityBlocks: 10 };
      // A session placed, then moved (its old worker's session list is written), with more blocks
      // than the worker's capacity (evictions), and an unkeyed commit, a read, renewals.
      const a = await store.commit(commitRequest({ ...base, key: 's:one', worker: 'w1' }));
      assert.ok(a.ok, "a.ok");
      const b = await store.commit(commitRequest({ ...base, key: 's:one', worker: 'w2', preconditions: { affinity: 'w1' }, blocks: [...blocks, 'more1', 'more2'] }));
      assert.ok(b.ok, "b.ok");
      const c = await store.commit(commitRequest({ ...base, worker: 'w3', preconditions: { prefix: { atMost: 26, over: WORKERS } } }));
      assert.ok(c.ok, "c.ok");
      await store.snapshot({ pool: POOL, key: 's:one', workers: WORKERS, blocks });
      await store.coldSessions(POOL, 'w2', 10);
      await store.migrate(POOL, 'w2', [{ key: 's:one', to: 'w3' }, { key: 's:none', to: 'w1' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 });
      await store.publishSignals(POOL, 'w1', { signals: { kvUsage: 0.5 } });
      await store.publishSignals(POOL, 'w1', { error: 'refused' });
      await store.readSignals(POOL);
      await store.heartbeat(POOL, 'gate-a', 5000);
      // What resync and renewal send after an outage or a stall, as they send it: affinities written
      // back (one another replica holds), a lease renewed that had gone, leases re-added.
      const keys = new PoolKeys('kvgate', POOL);
      const direct = connectRedis(cluster.url, { enableOfflineQueue: true });
      try {
        defineScripts(direct);
        await direct.kvgateWriteBack(...writeBackCall(keys, [{ key: 's:back', worker: 'w1', ttlMs: 60_000 }, { key: 's:one', worker: 'w1', ttlMs: 60_000 }]));
        await direct.kvgateRenew(keys.inflight('w1'), 30_000, 'gone|s:back');
        await direct.kvgateRestoreLeases(keys.inflight('w2'), 30_000, 'lost|s:back');
      } finally {
        closeRedis(direct);
      }
      for (const l of [a, b, c]) if (l.ok) await store.release(l.lease);
      await new Promise((r) => setTimeout(r, 200));

      const lines = mon.commands.map(lineOf);
      let declared: Set<string> | undefined;
      let scripts = 0;
      let checked = 0;
      const undeclared: string[] = [];
      const ran = new Set<string>();
      for (const line of lines) {
        const a = args(line);
        const cmd = a[0]!.toLowerCase();
        if (cmd === 'eval' || cmd === 'evalsha') {
          const n = Number(a[2]);
          declared = new Set(a.slice(3, 3 + n));
          scripts++;
          continue;
        }
        if (!line.startsWith('lua')) {
          declared = undefined;
          continue;
        }
        assert.ok(declared, `a script command with no script call before it: ${line}`);
        let keys: string[] = [];
        try {
          keys = (await probe.call('COMMAND', 'GETKEYS', ...a)) as string[];
        } catch {
          // TIME and the like: no keys.
        }
        checked++;
        ran.add(a[0]!.toLowerCase());
        for (const k of keys) if (!declared.has(k)) undeclared.push(`${a[0]} ${k}`);
      }
      assert.ok(scripts >= 10, `saw ${scripts} script calls`);
      assert.ok(checked > 50, `checked ${checked} commands run by scripts`);
      assert.deepEqual(undeclared, [], 'every key a script touched was in its KEYS');
      // The prefix paths ran among them: the match, the commit's writes, and a trim past capacity.
      for (const c of ['hmget', 'hset', 'zadd', 'zremrangebyrank', 'hdel']) assert.ok(ran.has(c), `a script ran ${c}: ${[...ran].join(' ')}`);
      // And the scripts of resync and renewal among them (their arguments are the test's own).
      for (const arg of ['kvgate:{keys}:a:s:back', 'gone|s:back', 'lost|s:back']) {
        assert.ok(lines.some((l) => /^\S+ "eval/i.test(l) && l.includes(`"${arg}"`)), `the script called with ${arg} ran`);
      }
    } finally {
      await store.close();
      mon.close();
      probe.disconnect();
    }
  });
});
