/**
 * Session ids hashed under a key (`--session-hash-key`, KVGATE_SESSION_HASH_KEY): what the store,
 * the logs and the decisions carry is HMAC-SHA-256 under the key, so a guessable id (an email in
 * `user`) cannot be found by hashing candidates. Replicas with the same key agree on every
 * session and stored response; the prompt's own hashes do not depend on the key. A key too short
 * to be secret is refused at start; an empty one (an optional Secret that is absent) is none.
 */
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import type { Outcome, UpstreamRequest, UpstreamResponse } from '../harness/envoy-harness.js';
import { startKvgate } from '../../src/app.js';
import { parseConfig } from '../../src/config/load.js';
import { KvgateError } from '../../src/errors.js';
import { Gate } from '../../src/gate/gate.js';
import { hashSessionId, initHashing } from '../../src/request/hashing.js';
import { understand, type SessionHashKeys } from '../../src/request/keys.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { chat, harness } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const KEY = 'c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seS0xMjM0NTY3OA';
/** The key a rotation moves to. */
const NEXT_KEY = 'bmV4dC1rZXktZm9yLXRlc3RzLW9ubHktYWJjZGVmZ2hpams';
const WORKERS = ['worker_1', 'worker_2', 'worker_3'].map((id) => ({ id, cluster: id, max_inflight: 8 }));
/** The gate's key alone, and a rotation from KEY to NEXT_KEY, as the gate passes them to understand(). */
const keyed = (key: Uint8Array): SessionHashKeys => ({ current: key, previous: undefined });
const rotating: SessionHashKeys = { current: Buffer.from(NEXT_KEY), previous: Buffer.from(KEY) };
const hmac = (id: string, key = KEY) => createHmac('sha256', key).update(id).digest('hex').slice(0, 32);
const sha = (id: string) => createHash('sha256').update(id).digest('hex').slice(0, 32);

function clusterOf(o: Outcome): string {
  assert.equal(o.kind, 'upstream', `routed, not ${o.kind}`);
  return o.kind === 'upstream' ? o.cluster : '';
}

const json = (req: UpstreamRequest): UpstreamResponse => ({
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ id: `resp_${req.cluster}_${Math.random().toString(36).slice(2)}`, object: 'response', output: [] }),
});

describe('session hash key: the hashes', () => {
  before(() => initHashing());
  const cfg = parseConfig({ workers: WORKERS });
  const req = (headers: Record<string, string>, body: Record<string, unknown>) => ({
    method: 'POST',
    path: body['input'] !== undefined ? '/v1/responses' : '/v1/chat/completions',
    headers: new Map(Object.entries(headers)),
    body: Buffer.from(JSON.stringify({ model: 'llama', ...body })),
  });
  const prompt = 'You are a careful assistant who answers in full sentences. '.repeat(20);

  test('keyed: HMAC-SHA-256 under the key, for every source of a session id; unkeyed: SHA-256 as before', () => {
    const key = Buffer.from(KEY);
    assert.equal(hashSessionId('alice@example.com', key), hmac('alice@example.com'));
    assert.equal(hashSessionId('alice@example.com'), sha('alice@example.com'));
    const cases: Array<[Record<string, string>, Record<string, unknown>, string]> = [
      [{ 'x-session-id': 'sess-1' }, { messages: [{ role: 'user', content: 'hi' }] }, 'sess-1'],
      [{}, { user: 'alice@example.com', messages: [{ role: 'user', content: 'hi' }] }, 'alice@example.com'],
      [{}, { metadata: { session_id: 'm-7' }, messages: [{ role: 'user', content: 'hi' }] }, 'm-7'],
    ];
    for (const [headers, body, id] of cases) {
      const r = req(headers, body) as Parameters<typeof understand>[0];
      assert.equal(understand(r, cfg, keyed(key)).key?.hash, hmac(id), id);
      assert.equal(understand(r, cfg).key?.hash, sha(id), `${id} unkeyed`);
    }
    // A stored response named by a continuation is hashed the same way.
    const cont = req({}, { previous_response_id: 'resp_abc', input: 'more' }) as Parameters<typeof understand>[0];
    assert.equal(understand(cont, cfg, keyed(key)).storedResponse, hmac('resp_abc'));
  });

  test('the prompt\'s hashes and prefix key do not depend on the key', () => {
    const r = req({}, { messages: [{ role: 'system', content: prompt }, { role: 'user', content: 'hi' }] }) as Parameters<typeof understand>[0];
    const keyed = understand(r, cfg, { current: Buffer.from(KEY), previous: undefined });
    const plain = understand(r, cfg);
    assert.ok(plain.blocks.length >= 4, `a prompt of several blocks (${plain.blocks.length})`);
    assert.deepEqual(keyed.blocks, plain.blocks);
    assert.deepEqual(keyed.key, plain.key);
    assert.equal(plain.key?.kind, 'prefix');
  });
});

