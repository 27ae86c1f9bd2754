import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { decideKeys, PoolKeys, type DecideCommit, type DecideQuery } from '../../src/state/redis-commands.js';

/** DECIDE_LUA's KEYS as its header lists them, built the plain way (the oracle). */
function plainDecideKeys(keys: PoolKeys, q: DecideQuery, commit?: DecideCommit): string[] {
  const expected = commit?.preconditions.affinity;
  return [
    q.key === undefined ? keys.states : keys.affinity(q.key),
    keys.states,
    ...q.workers.map((w) => keys.inflight(w)),
    commit && q.blocks.length > 0 ? keys.recency(commit.worker) : keys.states,
    commit ? keys.sessions(commit.worker) : keys.states,
    expected !== undefined && commit ? keys.sessions(expected) : keys.states,
    ...(q.blocks.length > 0 ? q.workers.map((w) => keys.holdings(w)) : []),
  ];
}

function commitOn(worker: string, affinity: string | undefined): DecideCommit {
  return {
    worker,
    preconditions: { affinity, below: [], atOrAbove: [], states: [] },
    affinityTtlMs: 1000,
    leaseMember: 'id|k',
    leaseTtlMs: 1000,
    prefixTtlMs: 1000,
    capacityBlocks: 10,
    notAfter: 0,
  };
}

describe('DECIDE_LUA keys', () => {
  test('decideKeys lays out the keys exactly as the script header lists them, whatever the query', () => {
    const name = fc.string({ minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(
        fc.uniqueArray(name, { minLength: 1, maxLength: 20 }),
        fc.option(name, { nil: undefined }),
        fc.array(fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 16, maxLength: 16 }), { maxLength: 300 }),
        fc.nat(),
        fc.option(fc.nat(), { nil: undefined }),
        fc.boolean(),
        (workers, key, blocks, chosen, expected, isCommit) => {
          const keys = new PoolKeys('kv', 'pool-a');
          const q: DecideQuery = { workers, key, blocks };
          const commit = isCommit ? commitOn(workers[chosen % workers.length]!, expected === undefined ? undefined : workers[expected % workers.length]) : undefined;
          assert.deepEqual(decideKeys(keys, q, commit), plainDecideKeys(keys, q, commit));
        },
      ),
      { numRuns: 300 },
    );
  });

  test('the in-flight and block keys follow a changed worker list (kept per list, not per pool)', () => {
    const keys = new PoolKeys('kv', 'p');
    const a = ['w1', 'w2'];
    const b = ['w2', 'w3', 'w4'];
    const q = (workers: string[]): DecideQuery => ({ workers, key: undefined, blocks: ['b0', 'b1'] });
    assert.deepEqual(decideKeys(keys, q(a)), plainDecideKeys(keys, q(a)));
    assert.deepEqual(decideKeys(keys, q(b)), plainDecideKeys(keys, q(b)));
    assert.deepEqual(decideKeys(keys, q(a)), plainDecideKeys(keys, q(a)));
    // A new array with the same names (a config reload) gives the same keys.
    assert.deepEqual(decideKeys(keys, q([...b])), plainDecideKeys(keys, q(b)));
  });
});
