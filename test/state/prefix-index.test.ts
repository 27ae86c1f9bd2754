/**
 * The in-process prefix index on its own, with a clock the test moves: longest runs per worker,
 * recency (a block routed again is the last to go), capacity, TTL and forgetting.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PrefixIndex } from '../../src/state/prefix-index.js';

const chain = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `${tag}${i}`);

describe('PrefixIndex', () => {
  test('matches the longest leading run per worker and stops at the first block nobody holds', () => {
    const ix = new PrefixIndex(60_000);
    ix.record('w1', chain('a', 6));
    ix.record('w2', chain('a', 3));
    ix.record('w3', ['x0', 'a1', 'a2']); // holds later blocks but not the root: no prefix
    assert.deepEqual(Object.fromEntries(ix.match(chain('a', 8))), { w1: 6, w2: 3 });
    assert.equal(ix.match(['b0', 'a1']).size, 0);
  });

  test('past capacity the least recently routed blocks go first; a chain keeps its root longest', () => {
    const ix = new PrefixIndex(60_000);
    ix.record('w1', chain('a', 4), 6);
    ix.record('w1', chain('b', 4)); // 8 blocks for 6 places: a's two deepest blocks go
    assert.equal(ix.size('w1'), 6);
    assert.equal(ix.match(chain('a', 4)).get('w1'), 2);
    assert.equal(ix.match(chain('b', 4)).get('w1'), 4);
    ix.record('w1', chain('a', 2)); // routed again: a's root is now the most recent
    ix.record('w1', chain('c', 3));
    assert.equal(ix.match(chain('a', 4)).get('w1'), 2, 'a kept its root');
    assert.equal(ix.match(chain('b', 4)).get('w1') ?? 0, 1, 'b lost all but its root');
    ix.record('w1', [], 2); // a smaller capacity applies at once
    assert.equal(ix.size('w1'), 2);
  });

  test('blocks not routed to for the TTL stop matching and leave the index', () => {
    let now = 1_000;
    const ix = new PrefixIndex(500, () => now);
    ix.record('w1', chain('a', 3));
    now += 400;
    ix.record('w2', chain('a', 2));
    assert.deepEqual(Object.fromEntries(ix.match(chain('a', 3))), { w1: 3, w2: 2 });
    now += 200; // w1's blocks are 600 ms old, w2's 200 ms
    assert.deepEqual(Object.fromEntries(ix.match(chain('a', 3))), { w2: 2 });
    ix.record('w1', ['z0']); // the next record drops what expired
    assert.equal(ix.size('w1'), 1);
  });

  test('forgotten blocks (an engine eviction) no longer match; the worker keeps the rest', () => {
    const ix = new PrefixIndex(60_000);
    ix.record('w1', chain('a', 5));
    ix.record('w2', chain('a', 5));
    ix.forget('w1', ['a2']);
    assert.deepEqual(Object.fromEntries(ix.match(chain('a', 5))), { w1: 2, w2: 5 });
    ix.forget('w2', chain('a', 5));
    assert.equal(ix.size('w2'), 0);
    assert.deepEqual(Object.fromEntries(ix.match(chain('a', 5))), { w1: 2 });
    ix.clear();
    assert.equal(ix.match(chain('a', 5)).size, 0);
  });
});

describe('PrefixIndex.match against a per-worker reference', () => {
  test('any records, expiries and chains: the same depths, in the same map order', async () => {
    const { default: fc } = await import('fast-check');
    const block = fc.constantFrom('a0', 'a1', 'a2', 'a3', 'b0', 'b1', 'x');
    const op = fc.record({ worker: fc.constantFrom('w1', 'w2', 'w3', 'w4'), blocks: fc.array(block, { maxLength: 6 }), advance: fc.integer({ min: 0, max: 40 }) });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 12 }), fc.array(block, { maxLength: 8 }), (ops, query) => {
        let now = 0;
        const ix = new PrefixIndex(50, () => now);
        for (const o of ops) {
          now += o.advance;
          ix.record(o.worker, o.blocks);
        }
        // Reference: the first block's live holders, in the index's order, each walked alone.
        const got = [...ix.match(query)];
        const first = query.length > 0 ? ix.match(query.slice(0, 1)) : new Map<string, number>();
        const want: Array<[string, number]> = [];
        for (const w of first.keys()) {
          let d = 0;
          while (d < query.length && ix.match(query.slice(d, d + 1)).has(w)) d++;
          want.push([w, d]);
        }
        assert.deepEqual(got, want);
      }),
      { numRuns: 500 },
    );
  });
});

describe('PrefixIndex.match memo', () => {
  test('the same chain matched again answers afresh after a record, a forget, a clear or a tick, and callers own their map', () => {
    let now = 0;
    const ix = new PrefixIndex(100, () => now);
    const q = chain('a', 4);
    ix.record('w1', chain('a', 4));
    const first = ix.match(q);
    assert.deepEqual(Object.fromEntries(first), { w1: 4 });
    first.set('w9', 9); // a caller's change stays its own, whether its map was walked or remembered
    const second = ix.match(q);
    assert.deepEqual(Object.fromEntries(second), { w1: 4 });
    second.set('w8', 8);
    assert.deepEqual(Object.fromEntries(ix.match(q)), { w1: 4 });
    ix.record('w2', chain('a', 2));
    assert.deepEqual(Object.fromEntries(ix.match(q)), { w1: 4, w2: 2 }, 'after record');
    ix.forget('w1', ['a2']);
    assert.deepEqual(Object.fromEntries(ix.match(q)), { w1: 2, w2: 2 }, 'after forget');
    now = 101; // w1 and w2 were routed at 0: past the TTL
    assert.equal(ix.match(q).size, 0, 'after the TTL');
    now = 0;
    ix.clear();
    assert.equal(ix.match(q).size, 0, 'after clear');
  });
});
