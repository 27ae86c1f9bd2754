/**
 * `kvgate status` against a real gate's admin API: a line per worker with its state and in-flight
 * load, `--json`, the KVGATE_ADMIN variable, every signal field the API adds, and a clear error for
 * an admin API that is down or answers nonsense.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import { registerStatusCommand, unreachableMessage } from '../../src/cli/status-command.js';
import { harness, holdRequest } from '../helpers/envoy.js';
import { setWorkerState, startTestGate, type TestGate } from '../helpers/gate.js';
import { refusedPort } from '../helpers/refused-port.js';

/** Runs `kvgate status ARGS` in-process and returns what it printed. */
async function status(...args: string[]): Promise<string> {
  let out = '';
  const program = new Command('kvgate').exitOverride();
  registerStatusCommand(program, { write: (s) => (out += s) });
  await program.parseAsync(['node', 'kvgate', 'status', ...args]);
  return out;
}

/** An admin API stand-in answering every request with one status and body. */
async function cannedAdmin(statusCode: number, body: string): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((_req, res) => {
    res.writeHead(statusCode, { 'content-type': 'application/json' });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

describe('kvgate status', () => {
  let gate: TestGate;
  before(async () => {
    gate = await startTestGate({
      workers: [
        { id: 'gpu-a', cluster: 'gpu-a', max_inflight: 5 },
        { id: 'gpu-b', cluster: 'cluster-b' },
      ],
    });
  });
  after(() => gate.close(100));

  test("a line per worker: id (and cluster when it differs), state, in-flight/limit", async () => {
    const out = await status('--admin', gate.admin);
    const lines = out.trimEnd().split('\n');
    assert.equal(lines[0], '2 workers, store: memory (reachable, ready)');
    assert.match(lines[1]!, /^WORKER\s+STATE\s+IN-FLIGHT\s+SIGNALS$/);
    assert.match(lines[2]!, /^gpu-a\s+healthy\s+0\/5$/);
    assert.match(lines[3]!, /^gpu-b \(cluster-b\)\s+healthy\s+0\/16$/);
  });

  test('follows the gate: a drained worker and a request in flight', async () => {
    await setWorkerState(gate.admin, 'gpu-b', 'draining');
    const h = harness(gate.target);
    const held = await holdRequest(h, 'status-session');
    try {
      assert.equal(held.cluster, 'gpu-a');
      const out = await status('--admin', gate.admin);
      assert.match(out, /^gpu-a\s+healthy\s+1\/5$/m);
      assert.match(out, /^gpu-b \(cluster-b\)\s+draining\s+0\/16$/m);
    } finally {
      held.stream.close();
      h.close();
      await setWorkerState(gate.admin, 'gpu-b', 'healthy');
    }
  });

  test('--json prints what the admin API answered', async () => {
    const out = await status('--admin', gate.admin, '--json');
    const direct = await (await fetch(`${gate.admin}/workers`)).json();
    assert.deepEqual(JSON.parse(out), direct);
  });

  test('KVGATE_ADMIN names the admin API when --admin is absent', async () => {
    process.env['KVGATE_ADMIN'] = gate.admin;
    try {
      assert.match(await status(), /^gpu-a\s+healthy/m);
    } finally {
      delete process.env['KVGATE_ADMIN'];
    }
  });

  test('every other field a worker carries is printed as a signal, with units read off its name', async () => {
    const admin = await cannedAdmin(
      200,
      JSON.stringify({
        store: 'redis',
        workers: [
          {
            id: 'w1',
            cluster: 'w1',
            state: 'pressured',
            inflight: 3,
            max_inflight: 8,
            kv_usage: 0.912,
            queue: 4,
            gpu_temp_c: 83,
            signals_age_ms: 350,
            reason: 'kv_usage',
            gpu: { memory_used_frac: 0.9, fb_free_mib: 8156 },
          },
          { id: 'w2', cluster: 'w2', state: 'down', inflight: 0, max_inflight: 8, kv_usage: null, signals_age_s: 12.5, reason: 'stale' },
        ],
      }),
    );
    try {
      const out = await status('--admin', admin.url);
      assert.match(out, /^2 workers, store: redis$/m);
      assert.match(out, /^w1\s+pressured\s+3\/8\s+kv_usage=91\.2% queue=4 gpu_temp_c=83°C signals_age_ms=350ms reason=kv_usage gpu\.memory_used_frac=90\.0% gpu\.fb_free_mib=8156$/m);
      assert.match(out, /^w2\s+down\s+0\/8\s+kv_usage=- signals_age_s=12\.5s reason=stale$/m);
    } finally {
      await admin.close();
    }
  });

  test('workers of several pools: a POOL column first; one pool needs none', async () => {
    const admin = await cannedAdmin(
      200,
      JSON.stringify({
        store: 'memory',
        workers: [
          { id: 'l1', pool: 'llama', cluster: 'l1', state: 'healthy', inflight: 1, max_inflight: 8 },
          { id: 'm1', pool: 'mistral', cluster: 'm1', state: 'healthy', inflight: 0, max_inflight: 4 },
        ],
      }),
    );
    try {
      const out = await status('--admin', admin.url);
      assert.match(out, /^POOL\s+WORKER\s+STATE\s+IN-FLIGHT\s+SIGNALS$/m);
      assert.match(out, /^llama\s+l1\s+healthy\s+1\/8$/m);
      assert.match(out, /^mistral\s+m1\s+healthy\s+0\/4$/m);
    } finally {
      await admin.close();
    }
  });

  test("pointed at the gate's gRPC port: says so and names the flag for the admin port", async () => {
    await assert.rejects(status('--admin', `http://${gate.target}`), /does not answer HTTP\/1\.1: it looks like the gate's ext_proc gRPC port; the admin API is on the port of --admin-port/);
  });

  test('an HTTP parser error without a code (fetch on Node 24 and later) reads as the gRPC port too', () => {
    // Node 24's fetch (undici 7) rejects an HTTP/2-only answer with an HTTPParserError that has no
    // HPE_ code, where Node 20 and 22 give one: the test above sees only the running Node's shape.
    const err = Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error('Response does not match the HTTP/1.1 protocol (Expected HTTP/, RTSP/ or ICE/)'), { name: 'HTTPParserError' }),
    });
    assert.match(unreachableMessage('http://127.0.0.1:18080', err), /^http:\/\/127\.0\.0\.1:18080 does not answer HTTP\/1\.1: it looks like the gate's ext_proc gRPC port/);
  });

  test("the store's health: an unreachable store is a NOT READY line with the reason and its error", async () => {
    const admin = await cannedAdmin(
      200,
      JSON.stringify({
        store: 'redis',
        readiness: { ready: false, status: 'not_ready', store: 'unreachable', reason: 'the store does not answer; …', store_error: 'connect ECONNREFUSED 127.0.0.1:6379' },
        workers: [{ id: 'w1', cluster: 'w1', state: 'healthy', inflight: 0, max_inflight: 8 }],
      }),
    );
    try {
      const out = await status('--admin', admin.url);
      assert.match(out, /^1 worker, store: redis \(unreachable, not_ready\)$/m);
      assert.match(out, /^NOT READY: the store does not answer; … \(connect ECONNREFUSED 127\.0\.0\.1:6379\)$/m);
      assert.match(out, /^no worker has a metrics_url: healthy unless drained or down by an operator/m);
    } finally {
      await admin.close();
    }
  });

  test('an admin API that is down, failing or answering nonsense: a clear error', async () => {
    const refused = await refusedPort();
    try {
      await assert.rejects(status('--admin', `http://127.0.0.1:${refused.port}`), /nothing is listening at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): is the gate running\? Pass its admin address with --admin/);
    } finally {
      await refused.release();
    }
    await assert.rejects(status('--admin', 'not a url'), /--admin must be a URL/);
    for (const [code, body, message] of [
      [503, '{"error":"not ready"}', /answered 503/],
      [200, '<html>', /not JSON/],
      [200, '{"workers": "none"}', /without a "workers" list/],
      [200, '[1,2]', /without a "workers" list/],
    ] as Array<[number, string, RegExp]>) {
      const admin = await cannedAdmin(code, body);
      try {
        await assert.rejects(status('--admin', admin.url), message);
      } finally {
        await admin.close();
      }
    }
  });
});
