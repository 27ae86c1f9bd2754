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
import { hashSessionId, initHashing } from '../../src/request/hashing.js';
import { understand } from '../../src/request/keys.js';
import { chat, harness } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { silentLogger } from '../helpers/logger.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const KEY = 'c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seS0xMjM0NTY3OA';
const WORKERS = ['worker_1', 'worker_2', 'worker_3'].map((id) => ({ id, cluster: id, max_inflight: 8 }));
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
      assert.equal(understand(r, cfg, key).key?.hash, hmac(id), id);
      assert.equal(understand(r, cfg).key?.hash, sha(id), `${id} unkeyed`);
    }
    // A stored response named by a continuation is hashed the same way.
    const cont = req({}, { previous_response_id: 'resp_abc', input: 'more' }) as Parameters<typeof understand>[0];
    assert.equal(understand(cont, cfg, key).storedResponse, hmac('resp_abc'));
  });

  test('the prompt\'s hashes and prefix key do not depend on the key', () => {
    const r = req({}, { messages: [{ role: 'system', content: prompt }, { role: 'user', content: 'hi' }] }) as Parameters<typeof understand>[0];
    const keyed = understand(r, cfg, Buffer.from(KEY));
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
