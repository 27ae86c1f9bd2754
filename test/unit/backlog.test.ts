/**
 * The backlog term: prefill queued on a worker, counted in prompt blocks rather than requests.
 * The scorer on its own, in a decision (a worker holding the prompt loses it once the work queued
 * there outweighs the prefill a move recomputes), the gate's tally of its leases' uncached blocks,
 * and the gate feeding that tally to the decision.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate, type GateResult } from '../../src/gate/gate.js';
import { PendingPrefill } from '../../src/gate/pending-prefill.js';
import type { RequestInfo } from '../../src/request/request.js';
import { decide } from '../../src/routing/policy.js';
import { BACKLOG_CAP, backlogScorer } from '../../src/routing/scorers/backlog.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import type { Lease } from '../../src/state/store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { decisionInput } from '../helpers/decisions.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

function w(id: string, extra: Partial<WorkerView> = {}): WorkerView {
  return { id, state: 'healthy', inflight: 1, maxInflight: 16, prefixBlocks: 0, ...extra };
}

/** A session's placement (the term weighs sessions only: see the last test of this block). */
function input(workers: WorkerView[], backlog: number, extra: Partial<DecisionInput> = {}): DecisionInput {
  return decisionInput(workers, { totalBlocks: 40, weights: { prefix: 1, load: 1, kv: 0, balance: 0, backlog }, balanceFloor: 3, ...extra });
}

describe('backlog scorer', () => {
  test('queued prefill in units of this prompt, capped; absent counts as none', () => {
    const ws = [w('a'), w('b', { pendingPrefill: 20 }), w('c', { pendingPrefill: 40 }), w('d', { pendingPrefill: 10_000 })];
    const ctx = { input: input(ws, 1), fleet: undefined, placing: true, overLimit: false };
    assert.deepEqual(backlogScorer.score(ws, ctx).map((x) => x + 0), [0, -0.5, -1, -BACKLOG_CAP]);
    // The prompt's whole size (past the hashing cap) is the unit, when the gate knows it.
    const long = { input: input(ws, 1, { promptBlocks: 80 }), fleet: undefined, placing: true, overLimit: false };
    assert.deepEqual(backlogScorer.score(ws, long).map((x) => x + 0), [0, -0.25, -0.5, -BACKLOG_CAP]);
  });

  test('the cap is 4 prompts: 10 prompts of queued prefill score exactly -4, times the weight in the decision', () => {
    const ws = [w('a', { pendingPrefill: 400 }), w('b')];
    const ctx = { input: input(ws, 1), fleet: undefined, placing: true, overLimit: false };
    assert.deepEqual(backlogScorer.score(ws, ctx).map((x) => x + 0), [-4, 0]);
    const d = decide(input(ws, 2, { weights: { prefix: 0, load: 0, kv: 0, balance: 0, backlog: 2 } }));
    assert.equal(d.kind, 'route');
    const a = d.kind === 'route' ? d.explanation.candidates.find((c) => c.worker === 'a') : undefined;
    assert.equal(a?.score, -8, 'weight 2 × -4');
  });

  test('a worker holding the whole prompt loses it once more than a prompt of prefill is queued there', () => {
    // a holds all 40 blocks but has 60 blocks of other prompts to compute first; b holds nothing and is idle.
    const busyHolder = [w('a', { prefixBlocks: 40, pendingPrefill: 60 }), w('b')];
    assert.equal((decide(input(busyHolder, 0)) as { worker: string }).worker, 'a', 'without the term, the prefix wins');
    assert.equal((decide(input(busyHolder, 1)) as { worker: string }).worker, 'b', 'with it: 60 queued > 40 recomputed');
    // With less queued than the prompt, staying is cheaper: the holder keeps it.
    const lightHolder = [w('a', { prefixBlocks: 40, pendingPrefill: 30 }), w('b')];
    assert.equal((decide(input(lightHolder, 1)) as { worker: string }).worker, 'a');
  });

  test('weight 0 leaves the term out: decisions are as without it', () => {
    const ws = [w('a', { prefixBlocks: 40, pendingPrefill: 400 }), w('b')];
    const off = decide(input(ws, 0));
    const absent = decide({ ...input(ws, 0), weights: { prefix: 1, load: 1, kv: 0, balance: 0 } });
    assert.deepEqual(off, absent);
  });

  test('a request without a session is scored without it: 0 on every worker, and the busy holder keeps its prompt', () => {
    const ws = [w('a', { prefixBlocks: 40, pendingPrefill: 60 }), w('b', { pendingPrefill: 20 })];
    const oneOff = input(ws, 1, { session: false });
    assert.deepEqual(backlogScorer.score(ws, { input: oneOff, fleet: undefined, overLimit: false }).map((x) => x + 0), [0, 0]);
    assert.equal((decide(oneOff) as { worker: string }).worker, 'a', 'the prefix decides, as at weight 0');
    assert.equal((decide(input(ws, 1)) as { worker: string }).worker, 'b', 'a session being placed weighs the queue');
  });

  test('a session the mode does not follow, or its spill-over, is a one-off too: the busy holder keeps its prompt', () => {
    // `prefix` mode never follows sessions: a session id there places nothing.
    const ws = [w('a', { prefixBlocks: 40, pendingPrefill: 60 }), w('b', { pendingPrefill: 20 })];
    const prefixMode = decide(input(ws, 1, { mode: 'prefix' }));
    assert.equal(prefixMode.kind === 'route' && prefixMode.worker, 'a');
    assert.equal(prefixMode.kind === 'route' && prefixMode.outcome, 'prefix_hit');
    // A spill-over: the session has maxInflightPerSession requests running at home (c), so this one
    // is scored, but the session stays at home.
    const home = w('c', { inflight: 4 });
    const spill = decide(input([...ws, home], 1, { affinity: 'c', keyInflight: 4 }));
    assert.equal(spill.kind === 'route' && spill.explanation.spilled, true);
    assert.equal(spill.kind === 'route' && spill.worker, 'a', 'the prefix decides, as for any one-off');
  });
});

