/**
 * Redis misbehaving under a running gate: killed and restarted under load, slow, behind AUTH and
 * TLS. Requests must keep being answered (no error reaches Envoy), and once Redis is back its
 * state must converge with what the gate did meanwhile.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { hashSessionId } from '../../src/request/hashing.js';
import { chat, harness, holdRequest, waitFor } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { startLatencyProxy } from '../helpers/latency-proxy.js';
import { problemWith, sleep, startLoad } from '../helpers/load.js';
import { recordingLogger } from '../helpers/logger.js';
import { makeCerts } from '../helpers/certs.js';
import { startRedis } from '../helpers/redis-server.js';

const FLEET = [
  { id: 'worker_1', cluster: 'worker_1', max_inflight: 500 },
  { id: 'worker_2', cluster: 'worker_2', max_inflight: 500 },
  { id: 'worker_3', cluster: 'worker_3', max_inflight: 500 },
];
const CONFIG = { store: { timeout_ms: 50, refresh_ms: 100 }, leases: { ttl_s: 3 }, workers: FLEET };
const TAG = 'kvgate:{default}';

const affinityIn = (r: Redis, session: string) => r.get(`${TAG}:a:s:${hashSessionId(session)}`);

async function inflightIn(r: Redis): Promise<number> {
  let n = 0;
  for (const w of FLEET) n += await r.zcard(`${TAG}:f:${w.id}`);
  return n;
}

/** Places each session once through `h`; returns session → cluster. */
async function place(h: ReturnType<typeof harness>, sessions: string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const s of sessions) {
    const o = await h.request(chat({ session: s }));
    assert.equal(problemWith(o), undefined, `${s}: ${problemWith(o)}`);
    out.set(s, o.cluster!);
  }
  return out;
}

const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe('Redis killed and restarted under load', () => {
  test('every request is answered throughout; affinities, leases and states converge once Redis is back', async () => {
    const redis = await startRedis();
    const g = await startTestGate(CONFIG, { store: redis.url });
    const h = harness(g.target);
    const r = new Redis(redis.port, '127.0.0.1', { maxRetriesPerRequest: 1 });
    r.on('error', () => {});
    let g2: Awaited<ReturnType<typeof startTestGate>> | undefined;
    let load: ReturnType<typeof startLoad> | undefined;
    try {
      // An operator drain, two requests in flight and some placed sessions: all must survive.
      const admin = await fetch(`${g.admin}/workers/worker_3/state`, { method: 'PUT', body: JSON.stringify({ state: 'draining' }) });
      assert.equal(admin.status, 200);
      const held = [await holdRequest(h, 'held-1'), await holdRequest(h, 'held-2')];
      const before = await place(h, names('before', 12));
      load = startLoad(h, { concurrency: 6, session: (n) => `load-${n % 30}` });
      await sleep(300);

      await redis.kill();
      const during = await place(h, names('during', 12));
      await sleep(300);
      const degraded = g.results.filter((x) => x.kind === 'route' && x.degraded).length;
      assert.ok(degraded > 0, 'decisions during the outage were made on local state');

      await redis.restart();
      await waitFor(async () => (await affinityIn(r, 'during-11').catch(() => null)) !== null, 5000, 'degraded affinities written back');
      await sleep(300);
      const tally = await load.stop();

      assert.equal(tally.problemCount, 0, tally.problems.join('\n'));
      assert.ok(tally.answered > 50, `steady load kept flowing (${tally.answered} answered)`);
      for (const [session, clusters] of tally.placements) assert.equal(new Set(clusters).size, 1, `${session} stayed put: ${clusters.join(',')}`);

      // Redis now holds what the gate knows: every placement, only the two held leases, the drain.
      for (const [s, c] of [...before, ...during]) assert.equal(await affinityIn(r, s), c, `${s} in Redis`);
      await waitFor(async () => (await inflightIn(r)) === 2, 3000, 'only the held requests count');
      assert.equal(await r.hget(`${TAG}:s`, 'worker_3'), 'draining');

      // A replica that knows only Redis places every session where the first one did.
      g2 = await startTestGate(CONFIG, { store: redis.url });
      const h2 = harness(g2.target);
      for (const [s, c] of [...before, ...during]) assert.equal((await h2.request(chat({ session: s }))).cluster, c, `${s} on the new replica`);
      h2.close();

      for (const x of held) x.stream.end();
      await waitFor(async () => (await inflightIn(r)) === 0, 3000, 'held requests released in Redis');
      assert.equal(g.extproc.openStreams, 0);
    } finally {
      await load?.stop();
      h.close();
      r.disconnect();
      await g.close(100);
      await g2?.close(100);
      await redis.stop();
    }
  });
});

