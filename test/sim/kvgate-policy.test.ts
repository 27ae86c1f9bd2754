import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { hashSessionId, initHashing } from '../../src/request/hashing.js';
import { understand } from '../../src/request/keys.js';
import { KvgatePolicy, requestInfo, workerId } from '../../src/sim/policies/kvgate.js';
import { simulate } from '../../src/sim/simulator.js';
import { syntheticWorkload } from '../../src/sim/workloads/synthetic.js';
import { HAND_COST, HAND_FLEET, handWorkload } from './helpers.js';

before(() => initHashing());

const ctx = { workers: 2, blockTokens: 100, seed: 1, maxInflight: 16 };

describe('the kvgate policy runs the real Gate', () => {
  test('each request becomes the RequestInfo Envoy would send', async () => {
    const p = await KvgatePolicy.create(ctx);
    const w = handWorkload([{ at: 0, prompt: 300, out: 5, blocks: [1, 2, 3], session: 'conv-1' }]);
    const info = requestInfo(w.requests[0]!, p.gate.currentConfig);
    assert.equal(info.method, 'POST');
    assert.equal(info.path, '/v1/chat/completions');
    assert.equal(info.headers.get('x-session-id'), 'conv-1');
    const body = JSON.parse(info.body!.toString('utf8')) as { model: string; messages: Array<{ content: string }> };
    assert.equal(typeof body.model, 'string');
    assert.equal(body.messages[0]!.content, w.requests[0]!.text());
    // The gate's own key reading sees the session.
    assert.equal(understand(info, p.gate.currentConfig).key?.hash, hashSessionId('conv-1'));
  });

  test('after a run the gate store holds the sessions’ affinities, and every lease was released at first token', async () => {
    const p = await KvgatePolicy.create(ctx);
    const w = handWorkload([
      { at: 0, prompt: 300, out: 5, blocks: [1, 2, 3], session: 'alice' },
      { at: 0, prompt: 300, out: 5, blocks: [7, 8, 9], session: 'bob' },
      { at: 2, prompt: 400, out: 5, blocks: [1, 2, 3, 4], session: 'alice' },
    ]);
    const run = await simulate(w, p, { fleet: HAND_FLEET, cost: HAND_COST });
    const ids = p.gate.currentConfig.workers.map((x) => x.id);
    for (const [i, session] of [[0, 'alice'], [1, 'bob'], [2, 'alice']] as const) {
      const snap = p.gate.store.cachedSnapshot({ pool: p.gate.pool, key: `s:${hashSessionId(session)}`, workers: ids, blocks: [] });
      assert.equal(snap.affinity, workerId(run.outcomes[i]!.worker), `affinity of ${session}`);
    }
    // alice's second turn went where the gate had pinned her, and hit her cached prefix there.
    assert.equal(run.outcomes[2]!.worker, run.outcomes[0]!.worker);
    assert.equal(run.outcomes[2]!.cachedTokens, 300);
    assert.deepEqual(Object.fromEntries(p.outcomes), { new: 2, affinity_hit: 1 });
    const snap = p.gate.store.cachedSnapshot({ pool: p.gate.pool, key: undefined, workers: ids, blocks: [] });
    assert.deepEqual([...snap.inflight.values()], [0, 0]);
  });

  test('leases are held until the first token: the gate sees the in-flight count while a request prefills', async () => {
    const p = await KvgatePolicy.create(ctx);
    const w = handWorkload([{ at: 0, prompt: 300, out: 50, blocks: [1, 2, 3], session: 's' }]);
    const ids = p.gate.currentConfig.workers.map((x) => x.id);
    const seen: number[] = [];
    const inflight = () => [...p.gate.store.cachedSnapshot({ pool: p.gate.pool, key: undefined, workers: ids, blocks: [] }).inflight.values()].reduce((a, b) => a + b, 0);
    const original = p.firstToken.bind(p);
    p.firstToken = async (req) => {
      seen.push(inflight());
      await original(req);
      seen.push(inflight());
    };
    await simulate(w, p, { fleet: HAND_FLEET, cost: HAND_COST });
    assert.deepEqual(seen, [1, 0]);
  });

  test('scraped KV use past 85% makes the gate keep new sessions off that worker, as in production', async () => {
    const p = await KvgatePolicy.create(ctx);
    p.observe([{ running: 3, waiting: 0, kvUsage: 0.9 }, { running: 0, waiting: 0, kvUsage: 0.1 }]);
    assert.equal(p.gate.signalsOf('w0')?.verdict.state, 'pressured');
    for (let i = 0; i < 5; i++) {
      const r = handWorkload([{ at: 0, prompt: 100, out: 1, blocks: [i], session: `new-${i}` }]).requests[0]!;
      assert.deepEqual(await p.route(r), { worker: 1 });
    }
    p.observe([{ running: 0, waiting: 0, kvUsage: 0.2 }, { running: 0, waiting: 0, kvUsage: 0.1 }]);
    assert.equal(p.gate.signalsOf('w0')?.verdict.state, 'healthy');
  });

  test('past the in-flight limit the real gate queues where engines report room, keeps sessions home, and sheds once KV is full', async () => {
    const p = await KvgatePolicy.create({ ...ctx, maxInflight: 2 });
    const req = (i: number, session: string) => handWorkload([{ at: 0, prompt: 1000, out: 1, blocks: Array.from({ length: 10 }, (_, b) => i * 100 + b), session }]).requests[0]!;
    // Six sessions, no first token yet: the gate's count passes 2 on both workers.
    const placed = [];
    for (let i = 0; i < 6; i++) placed.push(await p.route(req(i, `s${i}`)));
    assert.ok(placed.every((c) => 'worker' in c), `every request named a worker: ${JSON.stringify(placed)}`);
    assert.deepEqual(new Set(placed.map((c) => ('worker' in c ? c.worker : -1))), new Set([0, 1]), 'spread over both');
    // A later turn of s0 goes to s0's worker, past its limit: it holds the conversation.
    const home = (placed[0] as { worker: number }).worker;
    assert.deepEqual(await p.route(req(0, 's0')), { worker: home });
    assert.equal(p.outcomes.get('affinity_hit'), 1);
    // A long engine queue is latency, not a full engine: still routed.
    p.observe([{ running: 8, waiting: 40, kvUsage: 0.5 }, { running: 8, waiting: 40, kvUsage: 0.5 }]);
    assert.equal(p.gate.signalsOf('w0')?.verdict.state, 'pressured');
    assert.ok('worker' in (await p.route(req(7, 's7'))));
    // Both engines' KV past 85%: the fleet is full, a new session is refused (429).
    p.observe([{ running: 8, waiting: 0, kvUsage: 0.9 }, { running: 8, waiting: 0, kvUsage: 0.9 }]);
    assert.deepEqual(await p.route(req(8, 's8')), { shed: 'overloaded' });
  });

  test('past the hard bound the real gate still queues while every engine reports room and a queue: the bound is for what no scrape has shown yet', async () => {
    const p = await KvgatePolicy.create({ ...ctx, maxInflight: 2 });
    const req = (i: number) => handWorkload([{ at: 0, prompt: 1000, out: 1, blocks: Array.from({ length: 10 }, (_, b) => i * 100 + b) }]).requests[0]!;
    // No first token yet: 4 × 2 = 8 in flight on each worker, then the count bound refuses.
    for (let i = 0; i < 16; i++) assert.ok('worker' in (await p.route(req(i))), `request ${i} routed`);
    assert.deepEqual(await p.route(req(16)), { shed: 'overloaded' });
    // Both engines report 5 of those queued, with KV room: 5 more each are within the bound.
    p.observe([{ running: 3, waiting: 5, kvUsage: 0.5 }, { running: 3, waiting: 5, kvUsage: 0.5 }]);
    for (let i = 17; i < 27; i++) assert.ok('worker' in (await p.route(req(i))), `request ${i} routed past 8 in flight`);
    assert.deepEqual(await p.route(req(27)), { shed: 'overloaded' }, '8 past the shallowest reported queue');
    // One engine out of KV room: the fleet is full by memory, the count alone bounds the other.
    p.observe([{ running: 3, waiting: 5, kvUsage: 0.5 }, { running: 3, waiting: 5, kvUsage: 0.9 }]);
    assert.deepEqual(await p.route(req(28)), { shed: 'overloaded' });
  });

  test("the simulator hands the gate every worker's latest scrape every 100 ms of simulated time (its collector's read loop)", async () => {
    const p = await KvgatePolicy.create(ctx);
    const seen: Array<{ t: number; kv: number[] }> = [];
    const original = p.observe.bind(p);
    p.observe = (ws, t) => {
      seen.push({ t: t ?? 0, kv: ws.map((w) => w.kvUsage) });
      original(ws, t);
    };
    // 10 blocks per worker; one request pinning 9 (3 prompt + 6 output) crosses 85%, then releases.
    const w = handWorkload([{ at: 0, prompt: 300, out: 600, blocks: [1, 2, 3], session: 'big' }]);
    const run = await simulate(w, p, { fleet: HAND_FLEET, cost: HAND_COST });
    const at = run.outcomes[0]!.worker;
    assert.ok(seen.length > 2, "seen.length > 2");
    assert.ok(seen.every((s, i) => i === 0 || Math.abs(s.t - seen[i - 1]!.t - 0.1) < 1e-9), 'every 100 ms');
    assert.ok(seen.some((s) => (s.kv[at] ?? 0) >= 0.85), 'the pinned KV crossed 85% in a scrape');
  });

  test('on a synthetic chat workload every request went through the gate', async () => {
    const p = await KvgatePolicy.create({ ...ctx, workers: 4, blockTokens: 16 });
    const w = syntheticWorkload('chat', { requests: 150, seed: 3 });
    const run = await simulate(w, p, { fleet: { ...HAND_FLEET, workers: 4, cacheTokens: 400_000 }, cost: HAND_COST });
    const decided = [...p.outcomes.values()].reduce((a, b) => a + b, 0);
    assert.equal(decided, 150);
    assert.ok(run.outcomes.every((o) => o.worker >= 0), "run.outcomes.every((o) => o.worker >= 0)");
    assert.ok((p.outcomes.get('affinity_hit') ?? 0) > 0, "(p.outcomes.get('affinity_hit') ?? 0) > 0");
  });
});
