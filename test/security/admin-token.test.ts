/**
 * The admin API's token: with one, a worker state change (which drains or downs a worker for
 * every replica) needs it as a bearer credential; reading (metrics, health, the fleet, decisions)
 * stays open. Without one, an admin API bound beyond localhost says so at startup.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pino } from 'pino';
import { bearerMatches } from '../../src/admin/server.js';
import { startTestGate } from '../helpers/gate.js';

const FLEET = { workers: [{ id: 'w1', cluster: 'worker_1' }] };

async function put(admin: string, headers: Record<string, string> = {}): Promise<number> {
  const res = await fetch(`${admin}/workers/w1/state`, { method: 'PUT', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ state: 'draining' }) });
  await res.arrayBuffer();
  return res.status;
}

describe('admin token', () => {
  test('with a token, a state change needs it; reads stay open', async () => {
    const g = await startTestGate(FLEET, { adminToken: 's3cret-token' });
    try {
      assert.equal(await put(g.admin), 401, 'no credential');
      assert.equal(await put(g.admin, { authorization: 'Bearer wrong' }), 401, 'wrong token');
      assert.equal(await put(g.admin, { authorization: 'Basic czNjcmV0LXRva2Vu' }), 401, 'another scheme');
      const workers = async () => ((await (await fetch(`${g.admin}/workers`)).json()) as { workers: Array<{ id: string; state: string }> }).workers;
      assert.equal((await workers())[0]!.state, 'healthy', 'nothing was changed by the refused requests');
      assert.equal(await put(g.admin, { authorization: 'Bearer s3cret-token' }), 200);
      assert.equal((await workers())[0]!.state, 'draining');
      for (const path of ['/metrics', '/healthz', '/readyz', '/debug/decisions']) assert.equal((await fetch(`${g.admin}${path}`)).status, 200, path);
    } finally {
      await g.close(100);
    }
  });

  test('without a token state changes work as before, and a bind beyond localhost is warned about', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(JSON.parse(l) as Record<string, unknown>) });
    const open = await startTestGate(FLEET, { adminHost: '0.0.0.0', logger });
    try {
      assert.equal(await put(`http://127.0.0.1:${open.adminPort}`), 200);
      assert.ok(lines.some((l) => /admin API is reachable beyond this host and has no token/.test(String(l['msg']))), 'warned');
    } finally {
      await open.close(100);
    }
    const quiet: Array<Record<string, unknown>> = [];
    const local = await startTestGate(FLEET, { logger: pino({ level: 'info' }, { write: (l: string) => quiet.push(JSON.parse(l) as Record<string, unknown>) }) });
    try {
      assert.ok(!quiet.some((l) => /has no token/.test(String(l['msg']))), 'no warning on localhost');
    } finally {
      await local.close(100);
    }
  });

  test('bearer credentials: the scheme is case-insensitive, the token exact', () => {
    assert.equal(bearerMatches('Bearer abc', 'abc'), true);
    assert.equal(bearerMatches('bearer abc', 'abc'), true);
    assert.equal(bearerMatches('Bearer abcd', 'abc'), false);
    assert.equal(bearerMatches('Bearer ab', 'abc'), false);
    assert.equal(bearerMatches('Bearer', 'abc'), false);
    assert.equal(bearerMatches(undefined, 'abc'), false);
    assert.equal(bearerMatches('Bearer abc extra', 'abc'), false);
  });
});