describe('PendingPrefill: the gate tally of its leases uncached blocks', () => {
  const lease = (id: string, worker: string): Lease => ({ id, pool: 'default', worker, shared: false });

  test('adds per worker, removes per lease once, ignores unknown leases and empty work', () => {
    const p = new PendingPrefill();
    p.add(lease('1', 'w1'), 30);
    p.add(lease('2', 'w1'), 12);
    p.add(lease('3', 'w2'), 0);
    p.add(lease('1', 'w1'), 30); // the same lease twice counts once
    assert.equal(p.of('w1'), 42);
    assert.equal(p.of('w2'), 0);
    p.remove(lease('1', 'w1'));
    p.remove(lease('1', 'w1'));
    p.remove(lease('9', 'w1'));
    assert.equal(p.of('w1'), 12);
    p.remove(lease('2', 'w1'));
    assert.equal(p.of('w1'), 0);
  });
});

describe('through the gate', () => {
  let n = 0;
  /** A new session's request whose prompt is `blocks` distinct 256-character blocks. */
  function req(blocks: number): RequestInfo {
    const text = Array.from({ length: blocks }, (_, i) => `r${n} b${i} `.padEnd(256, 'x')).join('');
    n++;
    return chatRequest(text, { session: `s${n}` });
  }
  function routed(r: GateResult): Extract<GateResult, { kind: 'route' }> {
    assert.equal(r.kind, 'route');
    if (r.kind !== 'route') throw new Error('unreachable');
    return r;
  }
  const config = (backlog: number) =>
    parseConfig(
      { workers: [{ id: 'w1', cluster: 'gpu_1' }, { id: 'w2', cluster: 'gpu_2' }], scoring: { backlog_weight: backlog, kv_weight: 0, balance_weight: 0 } },
      'test',
    );

  test('a routed prompt is pending on its worker until its lease is released', async () => {
    const gate = new Gate(config(1), new MemoryStore(), silentLogger());
    const r = routed(await gate.route(req(40)));
    const view = (id: string) => gate.views(gate.store.cachedSnapshot({ pool: gate.pool, key: undefined, workers: ['w1', 'w2'], blocks: [] })).find((v) => v.id === id)!;
    assert.ok(view(r.worker).pendingPrefill! >= 40, `pending ${view(r.worker).pendingPrefill}`);
    await gate.release(r.lease);
    assert.equal(view(r.worker).pendingPrefill, undefined);
  });

  test('what the worker already holds is not pending: only the uncached blocks are tallied', async () => {
    const gate = new Gate(config(1), new MemoryStore(), silentLogger());
    const view = (id: string) => gate.views(gate.store.cachedSnapshot({ pool: gate.pool, key: undefined, workers: ['w1', 'w2'], blocks: [] })).find((v) => v.id === id)!;
    const head = Array.from({ length: 8 }, (_, i) => `held b${i} `.padEnd(256, 'x')).join('');
    const first = routed(await gate.route(chatRequest(head, { session: 'held-1' })));
    await gate.release(first.lease);
    const tail = Array.from({ length: 2 }, (_, i) => `new b${i} `.padEnd(256, 'y')).join('');
    const second = routed(await gate.route(chatRequest(head + tail, { session: 'held-1' })));
    assert.equal(second.worker, first.worker);
    const c = second.explanation.candidates.find((x) => x.worker === second.worker)!;
    assert.ok(c.prefixBlocks >= 7, `holds ${c.prefixBlocks} blocks`);
    const total = second.explanation.totalBlocks;
    assert.ok(total >= 10 && total - c.prefixBlocks <= 3, `${total} blocks, ${c.prefixBlocks} held`);
    assert.equal(view(second.worker).pendingPrefill, total - c.prefixBlocks, 'the held blocks are not counted');
    await gate.release(second.lease);
  });

  test('a prompt past max_blocks with its size known is pending by its bytes, not capped at max_blocks', async () => {
    const cfg = parseConfig(
      { workers: [{ id: 'w1', cluster: 'gpu_1' }, { id: 'w2', cluster: 'gpu_2' }], prefix: { max_blocks: 4 }, scoring: { backlog_weight: 1, kv_weight: 0, balance_weight: 0 } },
      'test',
    );
    const gate = new Gate(cfg, new MemoryStore(), silentLogger());
    const view = (id: string) => gate.views(gate.store.cachedSnapshot({ pool: gate.pool, key: undefined, workers: ['w1', 'w2'], blocks: [] })).find((v) => v.id === id)!;
    const r = routed(await gate.route(req(20)));
    const pending = view(r.worker).pendingPrefill!;
    assert.ok(pending >= 20, `pending ${pending}: estimated from the body, not the 4 hashed blocks`);
    await gate.release(r.lease);
  });

  test('at weight 0, workers without engine metrics: nothing is tallied, the request path does no backlog work', async () => {
    const gate = new Gate(config(0), new MemoryStore(), silentLogger());
    const r = routed(await gate.route(req(40)));
    const view = gate.views(gate.store.cachedSnapshot({ pool: gate.pool, key: undefined, workers: ['w1', 'w2'], blocks: [] })).find((v) => v.id === r.worker)!;
    assert.equal(view.pendingPrefill, undefined);
    await gate.release(r.lease);
  });

  test('with the backlog term, a short prompt avoids the worker computing a long one; without it, the load ties', async () => {
    for (const [weight, apart] of [[1, true], [0, false]] as const) {
      const gate = new Gate(config(weight), new MemoryStore(), silentLogger());
      const long = routed(await gate.route(req(200)));
      // A second gate request to the other worker, so both have one in flight: only the work differs.
      const other = routed(await gate.route(req(2)));
      assert.notEqual(other.worker, long.worker);
      const short = routed(await gate.route(req(4)));
      if (apart) assert.notEqual(short.worker, long.worker, 'the short prompt waits behind 2 blocks, not 200');
      else assert.ok(short.explanation.candidates.every((c) => c.score === short.explanation.candidates[0]!.score), 'equal scores without the term');
    }
  });
});
