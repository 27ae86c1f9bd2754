/**
 * LoRA adapters in the simulator: an engine's slots load and evict with the load cost, a request
 * whose adapter has no slot waits while later ones run, kvgate's adapter affinity loads fewer
 * adapters than the same gate with it off, and a run without adapters is exactly as before.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { adapterTable, assignAdapters, runAdapterComparison } from '../../src/sim/adapters.js';
import { DEFAULT_COST_MODEL, DEFAULT_FLEET } from '../../src/sim/cost-model.js';
import { LoraSlots } from '../../src/sim/lora-slots.js';
import { KvgatePolicy } from '../../src/sim/policies/kvgate.js';
import { simulate } from '../../src/sim/simulator.js';
import { syntheticWorkload } from '../../src/sim/workloads/synthetic.js';
import { FixedPolicy, HAND_COST, HAND_FLEET, handWorkload, near } from './helpers.js';

before(() => initHashing());

describe('simulated engine with LoRA adapter slots', () => {
  test('a full slot is evicted and the new adapter loaded, at the load cost; a resident one costs nothing', async () => {
    // One slot. A at 0, then B (evicts A), then B again (resident). Prompts of one 100-token
    // block each, all different: prefill 0.1 s, no cache hit to blur the times.
    const w = handWorkload([
      { at: 0, prompt: 100, out: 1, blocks: [1] },
      { at: 1, prompt: 100, out: 1, blocks: [2] },
      { at: 2, prompt: 100, out: 1, blocks: [3] },
    ]);
    const adapters = ['A', 'B', 'B'];
    const policy = new FixedPolicy([0, 0, 0]);
    const run = await simulate(w, policy, { fleet: HAND_FLEET, cost: HAND_COST, lora: { maxLoras: 1, loadS: 0.5, adapterOf: (i) => adapters[i] } });
    const ttft = run.outcomes.map((o) => o.firstTokenS - o.arrivalS);
    assert.ok(near(ttft[0]!, 0.6), `load + prefill: ${ttft[0]}`);
    assert.ok(near(ttft[1]!, 0.6), `evict A, load B + prefill: ${ttft[1]}`);
    assert.ok(near(ttft[2]!, 0.1), `B resident: prefill only: ${ttft[2]}`);
    assert.deepEqual(run.lora, { hits: [1, 0], loads: [2, 0], evictions: [1, 0] });
  });

  test('a request whose adapter finds every slot busy waits; a later one of a resident adapter goes first', async () => {
    // One slot, held by B while r0 decodes 50 tokens (10 ms a step: until 0.59 s). r1 (A) arrives
    // at 0.15 and cannot be placed; r2 (B) arrives at 0.2 and runs at once, as vLLM's scheduler
    // skips the request it cannot batch.
    const w = handWorkload([
      { at: 0, prompt: 100, out: 50, blocks: [1] },
      { at: 0.15, prompt: 100, out: 1, blocks: [2] },
      { at: 0.2, prompt: 100, out: 1, blocks: [3] },
    ]);
    const adapters = ['B', 'A', 'B'];
    const run = await simulate(w, new FixedPolicy([0, 0, 0]), { fleet: HAND_FLEET, cost: HAND_COST, lora: { maxLoras: 1, loadS: 0.05, adapterOf: (i) => adapters[i] } });
    const [r0, r1, r2] = run.outcomes;
    assert.ok(near(r2!.firstTokenS, 0.3), `r2 ran at once on resident B: ${r2!.firstTokenS}`);
    assert.ok(r1!.firstTokenS >= r0!.finishS + 0.05 + 0.1 - 1e-9, `r1 waited for B's requests to drain, then loaded A: ${r1!.firstTokenS} vs r0 end ${r0!.finishS}`);
    assert.deepEqual(run.lora, { hits: [1, 0], loads: [2, 0], evictions: [1, 0] });
  });

  test("the adapter gauge lists running and waiting adapters, not idle resident ones, as vLLM's does", () => {
    const slots = new LoraSlots(2);
    slots.admit('A', 0);
    slots.admit('B', 0);
    slots.enqueued('C');
    assert.deepEqual(slots.observe(), { running: ['A', 'B'], waiting: ['C'], maxLora: 2 });
    assert.equal(slots.admissible('C'), false);
    slots.finished('A', 1);
    assert.equal(slots.admissible('C'), true);
    slots.dequeued('C');
    assert.equal(slots.admit('C', 2), true);
    assert.deepEqual(slots.resident().sort(), ['B', 'C']);
    assert.deepEqual(slots.observe(), { running: ['B', 'C'], waiting: [], maxLora: 2 });
  });

  test('a run whose fleet has slots but whose requests name no adapter is exactly the run without them', async () => {
    const workload = syntheticWorkload('chat', { requests: 300, seed: 5 });
    const ctx = { workers: DEFAULT_FLEET.workers, blockTokens: workload.blockTokens, seed: 5, maxInflight: 16 };
    const plain = await simulate(workload, await KvgatePolicy.create(ctx), { fleet: DEFAULT_FLEET, cost: DEFAULT_COST_MODEL });
    const slotted = await simulate(workload, await KvgatePolicy.create(ctx), {
      fleet: DEFAULT_FLEET,
      cost: DEFAULT_COST_MODEL,
      lora: { maxLoras: 1, loadS: 1, adapterOf: () => undefined },
    });
    assert.deepEqual(slotted.outcomes, plain.outcomes);
    assert.equal(plain.lora, undefined);
    assert.deepEqual(slotted.lora!.loads, new Array(DEFAULT_FLEET.workers).fill(0));
  });
});

describe('kvgate sim: LoRA adapter affinity', () => {
  test("a conversation's turns name one adapter; the mix is Zipf-skewed", () => {
    const workload = syntheticWorkload('chat', { requests: 2000, seed: 2 });
    const of = assignAdapters(workload, { adapters: 8, zipfS: 1, baseShare: 0 }, 2);
    const bySession = new Map<string, Set<string | undefined>>();
    workload.requests.forEach((r, i) => {
      if (r.sessionId === undefined) return;
      bySession.set(r.sessionId, (bySession.get(r.sessionId) ?? new Set()).add(of[i]));
    });
    for (const s of bySession.values()) assert.equal(s.size, 1);
    const count = (a: string) => of.filter((x) => x === a).length;
    assert.ok(count('lora-0') > count('lora-7'), `hottest ${count('lora-0')} vs coldest ${count('lora-7')}`);
  });

  test('with adapter affinity the gate loads fewer adapters than with it off, routing everything both times', async () => {
    // 2,000 requests: the first few hundred are the compulsory loads of an empty fleet, alike for both.
    const workload = syntheticWorkload('chat', { requests: 2000, seed: 3 });
    const rows = await runAdapterComparison(workload, {
      fleet: DEFAULT_FLEET,
      cost: DEFAULT_COST_MODEL,
      maxInflight: 16,
      seed: 3,
      maxLoras: 4,
      loadS: 0.05,
      policies: ['kvgate', 'kvgate (adapter affinity off)'],
    });
    const [on, off] = rows;
    const table = adapterTable(rows);
    assert.equal(on!.policy, 'kvgate');
    for (const r of rows) assert.equal(r.routed, workload.requests.length, table);
    assert.ok(on!.loadsPerRequest < off!.loadsPerRequest, table);
    assert.ok(on!.hitRate > off!.hitRate, table);
  });
});
