/**
 * What kvgate keeps and says about a request: session ids only as SHA-256 hashes, prompt text
 * never. Checked on everything Redis receives (MONITOR: every command of every path, including
 * the write-back after a slow spell) and holds afterwards (every key and value), on every log
 * line at trace level, and on every span exported over OTLP, across routing, degraded routing,
 * rejections and shedding.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { hashSessionId } from '../../src/request/hashing.js';
import { startTracing } from '../../src/telemetry/tracing.js';
import { chat, harness, holdRequest, waitFor } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { startLatencyProxy } from '../helpers/latency-proxy.js';
import { recordingLogger } from '../helpers/logger.js';
import { startRedis } from '../helpers/redis-server.js';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { OtlpReceiver } from '../telemetry/otlp-receiver.js';

const SESSIONS = {
  header: 'SECRET-header-id-17',
  cookie: 'SECRET-cookie-id-29',
  user: 'secret.user@example.com',
  metadata: 'SECRET-metadata-id-41',
  slow: 'SECRET-while-slow-53',
};
const PROMPT = 'PRIVATE-PROMPT the patient reports chest pain and a history of ';
const SYSTEM = 'PRIVATE-SYSTEM you are the internal assistant of ACME legal; confidential: ';

async function dumpRedis(r: Redis): Promise<string> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'COUNT', 1000);
    cursor = next;
    for (const k of keys) {
      out.push(k);
      const type = await r.type(k);
      if (type === 'string') out.push(String(await r.get(k)));
      else if (type === 'hash') out.push(JSON.stringify(await r.hgetall(k)));
      else if (type === 'zset') out.push(JSON.stringify(await r.zrange(k, '0', '-1', 'WITHSCORES')));
      else out.push(`<${type}>`);
    }
  } while (cursor !== '0');
  return out.join('\n');
}

test('no raw session id or prompt text in Redis (sent or stored), in any log line or in any span', async () => {
  const receiver = await new OtlpReceiver().start();
  // The SDK's exporters read OTEL_* from the environment, as in production; this file is its own process.
  Object.assign(process.env, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '20' });
  const tracing = await startTracing({ logger: recordingLogger('warn').logger });
  assert.equal(tracing.enabled, true);
  const redis = await startRedis();
  const proxy = await startLatencyProxy(redis.port);
  const r = new Redis(redis.port, '127.0.0.1');
  const monitor = monitorRedis(redis.port);
  await monitor.ready;
  const { logger, lines } = recordingLogger('trace');
  const g = await startTestGate(
    { store: { timeout_ms: 50, refresh_ms: 100 }, limits: { max_body_bytes: 256 * 1024 }, workers: [{ id: 'w1', cluster: 'worker_1', max_inflight: 3 }, { id: 'w2', cluster: 'worker_2', max_inflight: 3 }] },
    { store: `redis://${proxy.address}`, logger },
  );
  const h = harness(g.target);
  try {
    const text = (n: number) => `${PROMPT}${'lorem ipsum dolor '.repeat(n)}`;
    await h.request(chat({ session: SESSIONS.header, system: SYSTEM, text: text(200) }));
    await h.request({ method: 'GET', path: '/v1/models', headers: { cookie: `a=b; kvgate-session=${SESSIONS.cookie}` } });
    await h.request(chat({ user: SESSIONS.user, system: SYSTEM, text: text(10) }));
    await h.request({ method: 'POST', path: '/v1/chat/completions', body: JSON.stringify({ metadata: { session_id: SESSIONS.metadata }, messages: [{ role: 'user', content: text(5) }] }) });
    await h.request(chat({ system: SYSTEM, text: text(300) })); // keyed on the prompt prefix
    await h.request(chat({ system: SYSTEM, text: text(1) })); // shorter than one block
    // Rejections and bad input log too.
    await h.request({ method: 'POST', path: '/v1/chat/completions', body: `{"user": "${SESSIONS.user}", "messages": [{"content": "${PROMPT}` });
    await h.request({ method: 'POST', path: '/v1/completions', body: JSON.stringify({ prompt: text(20_000), user: SESSIONS.user }) });
    // Shed: hold both workers full, then ask once more.
    const held = await Promise.all(Array.from({ length: 6 }, (_, i) => holdRequest(h, `${SESSIONS.header}-held-${i}`)));
    const shed = await h.request(chat({ session: SESSIONS.header, text: text(3) }));
    assert.equal(shed.kind === 'local' && shed.status, 429);
    const inflight = async () => (await r.zcard('kvgate:{default}:f:w1')) + (await r.zcard('kvgate:{default}:f:w2'));
    assert.equal(await inflight(), 6, 'the held requests\' leases, in Redis');
    for (const x of held) x.stream.end();
    // The held leases given back in Redis first: a release still on its way when Redis turns slow
    // leaves both workers full in every view the gate has, and the next request is shed, not
    // routed on local state (CI's run once failed that way).
    await waitFor(async () => (await inflight()) === 0, 3000, 'the held leases released in Redis');
    await waitFor(() => (g.gate.store.cachedSnapshot({ pool: 'default', key: undefined, workers: ['w1', 'w2'], blocks: [] }).inflight.get('w1') ?? 0) + (g.gate.store.cachedSnapshot({ pool: 'default', key: undefined, workers: ['w1', 'w2'], blocks: [] }).inflight.get('w2') ?? 0) === 0, 3000, 'the gate seeing both workers free');
    // Degraded, then written back when Redis is fast again.
    proxy.setLatency(300);
    await h.request(chat({ session: SESSIONS.slow, system: SYSTEM, text: text(50) }));
    proxy.setLatency(0);
    await new Promise((res) => setTimeout(res, 1000));
    assert.ok(g.results.some((x) => x.kind === 'route' && x.degraded), 'the degraded path ran');

    await tracing.shutdown();
    const stored = await dumpRedis(r);
    const sent = monitor.commands.map((c) => c.args.join(' '));
    const wire = sent.join('\n');
    const logs = JSON.stringify(lines);
    const spans = JSON.stringify(receiver.spans);
    assert.ok(sent.length > 10 && lines.length > 10, 'something was sent and logged');
    assert.ok(receiver.spans.length >= 10, `spans were exported (${receiver.spans.length})`);
    for (const [where, blob] of [['stored in Redis', stored], ['sent to Redis', wire], ['logged', logs], ['in a span', spans]] as const) {
      for (const secret of [...Object.values(SESSIONS), 'PRIVATE-PROMPT', 'PRIVATE-SYSTEM', 'chest pain', 'lorem ipsum', 'ACME']) {
        assert.ok(!blob.includes(secret), `"${secret}" ${where}`);
      }
    }
    // What is there instead: the hash.
    assert.ok(stored.includes(hashSessionId(SESSIONS.header)), "stored.includes(hashSessionId(SESSIONS.header))");
    assert.ok(stored.includes(hashSessionId(SESSIONS.slow)), 'the degraded placement was written back, hashed');
  } finally {
    h.close();
    await g.close(100);
    monitor.close();
    r.disconnect();
    await proxy.close();
    await redis.stop();
    await tracing.shutdown();
    await receiver.close();
  }
});
