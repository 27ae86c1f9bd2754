import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { ArticlePolicy } from '../../src/sim/policies/article.js';
import { ConsistentHashPolicy } from '../../src/sim/policies/consistent-hash.js';
import { DYNAMO_DEFAULTS, DynamoCostPolicy } from '../../src/sim/policies/dynamo-cost.js';
import { LeastLoadedPolicy } from '../../src/sim/policies/least-loaded.js';
import type { PolicyContext, RouteChoice } from '../../src/sim/policies/policy.js';
import { RoundRobinPolicy } from '../../src/sim/policies/round-robin.js';
import { SGLANG_DEFAULTS, SglangCacheAwarePolicy } from '../../src/sim/policies/sglang-cache-aware.js';
import type { SimRequest } from '../../src/sim/workload.js';

before(() => initHashing());

const ctx = (workers: number): PolicyContext => ({ workers, blockTokens: 100, seed: 1, maxInflight: 16 });

let nextIndex = 0;
function req(blocks: number[], opts: { session?: string; prompt?: number } = {}): SimRequest {
  return {
    index: nextIndex++,
    arrivalS: 0,
    promptTokens: opts.prompt ?? blocks.length * 100,
    outputTokens: 10,
    blocks,
    sessionId: opts.session,
    text: () => '',
  };
}

function worker(c: RouteChoice): number {
  assert.ok('worker' in c, `expected a route, got ${JSON.stringify(c)}`);
  return c.worker;
}