describe('session hash key: replicas sharing Redis', () => {
  let redis: TestRedis;
  let a: TestGate;
  let b: TestGate;
  before(async () => {
    redis = await startRedis();
    a = await startTestGate({ workers: WORKERS }, { store: `${redis.url}/4`, sessionHashKey: KEY });
    b = await startTestGate({ workers: WORKERS }, { store: `${redis.url}/4`, sessionHashKey: KEY });
  });
  after(async () => {
    await a.close(100);
    await b.close(100);
    await redis.stop();
  });

  test('the same key: a session placed by one replica stays on its worker through the other; only keyed hashes reach the store', async () => {
    const ha = harness(a.target);
    const hb = harness(b.target);
    try {
      const homes = new Map<string, string>();
      for (let i = 0; i < 6; i++) {
        const id = `user-${i}@example.com`;
        homes.set(id, clusterOf(await ha.request(chat({ user: id, text: `conversation ${i} ${'q'.repeat(300)}` }), { status: 200, body: '{}' })));
      }
      assert.ok(new Set(homes.values()).size >= 2, `sessions spread: ${JSON.stringify([...homes])}`);
      for (const [id, home] of homes) {
        // A different prompt each turn, so only the session's affinity can keep it home.
        assert.equal(clusterOf(await hb.request(chat({ user: id, text: `another turn ${'r'.repeat(300)}` }), { status: 200, body: '{}' })), home, id);
      }
      const client = new Redis(`${redis.url}/4`);
      // Keys and the members of every set, hash and sorted set: a session hash may sit in either.
      const keys = await client.keys('*');
      const parts: string[] = [...keys];
      for (const k of keys) {
        const type = await client.type(k);
        if (type === 'hash') parts.push(...Object.keys(await client.hgetall(k)));
        else if (type === 'zset') parts.push(...(await client.zrange(k, '0', '-1')));
        else if (type === 'set') parts.push(...(await client.smembers(k)));
      }
      await client.quit();
      const text = parts.join('\n');
      for (const id of homes.keys()) {
        assert.ok(text.includes(hmac(id)), `the keyed hash of ${id} is stored`);
        assert.ok(!text.includes(sha(id)), `the plain hash of ${id} is not`);
      }
      const keyed = a.results.find((r) => r.kind === 'route' && r.key?.kind === 'session');
      assert.equal(keyed?.key?.hash, hmac('user-0@example.com'));
    } finally {
      ha.close();
      hb.close();
    }
  });

  test('a stored response learned through one replica is continued on its worker through the other', async () => {
    const ha = harness(a.target);
    const hb = harness(b.target);
    try {
      const r = await ha.request({ method: 'POST', path: '/v1/responses', headers: { host: 'llm.example', 'content-type': 'application/json' }, body: JSON.stringify({ model: 'llama', input: `first ${'x'.repeat(600)}` }) }, json);
      assert.equal(r.kind, 'upstream');
      const id = r.kind === 'upstream' ? (JSON.parse(r.responseBody.toString()) as { id: string }).id : '';
      for (let i = 0; i < 3; i++) {
        const c = await hb.request({ method: 'POST', path: '/v1/responses', headers: { host: 'llm.example', 'content-type': 'application/json', 'x-session-id': `other-${i}` }, body: JSON.stringify({ model: 'llama', previous_response_id: id, input: `next ${i}` }) }, json);
        assert.equal(clusterOf(c), clusterOf(r));
      }
    } finally {
      ha.close();
      hb.close();
    }
  });
});

