import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ApproxPrefixIndex, kvScores, LLMD_DEFAULTS, LlmdPolicy, prefixScores, queueScores } from '../../src/sim/policies/llm-d.js';
import type { PolicyContext, RouteChoice, WorkerObservation } from '../../src/sim/policies/policy.js';
import type { SimRequest } from '../../src/sim/workload.js';

// 16-token workload blocks, as text workloads have: llm-d's 64-token index blocks are 4 of them.
const ctx = (workers: number, cacheTokens = 400_000): PolicyContext => ({ workers, blockTokens: 16, seed: 7, maxInflight: 16, cacheTokens });

let nextIndex = 0;
function req(blocks: number[], session?: string): SimRequest {
  return { index: nextIndex++, arrivalS: 0, promptTokens: blocks.length * 16, outputTokens: 4, blocks, sessionId: session, text: () => '' };
}
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const idle = (n: number): WorkerObservation[] => Array.from({ length: n }, () => ({ running: 0, waiting: 0, kvUsage: 0 }));
function worker(c: RouteChoice): number {
  assert.ok('worker' in c, "'worker' in c");
  return c.worker;
}

describe("llm-d's default scheduling profile, scorer by scorer", () => {
  test('queue-scorer: (maxQ − q) / (maxQ − minQ); all equal scores 1', () => {
    assert.deepEqual(queueScores([0, 5, 10]), [1, 0.5, 0]);
    assert.deepEqual(queueScores([3, 3, 3]), [1, 1, 1]);
  });

  test('kv-cache-utilization-scorer: 1 − usage; prefix-cache-scorer: matched / total blocks', () => {
    assert.deepEqual(kvScores([0, 0.25, 1]), [1, 0.75, 0]);
    assert.deepEqual(prefixScores([0, 2, 4], 4), [0, 0.5, 1]);
    assert.deepEqual(prefixScores([0, 0], 0), [0, 0]);
  });

  test('the approximate index: 64-token blocks, stop at the first block no pod holds, credit every holder on the way', () => {
    const idx = new ApproxPrefixIndex(3, 100);
    idx.add([10, 11, 12], 0);
    idx.add([10, 99, 12], 1); // holds 10 and 12, not 11
    assert.deepEqual(idx.match([10, 11, 12, 13], 3), [3, 2, 0]); // 13: nobody, stop; pod 1 is credited 12 after missing 11
    assert.deepEqual(idx.match([50, 10], 3), [0, 0, 0]);
    const p = new LlmdPolicy(ctx(2));
    // 10 workload blocks of 16 tokens: two whole 64-token index blocks, named by blocks 3 and 7.
    assert.deepEqual(p.keys(req(range(100, 10))), [103, 107]);
  });

  test("each pod's LRU holds as many index blocks as the engine has GPU blocks (num_gpu_blocks of 16 tokens)", () => {
    const p = new LlmdPolicy(ctx(1, 64)); // 4 GPU blocks → 4 LRU entries
    const r = req(range(0, 24)); // 6 index blocks
    p.route(r);
    assert.equal(p.index.size(0), 4);
    // The oldest (the prompt's first blocks) went first, so the chain breaks at once.
    assert.deepEqual(p.index.match(p.keys(r), 1), [0]);
  });

  test('the total is 2·queue + 2·kv + 3·prefix on the metrics last scraped, and the max wins', () => {
    const p = new LlmdPolicy(ctx(3));
    p.observe(idle(3));
    const a = req(range(0, 16)); // 4 index blocks
    const first = worker(p.route(a));
    // Another pod is a little emptier in queue and KV; the prefix holder still wins by 3 × 1.
    const obs = idle(3);
    obs[first] = { running: 4, waiting: 2, kvUsage: 0.3 };
    p.observe(obs);
    const s = p.scores(req(range(0, 16)));
    const other = (first + 1) % 3;
    assert.ok(Math.abs(s[first]! - (2 * 0 + 2 * 0.7 + 3 * 1)) < 1e-12, "Math.abs(s[first]! - (2 * 0 + 2 * 0.7 + 3 * 1)) < 1e-12");
    assert.ok(Math.abs(s[other]! - (2 * 1 + 2 * 1 + 3 * 0)) < 1e-12, "Math.abs(s[other]! - (2 * 1 + 2 * 1 + 3 * 0)) < 1e-12");
    assert.equal(worker(p.route(req(range(0, 16)))), first);
    // Half the prompt matched against a queue of 10: 2·0 + 2·0.7 + 3·0.5 = 2.9 < 4 elsewhere.
    obs[first] = { running: 4, waiting: 10, kvUsage: 0.3 };
    p.observe(obs);
    assert.notEqual(worker(p.route(req([...range(0, 8), ...range(500, 8)]))), first);
  });

  test('max-score picker: ties break at random, so an idle fleet spreads cold requests', () => {
    const p = new LlmdPolicy(ctx(4));
    p.observe(idle(4));
    const chosen = new Set<number>();
    for (let i = 0; i < 40; i++) chosen.add(worker(p.route(req(range(1000 * (i + 1), 8)))));
    assert.ok(chosen.size >= 3, `spread over ${[...chosen].join(',')}`);
  });

  test('session-affinity scorer (second row): +1 for the pod the last finished response named, weight 1', () => {
    const p = new LlmdPolicy(ctx(2), { ...LLMD_DEFAULTS, sessionWeight: 1 }, 'llm-d-session');
    p.observe(idle(2));
    const a = req(range(0, 8), 's1');
    const w = worker(p.route(a));
    assert.equal(p.sessionToken.get('s1'), undefined, 'no token until the response ends');
    p.completed(a, w);
    assert.equal(p.sessionToken.get('s1'), w);
    const s = p.scores(req(range(2000, 8), 's1')); // nothing cached anywhere
    assert.equal(s[w]! - s[1 - w]!, 1);
    // The default profile has no session scorer.
    const plain = new LlmdPolicy(ctx(2));
    plain.observe(idle(2));
    const b = req(range(0, 8), 's2');
    plain.completed(b, worker(plain.route(b)));
    assert.equal(plain.sessionToken.size, 0);
  });
});
