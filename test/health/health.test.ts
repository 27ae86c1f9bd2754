/**
 * Health: readiness means "config loaded and store reachable, or deliberately degraded"
 * (`store.ready_when_unreachable`), reported alike by grpc.health.v1 and the admin API's /readyz;
 * liveness stays up; SIGTERM drains open ext_proc streams before the process exits.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as net from 'node:net';
import { describe, test } from 'node:test';
import { isClosed, isTimedOut } from '../harness/envoy-harness.js';
import { chat, harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { startGateProcess, writeConfig } from '../helpers/gate-process.js';
import { KVGATE } from '../helpers/kvgate-cli.js';
import { startRedis } from '../helpers/redis-server.js';
import { grpcHealth } from './grpc-health.js';

const FLEET = { workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] };
const EXT_PROC = 'envoy.service.ext_proc.v3.ExternalProcessor';

async function readyz(admin: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${admin}/readyz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('health', () => {
  test('memory store: ready at once on every health service, /healthz and /readyz', async () => {
    const g = await startTestGate(FLEET);
    try {
      for (const s of ['', EXT_PROC, 'readiness', 'liveness']) assert.equal(await grpcHealth(g.target, s), 'SERVING', `service "${s}"`);
      assert.equal((await fetch(`${g.admin}/healthz`)).status, 200);
      const r = await readyz(g.admin);
      assert.equal(r.status, 200);
      assert.deepEqual(r.body, { ready: true, status: 'ready', store: 'reachable', ready_when_unreachable: false });
    } finally {
      await g.close(100);
    }
  });

  test('redis down: not ready (health NOT_SERVING, /readyz 503), alive, and ready again when it returns', async () => {
    const redis = await startRedis();
    const g = await startTestGate(FLEET, { store: redis.url });
    try {
      assert.equal(await grpcHealth(g.target, EXT_PROC), 'SERVING');
      await redis.kill();
      const r = await readyz(g.admin);
      assert.equal(r.status, 503);
      assert.equal(r.body['status'], 'not_ready');
      assert.equal(r.body['store'], 'unreachable');
      // Why, and the setting that changes it; the store's own error says what failed.
      assert.match(String(r.body['reason']), /routing on local state but not ready.*set store\.ready_when_unreachable: true/);
      assert.equal(typeof r.body['store_error'], 'string');
      const w = (await (await fetch(`${g.admin}/workers`)).json()) as { readiness: Record<string, unknown> };
      assert.equal(w.readiness['status'], 'not_ready', '/workers (and so kvgate status) shows it too');
      assert.match(String(w.readiness['reason']), /store\.ready_when_unreachable/);
      await waitFor(async () => (await grpcHealth(g.target, EXT_PROC)) === 'NOT_SERVING', 3000, 'grpc health NOT_SERVING');
      assert.equal(await grpcHealth(g.target, ''), 'NOT_SERVING');
      assert.equal(await grpcHealth(g.target, 'liveness'), 'SERVING', 'alive all the same');
      assert.equal((await fetch(`${g.admin}/healthz`)).status, 200);
      // Requests that reach it anyway are still routed, on local state.
      const h = harness(g.target);
      assert.equal((await h.request(chat({ session: 'meanwhile' }))).kind, 'upstream');
      h.close();
      await redis.restart();
      await waitFor(async () => (await readyz(g.admin)).status === 200, 8000, 'ready again');
      await waitFor(async () => (await grpcHealth(g.target, EXT_PROC)) === 'SERVING', 3000, 'grpc health SERVING');
    } finally {
      await g.close(100);
      await redis.stop();
    }
  });

  test('store.ready_when_unreachable: deliberately degraded stays ready and says so', async () => {
    const redis = await startRedis();
    const g = await startTestGate({ ...FLEET, store: { ready_when_unreachable: true } }, { store: redis.url });
    try {
      await redis.kill();
      const r = await readyz(g.admin);
      assert.equal(r.status, 200);
      const { reason, store_error, ...rest } = r.body;
      assert.deepEqual(rest, { ready: true, status: 'degraded', store: 'unreachable', ready_when_unreachable: true });
      assert.match(String(reason), /staying ready because store\.ready_when_unreachable is true/);
      assert.equal(typeof store_error, 'string');
      assert.equal(await grpcHealth(g.target, EXT_PROC), 'SERVING');
    } finally {
      await g.close(100);
      await redis.stop();
    }
  });

  test('SIGTERM: not ready at once, an open stream finishes, then the process exits 0', async () => {
    const gate = await startGateProcess(['--config', writeConfig(FLEET)]);
    const h = harness(gate.target);
    try {
      // A request in progress: headers answered, body not yet sent (Envoy BUFFERED).
      const s = h.openRawStream();
      s.write(headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions', ':authority': 'llm', 'x-session-id': 'draining' }, false) as never);
      const first = await s.next(5000);
      assert.ok(!isClosed(first) && !isTimedOut(first) && first.request_headers, 'headers answered');

      gate.proc.kill('SIGTERM');
      await waitFor(() => gate.lines.some((l) => l['msg'] === 'shutting down: draining open streams'), 5000, 'the drain to start');
      const r = await readyz(`http://127.0.0.1:${gate.adminPort}`);
      assert.equal(r.status, 503);
      assert.equal(r.body['status'], 'draining');
      assert.equal(gate.proc.exitCode, null, 'still running while the stream is open');

      // The request carries on: its body is routed, its response headers end it.
      s.write({ request_body: { body: Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })), end_of_stream: true } } as never);
      const routed = await s.next(5000);
      assert.ok(!isClosed(routed) && !isTimedOut(routed), "!isClosed(routed) && !isTimedOut(routed)");
      assert.match(routedCluster(routed) ?? '', /^worker_[12]$/);
      s.write({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: false } } as never);
      const resp = await s.next(5000);
      assert.ok(!isClosed(resp) && !isTimedOut(resp) && resp.response_headers, "!isClosed(resp) && !isTimedOut(resp) && resp.response_headers");
      s.end();
      const closed = await s.next(5000);
      assert.ok(isClosed(closed) && closed.status.code === 0, 'the stream ends OK');

      const code = await new Promise<number | null>((resolve) => (gate.proc.exitCode !== null ? resolve(gate.proc.exitCode) : gate.proc.once('exit', resolve)));
      assert.equal(code, 0);
      assert.ok(gate.lines.some((l) => l['msg'] === 'stopped'), "gate.lines.some((l) => l['msg'] === 'stopped')");
    } finally {
      h.close();
      await gate.kill();
    }
  });

  test('SIGTERM with --shutdown-delay-s: NOT_SERVING at once, yet a proxy that has not noticed is still served on a new connection', async () => {
    const gate = await startGateProcess(['--config', writeConfig(FLEET), '--shutdown-delay-s', '3']);
    try {
      gate.proc.kill('SIGTERM');
      await waitFor(() => gate.lines.some((l) => String(l['msg']).startsWith('shutting down')), 5000, 'the shutdown to start');
      const r = await readyz(`http://127.0.0.1:${gate.adminPort}`);
      assert.equal(r.status, 503, 'not ready at once');
      // A proxy whose view is a health check or an endpoint update behind opens a new connection now.
      const late = harness(gate.target);
      try {
        const out = await late.request(chat({ session: 'late-comer' }));
        assert.equal(out.kind, 'upstream', `served during the delay (${JSON.stringify(out)})`);
        assert.match(out.kind === 'upstream' ? (out.cluster ?? '') : '', /^worker_[12]$/, 'with a routing answer');
      } finally {
        late.close();
      }
      const code = await new Promise<number | null>((resolve) => (gate.proc.exitCode !== null ? resolve(gate.proc.exitCode) : gate.proc.once('exit', resolve)));
      assert.equal(code, 0);
    } finally {
      await gate.kill();
    }
  });

  test('SIGTERM while the gate is still starting stops it once it runs, not after the kill timeout', async () => {
    // A store that accepts connections and never answers: startup waits for it (3 s) before
    // serving degraded. Node as PID 1 ignores a SIGTERM that has no handler; here (not PID 1) the
    // default action would kill the process, so exit code 0 is what tells the handler ran.
    const sockets = new Set<net.Socket>();
    const blackhole = net.createServer((s) => sockets.add(s));
    await new Promise<void>((resolve) => blackhole.listen(0, '127.0.0.1', resolve));
    const port = (blackhole.address() as net.AddressInfo).port;
    const proc = spawn(process.execPath, [...KVGATE, 'serve', '--grpc-port', '0', '--admin-port', '0', '--grpc-host', '127.0.0.1', '--config', writeConfig(FLEET), '--store', `redis://127.0.0.1:${port}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await waitFor(() => /"msg":"tracing"/.test(out), 10_000, 'the gate to be starting');
      assert.doesNotMatch(out, /kvgate serving/, 'still starting when the signal comes');
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
      proc.kill('SIGTERM');
      const { code, signal } = await exited;
      assert.deepEqual({ code, signal }, { code: 0, signal: null }, 'stopped cleanly by its own handler');
      assert.match(out, /"msg":"stopped"/);
    } finally {
      proc.kill('SIGKILL');
      for (const s of sockets) s.destroy();
      blackhole.close();
    }
  });
});