describe('session hash key: a rotation', () => {
  before(() => initHashing());
  const cfg = parseConfig({ workers: WORKERS });

  test('with the previous key, a session and a stored response carry their hash under it too', () => {
    const r = chatRequest('hi', { session: 'sess-9' });
    const k = understand(r, cfg, rotating).key;
    assert.equal(k?.hash, hmac('sess-9', NEXT_KEY));
    assert.equal(k?.previousHash, hmac('sess-9'));
    assert.equal(understand(r, cfg, keyed(Buffer.from(NEXT_KEY))).key?.previousHash, undefined, 'none without a previous key');
    const cont = { method: 'POST', path: '/v1/responses', headers: new Map(), body: Buffer.from(JSON.stringify({ model: 'llama', previous_response_id: 'resp_1', input: 'more' })) };
    const u = understand(cont, cfg, rotating);
    assert.equal(u.storedResponse, hmac('resp_1', NEXT_KEY));
    assert.equal(u.storedResponsePrevious, hmac('resp_1'));
    const byPath = understand({ method: 'GET', path: '/v1/responses/resp_2', headers: new Map() }, cfg, rotating);
    assert.equal(byPath.storedResponse, hmac('resp_2', NEXT_KEY));
    assert.equal(byPath.storedResponsePrevious, hmac('resp_2'));
  });

  test('memory store: sessions placed under the old key stay on their workers under the new one, and are then recorded under it', async () => {
    const store = new MemoryStore();
    const before = new Gate(cfg, store, silentLogger(), undefined, Buffer.from(KEY));
    const rotated = new Gate(cfg, store, silentLogger(), undefined, Buffer.from(NEXT_KEY), Buffer.from(KEY));
    const homes = new Map<string, string>();
    for (let i = 0; i < 6; i++) {
      const r = await before.route(chatRequest(`conversation ${i} ${'q'.repeat(300)}`, { session: `s-${i}` }));
      assert.equal(r.kind, 'route');
      if (r.kind === 'route') {
        homes.set(`s-${i}`, r.worker);
        await before.release(r.lease);
      }
    }
    assert.ok(new Set(homes.values()).size >= 2, `sessions spread: ${JSON.stringify([...homes])}`);
    for (const [id, home] of homes) {
      // A different prompt, so only the affinity can keep it home.
      const r = await rotated.route(chatRequest(`another turn ${'r'.repeat(300)}`, { session: id }));
      assert.equal(r.kind === 'route' && r.worker, home, id);
      assert.equal(r.kind === 'route' && r.outcome, 'affinity_hit', `${id}: found under the previous key`);
      assert.equal(r.kind === 'route' && r.fromPreviousKey, true, `${id}: marked as found under the previous key`);
      if (r.kind === 'route') await rotated.release(r.lease);
      // The next request finds it under the new key: the previous key was not needed.
      const again = await rotated.route(chatRequest(`a third turn ${'s'.repeat(300)}`, { session: id }));
      assert.equal(again.kind === 'route' && again.worker, home, id);
      assert.equal(again.kind === 'route' ? again.fromPreviousKey : 'shed', undefined, `${id}: found under the new key`);
      if (again.kind === 'route') await rotated.release(again.lease);
      // Recorded under the new key: found there without the previous one.
      const snap = await store.snapshot({ pool: rotated.pool, key: `s:${hmac(id, NEXT_KEY)}`, workers: WORKERS.map((w) => w.id), blocks: [] });
      assert.equal(snap.affinity, home, `${id} recorded under the new key`);
    }
  });

  test('a first key: with `unkeyed` as the previous key, sessions hashed without a key stay home', async () => {
    const store = new MemoryStore();
    const plainGate = new Gate(cfg, store, silentLogger());
    // As startKvgate builds it: the unkeyed previous key is no bytes (the Redis test below starts one).
    const rotated = new Gate(cfg, store, silentLogger(), undefined, Buffer.from(NEXT_KEY), new Uint8Array(0));
    const homes = new Map<string, string>();
    for (let i = 0; i < 6; i++) {
      const r = await plainGate.route(chatRequest(`conversation ${i} ${'q'.repeat(300)}`, { session: `u-${i}` }));
      if (r.kind === 'route') {
        homes.set(`u-${i}`, r.worker);
        await plainGate.release(r.lease);
      }
    }
    assert.equal(homes.size, 6);
    for (const [id, home] of homes) {
      const r = await rotated.route(chatRequest(`another turn ${'r'.repeat(300)}`, { session: id }));
      assert.equal(r.kind === 'route' && r.outcome, 'affinity_hit', id);
      assert.equal(r.kind === 'route' && r.worker, home, id);
      if (r.kind === 'route') assert.equal(r.key?.previousHash, sha(id), 'the previous hash is plain SHA-256');
    }
  });

  describe('replicas on Redis, restarted with a new key', () => {
    let redis: TestRedis | undefined;
    const started: TestGate[] = [];
    let old: TestGate;
    let rotated: TestGate;
    let plain: TestGate;
    let unkeyed: TestGate;
    let firstKey: TestGate;
    before(async () => {
      redis = await startRedis();
      const start = async (opts: Parameters<typeof startTestGate>[1]) => {
        const g = await startTestGate({ workers: WORKERS }, opts);
        started.push(g);
        return g;
      };
      unkeyed = await start({ store: `${redis.url}/6` });
      firstKey = await start({ store: `${redis.url}/6`, sessionHashKey: NEXT_KEY, sessionHashKeyPrevious: 'unkeyed' });
      old = await start({ store: `${redis.url}/5`, sessionHashKey: KEY });
      rotated = await start({ store: `${redis.url}/5`, sessionHashKey: NEXT_KEY, sessionHashKeyPrevious: KEY });
      plain = await start({ store: `${redis.url}/5`, sessionHashKey: NEXT_KEY });
    });
    // Whatever started, stopped: a gate that failed to start must not leave the others running.
    after(async () => {
      for (const g of started) await g.close(100);
      await redis?.stop();
    });

    test('sessions and a stored response recorded under the old key are found by the rotated replica', async () => {
      const ho = harness(old.target);
      const hr = harness(rotated.target);
      const hp = harness(plain.target);
      try {
        const homes = new Map<string, string>();
        for (let i = 0; i < 6; i++) {
          const id = `rot-${i}@example.com`;
          homes.set(id, clusterOf(await ho.request(chat({ user: id, text: `conversation ${i} ${'q'.repeat(300)}` }), { status: 200, body: '{}' })));
        }
        assert.ok(new Set(homes.values()).size >= 2, `sessions spread: ${JSON.stringify([...homes])}`);
        // Without the previous key, the new key finds nothing: a new session (what the rotation would cost).
        await hp.request(chat({ user: 'rot-0@example.com', text: `a turn ${'p'.repeat(300)}` }), { status: 200, body: '{}' });
        const lost = plain.results.find((r) => r.kind === 'route');
        assert.equal(lost?.kind === 'route' && lost.outcome, 'new');
        for (const [id, home] of homes) {
          if (id === 'rot-0@example.com') continue; // placed anew by the replica without the previous key
          assert.equal(clusterOf(await hr.request(chat({ user: id, text: `another turn ${'r'.repeat(300)}` }), { status: 200, body: '{}' })), home, id);
        }
        const found = rotated.results.filter((r) => r.kind === 'route');
        assert.ok(found.length >= 5 && found.every((r) => r.kind === 'route' && r.outcome === 'affinity_hit'), JSON.stringify(found.map((r) => r.kind === 'route' && r.outcome)));

        const r = await ho.request({ method: 'POST', path: '/v1/responses', headers: { host: 'llm.example', 'content-type': 'application/json' }, body: JSON.stringify({ model: 'llama', input: `first ${'x'.repeat(600)}` }) }, json);
        const responseId = r.kind === 'upstream' ? (JSON.parse(r.responseBody.toString()) as { id: string }).id : '';
        for (let i = 0; i < 3; i++) {
          const c = await hr.request({ method: 'POST', path: '/v1/responses', headers: { host: 'llm.example', 'content-type': 'application/json', 'x-session-id': `rot-other-${i}` }, body: JSON.stringify({ model: 'llama', previous_response_id: responseId, input: `next ${i}` }) }, json);
          assert.equal(clusterOf(c), clusterOf(r), 'the continuation goes where the response is stored');
        }
        const pinned = rotated.results.filter((x) => x.kind === 'route' && x.key?.source === 'header');
        assert.equal(pinned.length, 3);
        // Five sessions and three continuations needed the previous key: what tells an operator
        // the rotation is not over yet.
        const metrics = await (await fetch(`${rotated.admin}/metrics`)).text();
        assert.match(metrics, /^kvgate_session_previous_key_finds_total 8$/m);
      } finally {
        ho.close();
        hr.close();
        hp.close();
      }
    });

    test('a first key, with `unkeyed` as the previous one: sessions hashed without a key keep their workers', async () => {
      const hu = harness(unkeyed.target);
      const hf = harness(firstKey.target);
      try {
        const homes = new Map<string, string>();
        for (let i = 0; i < 6; i++) {
          const id = `first-${i}@example.com`;
          homes.set(id, clusterOf(await hu.request(chat({ user: id, text: `conversation ${i} ${'q'.repeat(300)}` }), { status: 200, body: '{}' })));
        }
        for (const [id, home] of homes) {
          assert.equal(clusterOf(await hf.request(chat({ user: id, text: `another turn ${'r'.repeat(300)}` }), { status: 200, body: '{}' })), home, id);
        }
        const routed = firstKey.results.filter((r) => r.kind === 'route');
        assert.equal(routed.length, 6);
        for (const r of routed) {
          assert.equal(r.kind === 'route' && r.outcome, 'affinity_hit');
          // Found under its plain hash, routed under its hash with the new key.
          const id = [...homes.keys()].find((u) => sha(u) === r.key?.previousHash);
          assert.ok(id, 'the previous hash is a session of the unkeyed gate');
          assert.equal(r.key?.hash, hmac(id, NEXT_KEY));
        }
      } finally {
        hu.close();
        hf.close();
      }
    });
  });
});

