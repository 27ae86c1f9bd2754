/**
 * `rediss+cluster://` against node certificates that name hosts only (no IP address), as a managed
 * Redis Cluster's do: the cluster client reaches nodes by the addresses CLUSTER SLOTS gives, which
 * are IPs, so TLS must verify them against a host name instead. Three masters, no replicas, TLS on
 * the data ports and the cluster bus, made once for this file.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { RedisStore } from '../../src/state/redis-store.js';
import { makeCerts, type CertFiles } from '../helpers/certs.js';
import { commitRequest } from '../helpers/commits.js';
import { silentLogger } from '../helpers/logger.js';
import { startRedisCluster, type TestCluster } from '../helpers/redis-cluster.js';

let certs: CertFiles;
let cluster: TestCluster;

before(async () => {
  certs = makeCerts({ serverNames: 'DNS:localhost' });
  cluster = await startRedisCluster({ masters: 3, replicas: 0, tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.caCert, servername: 'localhost' } });
});

after(async () => {
  await cluster?.stop();
  certs?.remove();
});

/** Whether a store on `url` commits in Redis (not degraded). */
async function commitsOn(url: string, servername?: string): Promise<boolean> {
  const store = new RedisStore({
    url,
    keyPrefix: 'kvgate',
    timeoutMs: 500,
    refreshMs: 250,
    leaseTtlMs: 30_000,
    localAffinityCacheSize: 1000,
    logger: silentLogger(),
    tls: { ca: certs.read(certs.caCert), ...(servername !== undefined ? { servername } : {}) },
  });
  try {
    // Three TLS handshakes and the slot map: well under a second alone, but CI's Node 22 run
    // beside other test files once took past 3 s.
    if (!(await store.waitReady(10_000))) return false;
    const r = await store.commit(commitRequest({ pool: 'default', workers: ['w1'], worker: 'w1' }));
    if (r.ok) await store.release(r.lease);
    return r.ok && !r.degraded;
  } finally {
    await store.close();
  }
}

describe('Redis Cluster over TLS, node certificates naming hosts only', { concurrency: true }, () => {
  test('seeded by host name: every node is verified against that name', async () => {
    const ports = cluster.nodes.slice(0, 2).map((n) => n.port);
    assert.equal(await commitsOn(`rediss+cluster://${ports.map((p) => `localhost:${p}`).join(',')}`), true);
  });

  test('seeded by IP address: the name given as the store TLS server name', async () => {
    // (No control without it here: closing a store whose TLS handshakes are failing can raise an
    // uncaught TLS alert from the socket being closed, which would fail whichever test runs then.)
    assert.equal(await commitsOn(cluster.url, 'localhost'), true);
  });
});