describe('baseline policies', () => {
  test('round robin cycles through the workers', () => {
    const p = new RoundRobinPolicy(ctx(3));
    assert.deepEqual([0, 1, 2, 3, 4].map(() => worker(p.route())), [0, 1, 2, 0, 1]);
  });

  test('least loaded takes the fewest in flight, and counts completions', () => {
    const p = new LeastLoadedPolicy(ctx(2));
    const a = req([1]);
    assert.equal(worker(p.route()), 0);
    assert.equal(worker(p.route()), 1);
    assert.equal(worker(p.route()), 0); // tie at 1-1: w0 has routed no more than w1
    p.completed(a, 0);
    p.completed(a, 0);
    assert.equal(worker(p.route()), 0);
  });

  test('consistent hashing keeps a session on its ring owner whatever the load, and spreads sessions', () => {
    const p = new ConsistentHashPolicy(ctx(4));
    const owner = worker(p.route(req([1], { session: 'alice' })));
    for (let i = 0; i < 20; i++) assert.equal(worker(p.route(req([1], { session: 'alice' }))), owner);
    const used = new Set(Array.from({ length: 200 }, (_, i) => worker(p.route(req([1], { session: `s${i}` })))));
    assert.equal(used.size, 4);
    // No session: the least loaded worker.
    const loads = p.load.inflight;
    const least = loads.indexOf(Math.min(...loads));
    assert.equal(worker(p.route(req([1]))), least);
  });

  test("the article's example: abc stays on worker 1 at 9 of 10; def and ghi go to worker 2; then abc migrates; then capacity is full", () => {
    const p = new ArticlePolicy(ctx(2));
    p.load.inflight[0] = 9;
    p.load.inflight[1] = 2;
    p.affinity.set('abc', 0);
    assert.deepEqual(
      ['abc', 'def', 'ghi'].map((s) => worker(p.route(req([1], { session: s })))),
      [0, 1, 1],
    );
    assert.deepEqual(p.load.inflight, [10, 4]);
    assert.equal(worker(p.route(req([1], { session: 'abc' }))), 1); // worker 1 is at the threshold
    assert.equal(p.affinity.get('abc'), 1);
    p.load.inflight[1] = 10;
    assert.deepEqual(p.route(req([1], { session: 'new' })), { shed: 'capacity_full' });
  });

  test('SGLang cache-aware: a match above the threshold wins over load; a miss goes to the least loaded', () => {
    const p = new SglangCacheAwarePolicy(ctx(2));
    assert.equal(worker(p.route(req([1, 2, 3]), 0)), 0);
    // 3 of 4 blocks match w0's tree (75% > 30%): w0, though it has 1 in flight and w1 none.
    assert.equal(worker(p.route(req([1, 2, 3, 4]), 0)), 0);
    // 1 of 4 blocks (25%): a miss, so the least loaded (w1).
    assert.equal(worker(p.route(req([1, 7, 8, 9]), 0)), 1);
    // The tree now knows [1,7,8,9] on w1; the deepest match for [1,7,8] is w1's.
    assert.equal(worker(p.route(req([1, 7, 8]), 0)), 1);
  });

  test('SGLang cache-aware: an imbalanced fleet goes to the least loaded worker, match or not', () => {
    const p = new SglangCacheAwarePolicy(ctx(2), { ...SGLANG_DEFAULTS, balanceAbsThreshold: 2, balanceRelThreshold: 1.5 });
    p.route(req([1, 2]), 0); // w0 owns the prefix
    p.load.inflight[0] = 5;
    p.load.inflight[1] = 1; // 5 − 1 > 2 and 5 > 1.5 × 1
    assert.equal(worker(p.route(req([1, 2, 3]), 0)), 1);
    assert.equal(p.tree.match([1, 2, 3]).tenant, 1); // and the prefix is recorded under w1 now
  });

  test('SGLang cache-aware: eviction trims each tenant to max_tree_size, leaves first', () => {
    const p = new SglangCacheAwarePolicy(ctx(1), { ...SGLANG_DEFAULTS, maxTreeChars: 2 * 100 * 4, evictionIntervalS: 10 });
    p.route(req([1, 2, 3, 4]), 0);
    assert.equal(p.tree.size(0), 4);
    p.route(req([9]), 11); // eviction runs first: keep 2 nodes, the root side
    assert.equal(p.tree.match([1, 2, 3, 4]).depth, 2);
  });

  test('Dynamo cost: an in-flight prefill makes a prefix owner cost as much as a cold worker; after its first token the overlap wins', () => {
    const probe = () => req([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    const p = new DynamoCostPolicy(ctx(2));
    const first = req([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    const w = worker(p.route(first, 0));
    // While `first` prefills: owner = (1000 active + 100 uncached)/100 + (10 + 1) = 22; other = 1100/100 + 11 = 22.
    assert.deepEqual(p.costs(probe()).map((c) => c.cost), [22, 22]);
    // After its first token: owner = 100/100 + 11 = 12 < other 22.
    p.firstToken(first);
    assert.equal(p.costs(probe())[w]!.cost, 12);
    assert.equal(worker(p.route(probe(), 1)), w);

    // A tie goes to either cheapest worker at random, as minimum_cost_index draws among equal
    // costs: nothing else (not how much either has seen) breaks it.
    const picks = new Set<string>();
    for (let seed = 1; seed <= 16; seed++) {
      const q = new DynamoCostPolicy({ ...ctx(2), seed });
      const v = worker(q.route(req([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), 0));
      picks.add(worker(q.route(probe(), 0)) === v ? 'owner' : 'other');
    }
    assert.deepEqual([...picks].sort(), ['other', 'owner']);
  });

  test('Dynamo cost: as shipped, no busy threshold: it reads no engine metric and refuses nothing; with one set, all busy is refused', () => {
    const full = [{ running: 50, waiting: 20, kvUsage: 1 }, { running: 50, waiting: 20, kvUsage: 0.99 }];
    const p = new DynamoCostPolicy(ctx(2));
    assert.equal(p.observe, undefined);
    for (let i = 0; i < 4; i++) assert.ok(worker(p.route(req([i + 1]), i)) >= 0);
    const q = new DynamoCostPolicy(ctx(2), { ...DYNAMO_DEFAULTS, busyKvThreshold: 0.85 });
    q.observe!(full);
    assert.deepEqual(q.route(req([1]), 0), { shed: 'all_workers_busy' });
    q.observe!([full[0]!, { running: 1, waiting: 0, kvUsage: 0.5 }]);
    assert.equal(worker(q.route(req([1]), 1)), 1);
  });

  test("Dynamo cost: the approximate index forgets a worker's blocks after the 120 s TTL", () => {
    const p = new DynamoCostPolicy(ctx(2));
    const a = req([1, 2, 3, 4]);
    const w = worker(p.route(a, 0));
    p.firstToken(a);
    p.completed(a);
    const fresh = p.costs(req([1, 2, 3, 4]));
    assert.ok(fresh[w]!.cost < fresh[1 - w]!.cost, "fresh[w]!.cost < fresh[1 - w]!.cost");
    p.route(req([50]), 121); // expiry runs at routing time
    const later = p.costs(req([1, 2, 3, 4]));
    assert.equal(later[w]!.uncached, 400);
  });
});