describe('slow Redis', () => {
  test('decisions fall back inside the message timeout, stay on known workers, and catch up when Redis is fast again', async () => {
    const redis = await startRedis();
    const proxy = await startLatencyProxy(redis.port);
    const g = await startTestGate(CONFIG, { store: `redis://${proxy.address}` });
    const h = harness(g.target); // envoy.yaml: message_timeout 0.5 s
    const r = new Redis(redis.port, '127.0.0.1');
    try {
      const known = await place(h, names('known', 8));
      proxy.setLatency(400); // every round trip now takes 800 ms: far past timeout_ms and Envoy's 500 ms
      const outs = await Promise.all([...names('known', 8), ...names('new', 8)].map((s) => h.request(chat({ session: s }))));
      for (const o of outs) assert.equal(problemWith(o), undefined, problemWith(o));
      outs.slice(0, 8).forEach((o, i) => assert.equal(o.cluster, known.get(`known-${i}`), 'known sessions keep their worker'));
      const slow = g.results.slice(-16);
      assert.ok(slow.every((x) => x.kind === 'route' && x.degraded), 'all decided on local state');
      const fresh = new Map(outs.slice(8).map((o, i) => [`new-${i}`, o.cluster!]));

      proxy.setLatency(0);
      // Sessions first seen while Redis was slow are written back, and commits go to Redis again.
      await waitFor(async () => (await Promise.all([...fresh.keys()].map((s) => affinityIn(r, s)))).every((v, i) => v === [...fresh.values()][i]), 5000, 'slow-time affinities in Redis');
      // (A loaded machine can push one decision past timeout_ms now and then: wait for a clean one.)
      await waitFor(
        async () => {
          await h.request(chat({ session: 'after' }));
          const last = g.results.at(-1)!;
          return last.kind === 'route' && !last.degraded;
        },
        3000,
        'decisions back on Redis',
      );
      // Commits that timed out still ran in Redis, late; their leases are held by nobody and lapse.
      await waitFor(async () => (await inflightIn(r)) === 0, 6000, 'orphaned leases expired');
    } finally {
      h.close();
      r.disconnect();
      await g.close(100);
      await proxy.close();
      await redis.stop();
    }
  });
});

describe('a release Redis did not take', () => {
  test('is retried, so the capacity comes back within a refresh, not the lease TTL', async () => {
    const redis = await startRedis();
    const proxy = await startLatencyProxy(redis.port);
    // A 30 s lease TTL: if the retry did not happen, the lease would still count below.
    const g = await startTestGate({ ...CONFIG, leases: { ttl_s: 30 } }, { store: `redis://${proxy.address}` });
    const h = harness(g.target);
    const r = new Redis(redis.port, '127.0.0.1');
    try {
      const held = await Promise.all(['rel-1', 'rel-2', 'rel-3'].map((s) => holdRequest(h, s)));
      assert.equal(await inflightIn(r), 3);
      proxy.setDown(true); // the network to Redis is cut; Redis keeps the three leases
      for (const x of held) x.stream.end();
      await waitFor(() => g.extproc.openStreams === 0, 3000, 'streams closed');
      await sleep(200);
      assert.equal(await inflightIn(r), 3, 'the releases did not reach Redis');
      proxy.setDown(false);
      // Up to 10 s: the client's reconnection backs off while the network is cut, and a loaded
      // CI machine once took over 3 s to get back. Still a third of the lease TTL, which is what
      // capacity would come back after without the retry.
      await waitFor(async () => (await inflightIn(r)) === 0, 10_000, 'released once Redis is reachable');
    } finally {
      h.close();
      r.disconnect();
      await g.close(100);
      await proxy.close();
      await redis.stop();
    }
  });
});

