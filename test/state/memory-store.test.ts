import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { WorkerState } from '../../src/routing/types.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { preconditionsHold } from '../../src/state/store.js';
import { commitRequest, NO_PRECONDITIONS } from '../helpers/commits.js';
import { storeContract } from './store.contract.js';

storeContract('memory', async () => {
  const store = new MemoryStore();
  return { store, cleanup: () => store.close() };
});

/**
 * A commit checks its preconditions against the store's live maps instead of a snapshot of them.
 * It must accept exactly the commits a snapshot taken at the same moment would: any leases,
 * operator states, affinities and recorded prefixes, any preconditions (workers outside the
 * query's list included, whose count a snapshot shows as 0), with and without a prefix bound.
 */
describe('MemoryStore commit check against the snapshot rule', () => {
  test('commits succeed exactly when preconditionsHold(p, cachedSnapshot(req)) holds', async () => {
    const { default: fc } = await import('fast-check');
    const worker = fc.constantFrom('w1', 'w2', 'w3', 'w4', 'gone');
    const state = fc.constantFrom<WorkerState | undefined>(undefined, 'healthy', 'pressured', 'draining', 'down');
    const inState = fc.constantFrom<readonly WorkerState[]>(['healthy'], ['healthy', 'pressured'], ['draining'], ['down']);
    const limit = fc.integer({ min: 0, max: 3 });
    const chainOf = (n: number) => Array.from({ length: n }, (_, i) => `b${i}`);
    const setup = fc.record({
      leases: fc.array(fc.record({ worker, key: fc.constantFrom<string | undefined>(undefined, 's:a', 's:b') }), { maxLength: 8 }),
      states: fc.array(fc.tuple(worker, state), { maxLength: 4 }),
      prefixes: fc.array(fc.tuple(worker, fc.integer({ min: 0, max: 5 })), { maxLength: 4 }),
    });
    const pre = fc.record({
      affinity: fc.constantFrom<string | undefined>(undefined, 'w1', 'w2'),
      below: fc.array(fc.record({ worker, limit }), { maxLength: 2 }),
      atOrAbove: fc.array(fc.record({ worker, limit }), { maxLength: 2 }),
      states: fc.array(fc.record({ worker, in: inState }), { maxLength: 2 }),
      prefix: fc.option(fc.record({ atMost: fc.integer({ min: 0, max: 5 }), over: fc.subarray(['w1', 'w2', 'w3', 'w4', 'gone']) }), { nil: undefined }),
    });
    const workers = ['w1', 'w2', 'w3', 'w4'];
    fc.assert(
      fc.property(setup, pre, worker, fc.constantFrom<string | undefined>(undefined, 's:a', 's:b'), fc.integer({ min: 0, max: 5 }), (s, p, to, key, blocks) => {
        const store = new MemoryStore();
        const base = { pool: 'p', workers, affinityTtlMs: 60_000, prefixTtlMs: 60_000, capacityBlocks: 100 };
        // Leases (and the affinities they record), then prefixes, then operator states.
        for (const l of s.leases) {
          const before = store.cachedSnapshot({ ...base, key: l.key, blocks: [] });
          assert.ok(store.commitSync({ ...base, key: l.key, blocks: [], worker: l.worker, preconditions: { ...NO_PRECONDITIONS, affinity: before.affinity } }).ok);
        }
        for (const [w, n] of s.prefixes) {
          const r = store.commitSync({ ...base, key: undefined, blocks: chainOf(n), worker: w, preconditions: NO_PRECONDITIONS });
          assert.ok(r.ok, "r.ok");
          if (r.ok) void store.release(r.lease);
        }
        for (const [w, st] of s.states) void store.setWorkerState('p', w, st);
        const req = { ...base, key, blocks: chainOf(blocks), worker: to, preconditions: p };
        const want = preconditionsHold(p, store.cachedSnapshot(req));
        const got = store.commitSync(req);
        assert.equal(got.ok, want);
        if (!got.ok) assert.deepEqual(got.snapshot, store.cachedSnapshot(req), 'a failed commit returns the snapshot of the moment');
      }),
      { numRuns: 400 },
    );
  });
});

/**
 * Worker ids churn (pods replaced under autoscaling or a rollout, each a new name): the prefix
 * index must not keep a number and its storage for every id it ever saw.
 */
describe('MemoryStore prefix index under worker churn', () => {
  test('1,000 worker ids, each routed a long prompt then removed from the pool, leave a bounded index', () => {
    let now = 1_000_000;
    const store = new MemoryStore({ now: () => now });
    const ttl = 5_000;
    // 12 blocks of 256 characters' worth each: the prompt reaches deep into the index.
    const prompt = (tag: string) => Array.from({ length: 12 }, (_, i) => `${tag}:${i}`);
    for (let i = 0; i < 1_000; i++) {
      // A rollout step: pod i joins as pod i-2 leaves (each reload makes a new list).
      const workers = [`pod-${i - 1}`, `pod-${i}`];
      const r = store.commitSync(commitRequest({ workers, blocks: prompt(`sys${i % 7}`), worker: `pod-${i}`, prefixTtlMs: ttl }));
      assert.ok(r.ok, "r.ok");
      if (r.ok) void store.release(r.lease);
      // Half the removed pods' blocks lapse before the next step; the others' are still live then.
      now += i % 2 === 0 ? ttl + 1 : 10;
    }
    const { workers, numbers } = store.prefixWorkers('p');
    assert.ok(workers <= 4, `workers numbered now: ${workers}`);
    assert.ok(numbers <= 5, `numbers ever needed at once: ${numbers}`);
    // The configured pods still match: releasing the others took nothing of theirs.
    const snap = store.cachedSnapshot({ pool: 'p', workers: ['pod-998', 'pod-999'], key: undefined, blocks: prompt(`sys${999 % 7}`) });
    assert.equal(snap.prefix.get('pod-999'), 12);
  });
});

describe('MemoryStore session lists under a small affinity capacity', () => {
  test('routing many sessions keeps each worker’s session list bounded by the affinity capacity', () => {
    const store = new MemoryStore({ maxAffinities: 10 });
    const workers = ['w1', 'w2'];
    for (let i = 0; i < 500; i++) {
      const r = store.commitSync(commitRequest({ workers, worker: workers[i % 2]!, key: `session-${i}` }));
      assert.ok(r.ok, "r.ok");
      if (r.ok) void store.release(r.lease);
    }
    // Read in place: coldSessions would prune forgotten keys as it lists them and hide a leak.
    const lists = (store as unknown as { sessions: Map<string, Map<string, Map<string, number>>> }).sessions.get('p');
    const sizes = workers.map((w) => lists?.get(w)?.size ?? 0);
    assert.ok(sizes.every((n) => n <= 10), `session list sizes ${sizes.join(', ')}`);
    assert.equal(sizes[0]! + sizes[1]!, 10, 'the 10 most recent sessions are listed');
  });
});
