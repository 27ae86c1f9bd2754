import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { summarize } from '../../src/sim/metrics.js';
import { RoundRobinPolicy } from '../../src/sim/policies/round-robin.js';
import { pooledBound } from '../../src/sim/pooled-bound.js';
import { simulate } from '../../src/sim/simulator.js';
import { continuationParents } from '../../src/sim/workload.js';
import { FixedPolicy, HAND_COST, HAND_FLEET, handWorkload, near } from './helpers.js';

before(() => initHashing());

// Blocks of 100 tokens; A B C D = ids 1 2 3 4 (each id covers the blocks before it).
//  r0 t=0.0  300 tokens [A B C]          1 output token
//  r1 t=0.1  400 tokens [A B C D]        3 output tokens (2 decode steps of 10 ms)
//  r2 t=1.0  450 tokens [A B C D] + 50   1 output token
const THREE = handWorkload([
  { at: 0, prompt: 300, out: 1, blocks: [1, 2, 3] },
  { at: 0.1, prompt: 400, out: 3, blocks: [1, 2, 3, 4] },
  { at: 1.0, prompt: 450, out: 1, blocks: [1, 2, 3, 4] },
]);
const PROMPT = 300 + 400 + 450;

describe('simulator accounting on two workers and three requests', () => {
  test('round robin: r1 misses on the other worker, r2 reuses r0 on the first', async () => {
    const run = await simulate(THREE, new RoundRobinPolicy({ workers: 2, blockTokens: 100, seed: 1, maxInflight: 16 }), {
      fleet: HAND_FLEET,
      cost: HAND_COST,
    });
    const [o0, o1, o2] = run.outcomes;
    // r0 → w0: nothing cached, 300 tokens at 1000 tok/s.
    assert.equal(o0!.worker, 0);
    assert.ok(near(o0!.firstTokenS, 0.3));
    assert.ok(near(o0!.finishS, 0.3));
    // r1 → w1: cold, 400 tokens → first token at 0.5, then two 10 ms steps.
    assert.equal(o1!.worker, 1);
    assert.equal(o1!.cachedTokens, 0);
    assert.ok(near(o1!.firstTokenS, 0.5));
    assert.ok(near(o1!.finishS, 0.52));
    // r2 → w0: A B C cached from r0 (300), 150 computed → 0.15 s.
    assert.equal(o2!.worker, 0);
    assert.equal(o2!.cachedTokens, 300);
    assert.equal(o2!.computedTokens, 150);
    assert.ok(near(o2!.firstTokenS, 1.15));

    const m = summarize(run, THREE, continuationParents(THREE), pooledBound(THREE, HAND_FLEET));
    assert.ok(near(m.hit_rate, 300 / PROMPT));
    assert.ok(near(m.ttft_p50_s, 0.3)); // TTFTs 0.15, 0.3, 0.4
    assert.ok(near(m.ttft_p99_s, 0.4));
    assert.ok(near(m.e2e_p99_s, 0.42));
    assert.ok(near(m.throughput_tok_s, (PROMPT + 5) / 1.15));
    // Work: w0 computed 300 + 150 and generated 2; w1 computed 400 and generated 3.
    assert.deepEqual(run.workerWork, [452, 403]);
    assert.ok(near(m.imbalance, 452 / ((452 + 403) / 2)));
    // r1 continues r0 and r2 continues r1; both moved.
    assert.equal(m.continuations, 2);
    assert.equal(m.migrations, 2);
    assert.equal(m.shed, 0);
  });

  test('all on one worker: r1 queues behind r0 but hits; r2 hits all four blocks', async () => {
    const policy = new FixedPolicy([0, 0, 0]);
    const run = await simulate(THREE, policy, { fleet: HAND_FLEET, cost: HAND_COST });
    const [o0, o1, o2] = run.outcomes;
    assert.ok(near(o0!.firstTokenS, 0.3));
    // r1 waits for r0's prefill (until 0.3), then computes only D: 100 tokens.
    assert.equal(o1!.cachedTokens, 300);
    assert.ok(near(o1!.firstTokenS, 0.4));
    assert.ok(near(o1!.finishS, 0.42));
    // r2 computes its 50-token tail only.
    assert.equal(o2!.cachedTokens, 400);
    assert.ok(near(o2!.firstTokenS, 1.05));

    const m = summarize(run, THREE, continuationParents(THREE), pooledBound(THREE, HAND_FLEET));
    assert.ok(near(m.hit_rate, 700 / PROMPT));
    assert.ok(near(m.ttft_p50_s, 0.3)); // TTFTs 0.05, 0.3, 0.3
    assert.ok(near(m.ttft_p99_s, 0.3));
    assert.equal(m.migrations, 0);
    assert.ok(near(m.imbalance, 2)); // all work on one of two workers
    // The pooled bound (20 blocks, nothing evicted) sees the same 700 cached tokens.
    assert.ok(near(m.bound_fraction, 1));
    // The policy heard about each first token and each completion, at the right times.
    assert.deepEqual(policy.firstTokens.map(([i]) => i), [0, 1, 2]);
    assert.ok(near(policy.completions.find(([i]) => i === 1)![1], 0.42));
  });

  test('pooled bound by hand: one LRU cache of the fleet size', () => {
    assert.ok(near(pooledBound(THREE, HAND_FLEET).hitRate, 700 / PROMPT));
    // A fleet of 2 × 200 tokens = 4 blocks: r1 inserts D, evicting nothing; r2 still hits 4 blocks.
    assert.ok(near(pooledBound(THREE, { ...HAND_FLEET, cacheTokens: 200 }).hitRate, 700 / PROMPT));
    // 2 × 100 tokens = 2 blocks: r0 over-commits to 3, then leaves A B cached (C, its tail, goes
    // first); r1 hits A B and leaves A B again; r2 hits A B.
    assert.ok(near(pooledBound(THREE, { ...HAND_FLEET, cacheTokens: 100 }).hitRate, 400 / PROMPT));
  });

  test('a fully cached prompt still computes its last token', async () => {
    const w = handWorkload([
      { at: 0, prompt: 200, out: 1, blocks: [1, 2] },
      { at: 1, prompt: 200, out: 1, blocks: [1, 2] },
    ]);
    const run = await simulate(w, new FixedPolicy([0, 0]), { fleet: HAND_FLEET, cost: HAND_COST });
    assert.equal(run.outcomes[1]!.cachedTokens, 199);
    assert.ok(near(run.outcomes[1]!.firstTokenS - 1, 0.001));
  });

  test('continuous batching: sequences decode together; the batch limit and KV capacity make requests wait', async () => {
    // Two requests decode 10 tokens each at once: both finish 10 steps (100 ms) after their first token.
    const w = handWorkload([
      { at: 0, prompt: 100, out: 11, blocks: [1] },
      { at: 0, prompt: 100, out: 11, blocks: [2] },
    ]);
    const together = await simulate(w, new FixedPolicy([0, 0]), { fleet: HAND_FLEET, cost: HAND_COST });
    assert.ok(near(together.outcomes[0]!.finishS, 0.1 + 0.1));
    assert.ok(near(together.outcomes[1]!.finishS, 0.2 + 0.1));
    // With a batch of one, the second cannot start its prefill until the first has finished.
    const single = await simulate(w, new FixedPolicy([0, 0]), { fleet: { ...HAND_FLEET, maxBatch: 1 }, cost: HAND_COST });
    assert.ok(near(single.outcomes[1]!.firstTokenS, 0.2 + 0.1));
    // With 3 blocks of KV, each request pins 1 prompt block + 1 output block: the second waits for
    // the first to finish (0.2) before its prefill starts.
    const tight = await simulate(w, new FixedPolicy([0, 0]), { fleet: { ...HAND_FLEET, cacheTokens: 300 }, cost: HAND_COST });
    assert.ok(near(tight.outcomes[1]!.firstTokenS, 0.2 + 0.1));
  });

  test('a step costs more as the batch reads more KV', async () => {
    // 100 bytes of weights + 1 byte per token of context, at 100 B/s: a lone 100+11-token sequence
    // steps in (100 + 111) / 100 s.
    const cost = { ...HAND_COST, kvBytesPerToken: 1, weightBytes: 100 };
    const w = handWorkload([{ at: 0, prompt: 100, out: 11, blocks: [1] }]);
    const run = await simulate(w, new FixedPolicy([0]), { fleet: HAND_FLEET, cost });
    assert.ok(near(run.outcomes[0]!.finishS, 0.1 + 10 * (211 / 100), 1e-6));
  });

  test('chunked prefill: a prefill shares its steps with the running decodes, slowing both', async () => {
    // r0 decodes 10 tokens from 0.1. r1 (200 tokens) prefills from 0.1 in 100-token chunks, each
    // step also carrying r0's token: the prefill runs at 1000 × 100/101 tok/s, so 0.202 s, and a
    // step lasts (100 + 1) / 1000 = 0.101 s instead of 0.01 s, so r0 gets 2 tokens meanwhile.
    const w = handWorkload([
      { at: 0, prompt: 100, out: 11, blocks: [1] },
      { at: 0.1, prompt: 200, out: 1, blocks: [2, 3] },
    ]);
    const run = await simulate(w, new FixedPolicy([0, 0]), { fleet: { ...HAND_FLEET, prefillChunkTokens: 100 }, cost: HAND_COST });
    assert.ok(near(run.outcomes[1]!.firstTokenS, 0.1 + 0.202, 1e-9));
    assert.ok(near(run.outcomes[0]!.finishS, 0.302 + 8 * 0.01, 1e-9));
  });
});
