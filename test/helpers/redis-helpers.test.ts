/**
 * The Redis helpers start servers of their own: freePort() releases its port before redis-server
 * binds it, so a test file running beside another can find its port taken by the other's Redis
 * (a test once waited for ever on a Redis that was gone with the other file). Here the port is
 * taken on purpose, by another redis-server, and handed to the helper as if freePort() had picked
 * it: the helper must move to another port and leave the other server alone.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { freePort } from '../../src/util/free-port.js';
import { startRedisCluster } from './redis-cluster.js';
import { startRedis, type TestRedis } from './redis-server.js';

let foreign: TestRedis;
let foreignPid: number;

async function info(port: number): Promise<string> {
  const r = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  try {
    return await r.info('server');
  } finally {
    r.disconnect();
  }
}

function pidIn(text: string): number {
  const m = /process_id:(\d+)/.exec(text);
  assert.ok(m, 'INFO server names a process id');
  return Number(m[1]);
}

/** A port picker that hands out the taken port on its `nth` call (1-based) and free ports otherwise. */
function takenOnCall(nth: number): () => Promise<number> {
  let calls = 0;
  return async () => (++calls === nth ? foreign.port : freePort());
}

before(async () => {
  foreign = await startRedis();
  foreignPid = pidIn(await info(foreign.port));
});

after(async () => {
  await foreign?.stop();
});

/** The other server is untouched: same process, not made part of any cluster. */
async function assertForeignAlone(): Promise<void> {
  const text = await info(foreign.port);
  assert.equal(pidIn(text), foreignPid);
  const r = new Redis({ port: foreign.port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  try {
    assert.match(await r.info('cluster'), /cluster_enabled:0/);
  } finally {
    r.disconnect();
  }
}

/** Starts a three-node cluster on ports from `pickPort` and checks every node is the helper's own. */
async function clusterAvoidsForeign(pickPort: () => Promise<number>): Promise<void> {
  const cluster = await startRedisCluster({ masters: 3, replicas: 0, pickPort });
  try {
    for (const n of cluster.nodes) {
      assert.notEqual(n.port, foreign.port);
      assert.notEqual(n.busPort, foreign.port);
      assert.equal(pidIn(await info(n.port)), n.pid, `node on ${n.port} is the helper's own process`);
    }
    await assertForeignAlone();
  } finally {
    await cluster.stop();
  }
}

describe('Redis test helpers never adopt a port another redis-server holds', () => {
  test('startRedisCluster: a data port already taken', () => clusterAvoidsForeign(takenOnCall(1)));

  // Calls 1..3 are the three nodes' data ports, call 4 the first node's bus port.
  test('startRedisCluster: a cluster bus port already taken', () => clusterAvoidsForeign(takenOnCall(4)));

  test('startRedis: a port already taken', async () => {
    const redis = await startRedis([], { pickPort: takenOnCall(1) });
    try {
      assert.notEqual(redis.port, foreign.port);
      await assertForeignAlone();
    } finally {
      await redis.stop();
    }
  });
});
