import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { hashSessionId, initHashing } from '../../src/request/hashing.js';
import { understand } from '../../src/request/keys.js';
import type { RequestInfo } from '../../src/request/request.js';

before(() => initHashing());

const config = parseConfig({ workers: [{ id: 'w', cluster: 'w' }] });

function req(headers: Record<string, string>, body?: unknown, path = '/v1/chat/completions'): RequestInfo {
  return {
    method: 'POST',
    path,
    headers: new Map(Object.entries(headers)),
    ...(body === undefined ? {} : { body: Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)) }),
  };
}

const SYSTEM = 'You are a meticulous coding assistant. '.repeat(80); // ~3 KB: several whole blocks

describe('routing keys', () => {
  test('the session header wins over cookie and body', () => {
    const u = understand(req({ 'x-session-id': 'abc', cookie: 'kvgate-session=zzz' }, { user: 'u1' }), config);
    assert.deepEqual(u.key, { kind: 'session', source: 'header', hash: hashSessionId('abc') });
  });

  test('then the configured cookie', () => {
    const u = understand(req({ cookie: 'other=1; kvgate-session=zzz' }, { user: 'u1' }), config);
    assert.equal(u.key?.source, 'cookie');
    assert.equal(u.key?.hash, hashSessionId('zzz'));
  });

  test('then body `user`, then `metadata.session_id`, on the OpenAI paths', () => {
    assert.equal(understand(req({}, { user: 'u1', metadata: { session_id: 's' } }), config).key?.source, 'body_user');
    const m = understand(req({}, { metadata: { session_id: 's1' }, messages: [] }), config);
    assert.equal(m.key?.source, 'body_metadata');
    assert.equal(m.key?.hash, hashSessionId('s1'));
    const c = understand(req({}, { user: 'u2', prompt: 'x' }, '/v1/completions'), config);
    assert.equal(c.key?.source, 'body_user');
  });

  test('body fields are not read on other paths', () => {
    assert.equal(understand(req({}, { user: 'u1' }, '/v1/embeddings'), config).key, undefined);
  });

  test('session ids are hashed: the raw id never appears in the key', () => {
    const u = understand(req({ 'x-session-id': 'my-secret-session' }), config);
    assert.ok(u.key && !u.key.hash.includes('secret'));
    assert.match(u.key.hash, /^[0-9a-f]{32}$/);
  });

  test('without a session, requests sharing a long system prompt share a prefix key', () => {
    const a = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' }] }), config);
    const b = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'something else' }] }), config);
    assert.equal(a.key?.kind, 'prefix');
    assert.equal(a.key?.hash, b.key?.hash);
  });

  test('the prefix key is seeded with the model', () => {
    const body = (model: string) => ({ model, messages: [{ role: 'system', content: SYSTEM }] });
    assert.notEqual(understand(req({}, body('a')), config).key?.hash, understand(req({}, body('b')), config).key?.hash);
  });

  test('content parts and completions prompts (string or array) are keyed', () => {
    const parts = understand(req({}, { model: 'm', messages: [{ role: 'user', content: [{ type: 'text', text: SYSTEM }] }] }), config);
    assert.equal(parts.key?.kind, 'prefix');
    const str = understand(req({}, { model: 'm', prompt: SYSTEM }, '/v1/completions'), config);
    const arr = understand(req({}, { model: 'm', prompt: [SYSTEM] }, '/v1/completions'), config);
    assert.equal(str.key?.kind, 'prefix');
    assert.equal(arr.key?.kind, 'prefix');
  });

  test('malformed bodies give no key and say why (forward mode, the default)', () => {
    const cases: Array<[Buffer | string, string]> = [
      ['{"model": "m", "messages": [', 'not_json'],
      [Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), 'not_utf8'],
      ['[1,2,3]', 'not_object'],
      ['"just a string"', 'not_object'],
      ['', 'empty'],
    ];
    for (const [body, reason] of cases) {
      const u = understand(req({}, body), config);
      assert.equal(u.key, undefined);
      assert.equal(u.bodyProblem, reason);
    }
  });

  test('with malformed_body: reject, a bad body is a bad_request', () => {
    const strict = parseConfig({ limits: { malformed_body: 'reject' }, workers: [{ id: 'w', cluster: 'w' }] });
    assert.throws(() => understand(req({}, '{nope'), strict), { code: 'bad_request' });
  });

  test('a body over the limit is body_too_large', () => {
    const small = parseConfig({ limits: { max_body_bytes: 100 }, workers: [{ id: 'w', cluster: 'w' }] });
    assert.throws(() => understand(req({}, { prompt: 'x'.repeat(200) }), small), { code: 'body_too_large' });
  });

  test('prompts of unexpected types never throw and give no key', () => {
    for (const body of [{ messages: 'nope' }, { messages: [null, 3, 'x'] }, { prompt: 42 }, { prompt: { a: 1 } }, { user: 7 }, { metadata: [] }]) {
      const u = understand(req({}, body), config);
      assert.ok(u.key === undefined || u.key.kind === 'prefix');
    }
  });

  test('deeply nested JSON is handled without throwing', () => {
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    const u = understand(req({}, `{"messages": ${deep}}`), config);
    assert.ok(u.key === undefined || u.key.kind === 'prefix');
  });

  test('the prompt block chain: whole blocks only, chained, seeded with model and cache_salt', () => {
    const body = (extra: object = {}) => ({ model: 'm', messages: [{ role: 'system', content: SYSTEM }], ...extra });
    const a = understand(req({}, body()), config);
    assert.equal(a.blocks.length, Math.floor(a.blocks.length), 'whole blocks');
    assert.ok(a.blocks.length >= 10);
    const longer = understand(req({}, { ...body(), messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'more '.repeat(200) }] }), config);
    assert.deepEqual(longer.blocks.slice(0, a.blocks.length - 1), a.blocks.slice(0, -1), 'a longer prompt extends the chain');
    const salted = understand(req({}, body({ cache_salt: 'tenant-7' })), config);
    assert.notEqual(salted.blocks[0], a.blocks[0], 'cache_salt separates tenants');
    const withSession = understand(req({ 'x-session-id': 'z' }, body()), config);
    assert.deepEqual(withSession.blocks, a.blocks, 'sessions carry their prompt blocks too');
    assert.equal(understand(req({}, { model: 'm', prompt: 'short' }, '/v1/completions'), config).blocks.length, 0);
  });
});