describe('an operator state write Redis does not confirm', () => {
  test('is answered 503 saying so (not an internal error), and lands once Redis answers', async () => {
    const redis = await startRedis();
    const g = await startTestGate(CONFIG, { store: redis.url });
    const put = (state: string) => fetch(`${g.admin}/workers/worker_2/state`, { method: 'PUT', body: JSON.stringify({ state }) });
    try {
      await redis.kill();
      const res = await put('draining');
      assert.equal(res.status, 503);
      const body = (await res.json()) as { error: string; code: string };
      assert.equal(body.code, 'store_unavailable');
      assert.match(body.error, /cannot record state of worker_2.*set it again/);
      await redis.restart();
      await waitFor(async () => (await put('draining')).status === 200, 5000, 'the write accepted once Redis is back');
      const r = new Redis(redis.port, '127.0.0.1');
      assert.equal(await r.hget(`${TAG}:s`, 'worker_2'), 'draining');
      r.disconnect();
    } finally {
      await g.close(100);
      await redis.stop();
    }
  });
});

// Concurrently: each test has its own Redis, and a gate that cannot reach Redis waits 3 s at startup.
describe('Redis AUTH and TLS', { concurrency: true }, () => {
  async function routesOnRedis(store: string, extra: Parameters<typeof startTestGate>[1] = {}): Promise<{ degraded: boolean; ready: number; logs: string }> {
    const rec = recordingLogger('debug');
    const g = await startTestGate({ ...CONFIG, store: { timeout_ms: 200, refresh_ms: 100 } }, { store, logger: rec.logger, ...extra });
    const h = harness(g.target);
    try {
      const out = await h.request(chat({ session: 'auth' }));
      assert.equal(problemWith(out), undefined, 'answered either way');
      const last = g.results.at(-1)!;
      const ready = (await fetch(`${g.admin}/readyz`)).status;
      return { degraded: last.kind === 'route' && last.degraded, ready, logs: JSON.stringify(rec.lines) };
    } finally {
      h.close();
      await g.close(100);
    }
  }

  test('requirepass: the password in the URL authenticates; a wrong one serves degraded and is never logged', async () => {
    const redis = await startRedis(['--requirepass', 'pw-Secret-1']);
    try {
      // In parallel: a gate that cannot reach Redis waits 3 s at startup before serving degraded.
      const [ok, bad] = await Promise.all([routesOnRedis(`redis://:pw-Secret-1@127.0.0.1:${redis.port}`), routesOnRedis(`redis://:wrong-Secret-2@127.0.0.1:${redis.port}`)]);
      assert.deepEqual([ok.degraded, ok.ready], [false, 200]);
      assert.ok(!ok.logs.includes('pw-Secret-1'), "!ok.logs.includes('pw-Secret-1')");
      assert.deepEqual([bad.degraded, bad.ready], [true, 503]);
      assert.ok(!bad.logs.includes('wrong-Secret-2'), 'the password is redacted');
    } finally {
      await redis.stop();
    }
  });

  test('an ACL user limited to the kvgate: keys is enough to run the gate', async () => {
    const redis = await startRedis(['--user', 'kvgate', 'on', '>acl-Secret-3', '~kvgate:*', '+@all', '--user', 'default', 'off']);
    try {
      const [ok, anon] = await Promise.all([routesOnRedis(`redis://kvgate:acl-Secret-3@127.0.0.1:${redis.port}`), routesOnRedis(`redis://127.0.0.1:${redis.port}`)]);
      assert.deepEqual([ok.degraded, ok.ready], [false, 200]);
      assert.deepEqual([anon.degraded, anon.ready], [true, 503]);
    } finally {
      await redis.stop();
    }
  });

  test('rediss:// with a private CA and a client certificate; without the CA the gate serves degraded', async () => {
    const certs = makeCerts();
    const redis = await startRedis([], { tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.caCert } });
    try {
      const storeTls = { caFile: certs.caCert, certFile: certs.clientCert, keyFile: certs.clientKey };
      const [ok, untrusted, noClientCert] = await Promise.all([
        routesOnRedis(redis.url, { storeTls }),
        routesOnRedis(redis.url, { storeTls: { certFile: certs.clientCert, keyFile: certs.clientKey } }),
        routesOnRedis(redis.url, { storeTls: { caFile: certs.caCert } }),
      ]);
      assert.deepEqual([ok.degraded, ok.ready], [false, 200]);
      assert.deepEqual([untrusted.degraded, untrusted.ready], [true, 503]);
      assert.deepEqual([noClientCert.degraded, noClientCert.ready], [true, 503]);
    } finally {
      await redis.stop();
      certs.remove();
    }
  });
});
