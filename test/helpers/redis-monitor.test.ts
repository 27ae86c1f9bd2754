/** The raw MONITOR reader the Redis tests use: its lines parse as Redis writes them. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { monitorRedis, parseMonitorLine } from './redis-monitor.js';
import { startRedis } from './redis-server.js';

test('a MONITOR line: source, and arguments unquoted with their escapes and UTF-8 bytes', () => {
  assert.deepEqual(parseMonitorLine('+1796181071.106710 [0 lua] "TIME"'), { source: 'lua', args: ['TIME'] });
  assert.deepEqual(parseMonitorLine('+1796181071.106710 [3 127.0.0.1:5123] "SET" "a \\"b\\"\\\\" "line\\r\\n" "caf\\xc3\\xa9"'), {
    source: '127.0.0.1:5123',
    args: ['SET', 'a "b"\\', 'line\r\n', 'café'],
  });
  assert.equal(parseMonitorLine('+OK'), undefined);
  assert.equal(parseMonitorLine('-ERR nope'), undefined);
});

test('sees every command sent after it is ready, a busy server included', async () => {
  const redis = await startRedis();
  const client = new Redis(redis.url);
  const mon = monitorRedis(redis.port);
  try {
    await mon.ready;
    await Promise.all(Array.from({ length: 200 }, (_, i) => client.set(`k${i}`, `v é ${i}`)));
    await client.eval("return redis.call('GET', KEYS[1])", 1, 'k7');
    await new Promise((r) => setTimeout(r, 100));
    const sets = mon.commands.filter((c) => c.args[0]?.toLowerCase() === 'set');
    assert.equal(sets.length, 200);
    assert.deepEqual(sets[7]!.args, ['set', 'k7', 'v é 7']);
    assert.ok(mon.commands.some((c) => c.source === 'lua' && c.args[0] === 'GET' && c.args[1] === 'k7'), 'a script\'s own command, by source lua');
  } finally {
    mon.close();
    client.disconnect();
    await redis.stop();
  }
});
