/**
 * Store URLs: single server or cluster, TLS, AUTH, database; what is refused; and passwords never
 * shown.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvgateError } from '../../src/errors.js';
import { connectRedis, parseStoreUrl } from '../../src/state/redis-connection.js';
import { redact } from '../../src/state/store-spec.js';

test('store URLs parse into endpoints', () => {
  assert.deepEqual(parseStoreUrl('redis://127.0.0.1:6380'), { cluster: false, tls: false, nodes: [{ host: '127.0.0.1', port: 6380 }] });
  assert.deepEqual(parseStoreUrl('rediss://:p%40ss@redis.internal/3'), { cluster: false, tls: true, nodes: [{ host: 'redis.internal', port: 6379 }], password: 'p@ss', db: 3 });
  assert.deepEqual(parseStoreUrl('redis://kvgate:pw@h:1'), { cluster: false, tls: false, nodes: [{ host: 'h', port: 1 }], username: 'kvgate', password: 'pw' });
  assert.deepEqual(parseStoreUrl('redis+cluster://a:7000,b:7001,[::1]:7002'), {
    cluster: true,
    tls: false,
    nodes: [{ host: 'a', port: 7000 }, { host: 'b', port: 7001 }, { host: '::1', port: 7002 }],
  });
  assert.equal(parseStoreUrl('rediss+cluster://u:p@a:7000').tls, true);
});

test('what is not a store URL is a config error', () => {
  for (const bad of ['redis://a:1,b:2', 'redis+cluster://a:1/2', 'redis://a:99999', 'redis://a:1/x', 'http://a:1', 'redis://a b']) {
    assert.throws(() => parseStoreUrl(bad), (e: unknown) => e instanceof KvgateError && e.code === 'invalid_config', bad);
  }
  assert.throws(() => connectRedis('redis://a:1', {}, { ca: Buffer.from('x') }), /needs a rediss/);
  assert.throws(() => connectRedis('rediss://a:1', {}, { cert: Buffer.from('x') }), /both --store-cert-file and --store-key-file/);
  assert.throws(() => connectRedis('redis+cluster://a:1', {}, { servername: 'a' }), /server name needs a rediss/);
});

test('passwords are redacted wherever a store URL is shown', () => {
  assert.equal(redact('redis://:secret@h:1'), 'redis://:***@h:1');
  assert.equal(redact('rediss://user:secret@h:1/2'), 'rediss://user:***@h:1/2');
  assert.equal(redact('redis+cluster://u:secret@a:1,b:2'), 'redis+cluster://u:***@a:1,b:2');
  assert.equal(redact('redis://token@h:1'), 'redis://***@h:1');
  assert.equal(redact('redis://h:1'), 'redis://h:1');
  try {
    parseStoreUrl('redis://:secret@a:1,b:2');
    assert.fail('should throw');
  } catch (e) {
    assert.ok(!(e as Error).message.includes('secret'), "!(e as Error).message.includes('secret')");
  }
});

test('a password with reserved characters left unencoded shows no part of itself, in redact() or in a parse error', () => {
  const passwords = ['p@ssw0rd', 's3cr/et', 'ab#cdef', 'ab?cdef', 'zq:xcret', '100%sure', 'x@y/z?w#v'];
  const urls = (pw: string) => [
    `redis://:${pw}@host:6379`,
    `rediss://user:${pw}@host:6379/2`,
    `redis+cluster://user:${pw}@a:7000,b:7001`,
    `redis://:${pw}@host:notaport`,
    `redis://:${pw}@a:1,b:2`,
    `http://:${pw}@host:6379`,
    `:${pw}@host:6379`,
  ];
  for (const pw of passwords) {
    // Every run of two or more characters between the reserved ones.
    const fragments = pw.split(/[@/#?:%]/).filter((f) => f.length >= 2);
    for (const url of urls(pw)) {
      const shown = [redact(url)];
      try {
        const ep = parseStoreUrl(url);
        assert.equal(ep.password, pw, `${redact(url)}: the password runs to the last @`);
      } catch (e) {
        assert.ok(e instanceof KvgateError && e.code === 'invalid_config', String(e));
        shown.push(e.message);
      }
      for (const text of shown) for (const f of fragments) assert.ok(!text.includes(f), `"${f}" of the password shows in: ${text}`);
    }
  }
  assert.equal(redact('redis://:p@ssw0rd@host:6379'), 'redis://:***@host:6379');
  assert.equal(redact('redis://user:s3cr/et@host:6379/2'), 'redis://user:***@host:6379/2');
});