describe('session hash key: at start', () => {
  const start = (sessionHashKey: string) =>
    startKvgate({ config: parseConfig({ workers: WORKERS }), logger: silentLogger(), store: 'memory', grpcHost: '127.0.0.1', grpcPort: 0, adminHost: '127.0.0.1', adminPort: 0, processMetrics: false, sessionHashKey });

  test('a key shorter than 16 bytes is refused, naming the flag and the variable', async () => {
    await assert.rejects(start('short-key'), (err: unknown) => {
      assert.ok(err instanceof KvgateError);
      assert.equal(err.code, 'invalid_config');
      assert.match(err.message, /--session-hash-key/);
      assert.match(err.message, /KVGATE_SESSION_HASH_KEY/);
      assert.match(err.message, /at least 16/);
      return true;
    });
  });

  test('a previous key shorter than 16 bytes is refused, naming its flag and variable', async () => {
    const startWith = (sessionHashKeyPrevious: string) =>
      startKvgate({ config: parseConfig({ workers: WORKERS }), logger: silentLogger(), store: 'memory', grpcHost: '127.0.0.1', grpcPort: 0, adminHost: '127.0.0.1', adminPort: 0, processMetrics: false, sessionHashKey: KEY, sessionHashKeyPrevious });
    await assert.rejects(startWith('short-key'), (err: unknown) => {
      assert.ok(err instanceof KvgateError);
      assert.equal(err.code, 'invalid_config');
      assert.match(err.message, /--session-hash-key-previous/);
      assert.match(err.message, /KVGATE_SESSION_HASH_KEY_PREVIOUS/);
      return true;
    });
  });

  test('an empty key is none: plain SHA-256', async () => {
    const g = await start('');
    const h = harness(`127.0.0.1:${g.grpcPort}`);
    const results: string[] = [];
    try {
      const r = await h.request(chat({ user: 'bob', text: 'hello' }), { status: 200, body: '{}' });
      assert.equal(r.kind, 'upstream');
      for (const d of g.gate.decisions.recent(10)) if (d.key_hash) results.push(d.key_hash);
      assert.deepEqual(results, [sha('bob')]);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});
