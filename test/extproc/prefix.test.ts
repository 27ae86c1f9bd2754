/**
 * Prefix-aware routing end to end (Envoy harness → real gRPC → kvgate), on both store backends:
 * shared system prompts meet on one worker, unrelated prompts spread by load, a saturated prefix
 * holder spills to a second worker that the index then knows, and both backends decide alike.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { GateResult } from '../../src/gate/gate.js';
import { isClosed, type EnvoyHarness, type RawStream } from '../harness/envoy-harness.js';
import { chat, harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const WORKERS = ['worker_1', 'worker_2', 'worker_3'].map((id) => ({ id, cluster: id, max_inflight: 4 }));
const SYSTEM_A = 'You are the ACME support assistant. Follow the policy below exactly. '.repeat(40);
const SYSTEM_B = 'You write SQL for the analytics warehouse; schemas follow. '.repeat(40);

let redis: TestRedis;
let db = 0;
before(async () => {
  redis = await startRedis();
});
after(async () => redis.stop());

/** Sends a chat request that stays in flight: the body is decided on, the stream left open. */
async function hold(h: EnvoyHarness, body: string): Promise<{ cluster: string; stream: RawStream }> {
  const s = h.openRawStream();
  s.write(headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm' }, false) as never);
  await s.next(2000);
  s.write({ request_body: { body: Buffer.from(body), end_of_stream: true } } as never);
  const ev = await s.next(2000);
  if (isClosed(ev) || !('response' in ev)) throw new Error('no routing reply');
  return { cluster: routedCluster(ev)!, stream: s };
}

function lastRoute(g: TestGate): Extract<GateResult, { kind: 'route' }> {
  const r = g.results.at(-1);
  assert.ok(r && r.kind === 'route', "r && r.kind === 'route'");
  return r;
}

for (const backend of ['memory', 'redis'] as const) {
  describe(`prefix-aware routing (${backend} store)`, () => {
    let g: TestGate;
    let h: EnvoyHarness;
    before(async () => {
      g = await startTestGate({ workers: WORKERS }, { store: backend === 'memory' ? 'memory' : `${redis.url}/${++db}` });
      h = harness(g.target);
    });
    after(async () => {
      h.close();
      await g.close(100);
    });

    test('two new sessions with the same long system prompt land on the same worker', async () => {
      const a = await h.request(chat({ session: `alice-${backend}`, system: SYSTEM_A, text: 'my order is late' }));
      const b = await h.request(chat({ session: `bob-${backend}`, system: SYSTEM_A, text: 'how do I return a toaster' }));
      assert.equal(a.kind, 'upstream');
      assert.equal(b.cluster, a.cluster);
      const r = lastRoute(g);
      assert.equal(r.outcome, 'new');
      const chosen = r.explanation.candidates.find((c) => c.worker === r.worker)!;
      assert.ok(chosen.prefixBlocks >= 10, `bob matched alice's system prompt (${chosen.prefixBlocks} blocks)`);
    });

    test('unrelated prompts spread by load', async () => {
      const held = [];
      for (let i = 0; i < 9; i++) {
        held.push(await hold(h, JSON.stringify({ model: 'llama', messages: [{ role: 'user', content: `unrelated question number ${i}: ${'lorem ipsum '.repeat(30)} ${i}` }] })));
      }
      const per = new Map<string, number>();
      for (const x of held) per.set(x.cluster, (per.get(x.cluster) ?? 0) + 1);
      assert.deepEqual([...per.values()].sort(), [3, 3, 3], `even spread: ${JSON.stringify([...per])}`);
      for (const x of held) x.stream.end();
    });

    test('when a prefix’s worker is saturated the request goes elsewhere and the index learns the new holder', async () => {
      const body = (i: number) => JSON.stringify({ model: 'llama', messages: [{ role: 'system', content: SYSTEM_B }, { role: 'user', content: `query ${i}` }] });
      const first = await hold(h, body(0));
      const held = [first];
      for (let i = 1; i < 4; i++) {
        const x = await hold(h, body(i));
        assert.equal(x.cluster, first.cluster, 'the prefix holder takes them while it has room');
        held.push(x);
      }
      // The holder is at its limit (4): the next one goes elsewhere.
      const spill = await hold(h, body(4));
      assert.notEqual(spill.cluster, first.cluster);
      held.push(spill);
      for (const x of held) x.stream.end();
      await new Promise((r) => setTimeout(r, 100));
      // With both free again, a new request sees two holders of the system prompt.
      const probe = await h.request({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: body(99) });
      assert.equal(probe.kind, 'upstream');
      const holders = lastRoute(g).explanation.candidates.filter((c) => c.prefixBlocks > 0).map((c) => c.worker).sort();
      assert.deepEqual(holders, [first.cluster, spill.cluster].sort());
    });

    test('the admin debug endpoint explains recent decisions', async () => {
      const res = await fetch(`${g.admin}/debug/decisions?limit=3`);
      const body = (await res.json()) as { decisions: Array<{ outcome: string; explanation: { candidates: Array<{ worker: string; score?: number }> } }> };
      assert.equal(body.decisions.length, 3);
      assert.equal(body.decisions[0]!.explanation.candidates.length, 3);
      assert.ok(!JSON.stringify(body).includes('ACME'), 'no prompt text');
      // snake_case, like the rest of the admin API
      assert.ok(!/"[a-z]+[A-Z]\w*":/.test(JSON.stringify(body)), JSON.stringify(body).slice(0, 300));
      assert.equal(typeof (body.decisions[0]!.explanation as unknown as Record<string, unknown>)['total_blocks'], 'number');
    });
  });
}

describe('memory and Redis backends decide alike', () => {
  test('the same request sequence gets the same placements on both', async () => {
    const memory = await startTestGate({ workers: WORKERS });
    // Past store.timeout_ms (a loaded machine) the Redis gate would decide on local state, which
    // is not what this compares: a generous bound, and no degraded decision allowed below.
    // refresh_ms 50: the Redis gate's view of in-flight counts catches up with a release quickly (below).
    const shared = await startTestGate({ workers: WORKERS, store: { timeout_ms: 2000, refresh_ms: 50 } }, { store: `${redis.url}/${++db}` });
    const hm = harness(memory.target);
    const hr = harness(shared.target);
    try {
      const script = Array.from({ length: 40 }, (_, i) =>
        i % 3 === 0
          ? chat({ session: `s-${i % 7}`, system: SYSTEM_A, text: `turn ${i}` })
          : i % 3 === 1
            ? chat({ system: i % 2 ? SYSTEM_B : SYSTEM_A, text: `sessionless ${i}` })
            : chat({ user: `u-${i % 5}`, text: `user turn ${i} ${'x'.repeat(i * 40)}` }),
      );
      const m: string[] = [];
      const r: string[] = [];
      // Each request once both gates are done with the last and see every worker free: a
      // stream's end (and its lease's release) is handled after the harness has its answer, and a
      // decision racing it sees one request more in flight on one backend than on the other (CI's
      // Node 22 run split a tie that way twice). The Redis gate's view of in-flight counts is its
      // last read of Redis plus its own leases, so a read made while the release was on its way
      // counts the lease until the next read: the wait covers that too. The comparison is of
      // decisions, not of that timing.
      const ids = WORKERS.map((w) => w.id);
      const free = (g: TestGate) => [...g.gate.store.cachedSnapshot({ pool: 'default', key: undefined, workers: ids, blocks: [] }).inflight.values()].every((n) => n === 0);
      const settled = () =>
        waitFor(() => memory.extproc.openStreams === 0 && shared.extproc.openStreams === 0 && free(memory) && free(shared), 3000, 'both gates done with the last request, every worker free in their views');
      for (const req of script) {
        m.push((await hm.request(req)).cluster!);
        r.push((await hr.request(req)).cluster!);
        await settled();
      }
      assert.ok(shared.results.every((x) => x.kind !== 'route' || !x.degraded), 'every Redis decision went through Redis');
      assert.deepEqual(r, m);
      assert.ok(new Set(m).size > 1, "new Set(m).size > 1");
    } finally {
      hm.close();
      hr.close();
      await memory.close(100);
      await shared.close(100);
    }
  });
});
