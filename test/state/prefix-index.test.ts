/**
 * The in-process prefix index on its own, with a clock the test moves: longest runs per worker,
 * recency (a block routed again is the last to go), capacity, TTL and forgetting.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PrefixIndex } from '../../src/state/prefix-index.js';

/** Applies a generated record or forget to the index and its reference alike; false for other ops. */
type RecordOrForget = { kind: 'record'; worker: string; blocks: readonly string[]; cap: number } | { kind: 'forget'; worker: string; blocks: readonly string[] };
function recordOrForget<O extends { kind: string }>(o: O, ix: PrefixIndex, ref: ReferenceIndex): o is Extract<O, RecordOrForget> {
  const op = o as unknown as RecordOrForget;
  if (op.kind === 'record') {
    ix.record(op.worker, op.blocks, op.cap);
    ref.record(op.worker, op.blocks, op.cap);
    return true;
  }
  if (op.kind === 'forget') {
    ix.forget(op.worker, op.blocks);
    ref.forget(op.worker, op.blocks);
    return true;
  }
  return false;
}

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

/**
 * The plainest model of what the index promises: per worker, its blocks in recency order (an
 * array, oldest first) bounded by capacity, each with when it was last routed; per block, its
 * holders in the order they took it; a sweep per worker at most once a second dropping expired
 * blocks from the old end. The index must agree with it on every match (depths and map order) and
 * every size, whatever its internal layout (numbered workers, lazy recency queues, next-block hints).
 */
class ReferenceIndex {
  private readonly workers = new Map<string, { cap: number; order: string[]; at: Map<string, number>; sweptAt?: number }>();
  private readonly holders = new Map<string, string[]>();
  constructor(
    private readonly ttl: number,
    private readonly now: () => number,
  ) {}

  record(worker: string, blocks: readonly string[], cap?: number): void {
    let w = this.workers.get(worker);
    if (!w) this.workers.set(worker, (w = { cap: Math.max(1, cap ?? 6250), order: [], at: new Map() }));
    else if (cap !== undefined) w.cap = Math.max(1, cap);
    while (w.order.length > w.cap) this.drop(worker, w.order[0]!);
    const now = this.now();
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      if (w.at.has(b)) w.order.splice(w.order.indexOf(b), 1);
      else this.holders.set(b, [...(this.holders.get(b) ?? []), worker]);
      w.order.push(b);
      w.at.set(b, now);
      if (w.order.length > w.cap) this.drop(worker, w.order[0]!);
    }
    if (w.sweptAt === undefined) w.sweptAt = now;
    else if (now - w.sweptAt >= Math.min(this.ttl, 1000)) {
      w.sweptAt = now;
      while (w.order.length > 0 && now - w.at.get(w.order[0]!)! > this.ttl) this.drop(worker, w.order[0]!);
    }
  }

  forget(worker: string, blocks: readonly string[]): void {
    const w = this.workers.get(worker);
    for (const b of blocks) if (w?.at.has(b)) this.drop(worker, b);
  }

  match(blocks: readonly string[], among?: readonly string[]): Array<[string, number]> {
    const now = this.now();
    const live = (w: string, b: string) => {
      const t = this.workers.get(w)?.at.get(b);
      return t !== undefined && now - t <= this.ttl;
    };
    const out: Array<[string, number]> = [];
    for (const w of this.holders.get(blocks[0] ?? '') ?? []) {
      if (!live(w, blocks[0]!) || (among !== undefined && !among.includes(w))) continue;
      let d = 0;
      while (d < blocks.length && live(w, blocks[d]!)) d++;
      out.push([w, d]);
    }
    return out;
  }

  size(worker: string): number {
    return this.workers.get(worker)?.order.length ?? 0;
  }

  clear(): void {
    this.workers.clear();
    this.holders.clear();
  }

  private drop(worker: string, b: string): void {
    const w = this.workers.get(worker)!;
    w.order.splice(w.order.indexOf(b), 1);
    w.at.delete(b);
    const h = this.holders.get(b)!.filter((x) => x !== worker);
    if (h.length > 0) this.holders.set(b, h);
    else this.holders.delete(b);
  }
}

describe('PrefixIndex against a reference model', () => {
  const WORKERS = ['w1', 'w2', 'w3', 'w4'] as const;

  test('any records (with capacities), forgets, clears and clock moves: the same matches, map order and sizes', async () => {
    const { default: fc } = await import('fast-check');
    // Chains over a small alphabet so blocks are shared, prefixes diverge and hints go wrong.
    const block = fc.constantFrom('a0', 'a1', 'a2', 'a3', 'b1', 'b2', 'c0', 'x');
    const chainArb = fc.array(block, { maxLength: 7 });
    const op = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('record' as const), worker: fc.constantFrom(...WORKERS), blocks: chainArb, cap: fc.option(fc.integer({ min: 0, max: 6 }), { nil: undefined }) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('forget' as const), worker: fc.constantFrom(...WORKERS, 'w9'), blocks: chainArb }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 700 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('match' as const), blocks: chainArb, among: fc.option(fc.subarray([...WORKERS]), { nil: undefined }) }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'clear' as const }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), fc.array(chainArb, { minLength: 1, maxLength: 4 }), (ops, queries) => {
        let now = 10_000;
        const ix = new PrefixIndex(1500, () => now);
        const ref = new ReferenceIndex(1500, () => now);
        const check = (q: readonly string[], among?: readonly string[]) => assert.deepEqual([...ix.match(q, among)], ref.match(q, among), `match ${q.join(',')}`);
        for (const o of ops) {
          if (recordOrForget(o, ix, ref)) continue;
          if (o.kind === 'tick') now += o.ms;
          else if (o.kind === 'match') check(o.blocks, o.among);
          else {
            ix.clear();
            ref.clear();
          }
          for (const w of WORKERS) assert.equal(ix.size(w), ref.size(w), `size of ${w}`);
        }
        for (const q of queries) check(q);
      }),
      { numRuns: 2000 },
    );
  });

  test('long runs that compact the recency queues (re-routed chains, evictions) keep exact LRU order', () => {
    let now = 0;
    const ix = new PrefixIndex(3_600_000, () => now);
    const ref = new ReferenceIndex(3_600_000, () => now);
    // Deterministic pseudo-random: chains of 40 blocks over 30 apps with 6 session tails each,
    // many times over, on capacities small enough to evict all the time.
    let seed = 7;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) % n;
    for (let r = 0; r < 4000; r++) {
      now += rnd(3);
      const app = rnd(30);
      const sess = rnd(6);
      const blocks = [...chain(`app${app}.`, 24), ...chain(`app${app}.s${sess}.`, 16)];
      const w = WORKERS[rnd(4)]!;
      const cap = w === 'w4' ? 50 : 400;
      ix.record(w, blocks, cap);
      ref.record(w, blocks, cap);
      if (r % 97 === 0) {
        const dropped = blocks.slice(rnd(40));
        ix.forget(w, dropped);
        ref.forget(w, dropped);
      }
      if (r % 50 === 0) for (let a = 0; a < 30; a++) for (let s = 0; s < 6; s++) {
        const q = [...chain(`app${a}.`, 24), ...chain(`app${a}.s${s}.`, 16)];
        assert.deepEqual([...ix.match(q)], ref.match(q), `round ${r}, app ${a}, session ${s}`);
      }
    }
    for (const w of WORKERS) assert.equal(ix.size(w), ref.size(w));
    assert.equal(ix.size('w4'), 50);
  });

  test('a worker does not grow its memory without bound, evicting new blocks or routing the same ones again', () => {
    const ix = new PrefixIndex(3_600_000);
    // The recency queue, the entries and the holder slots are internal; their lengths are what would leak.
    const inside = ix as unknown as { workers: Array<{ qLen: number; qBlock: Int32Array }>; entryCount: number; slotsTop: number };
    const queue = () => Math.max(inside.workers[0]!.qLen, inside.workers[0]!.qBlock.length);
    for (let r = 0; r < 3000; r++) ix.record('w1', chain(`u${r}.`, 16), 64);
    assert.equal(ix.size('w1'), 64);
    assert.ok(queue() < 64 * 3 + 2048, `queue of ${queue()} entries for 64 blocks after churn`);
    // Freed entries and slot regions are reused: at most the blocks held plus one record's worth.
    assert.ok(inside.entryCount <= 64 + 16, `${inside.entryCount} entries for 64 blocks after churn`);
    assert.ok(inside.slotsTop <= 3 * (64 + 16), `${inside.slotsTop} slot numbers for 64 blocks of one holder after churn`);
    for (let r = 0; r < 3000; r++) ix.record('w1', chain('same.', 16));
    assert.equal(ix.size('w1'), 64);
    assert.ok(queue() < 64 * 3 + 2048, `queue of ${queue()} entries for 64 blocks after re-routing one chain`);
  });

  test('blocks shared by many workers, then dropped by most, then shared again: the same matches as the reference', () => {
    // Holder slots grow from room for one holder to room for 16 and are moved each time; regions
    // and entries freed on the way are reused by the next blocks.
    let now = 0;
    const ix = new PrefixIndex(3_600_000, () => now);
    const ref = new ReferenceIndex(3_600_000, () => now);
    const workers = Array.from({ length: 16 }, (_, i) => `w${i}`);
    const slotsTop = () => (ix as unknown as { slotsTop: number }).slotsTop;
    let grown = 0;
    for (let round = 0; round < 24; round++) {
      if (round === 12) grown = slotsTop();
      const shared = chain(`sys${round % 2}.`, 12);
      for (const w of workers) {
        now++;
        const own = [...shared, ...chain(`${w}.r${round}.`, 4)];
        ix.record(w, own, 40);
        ref.record(w, own, 40);
      }
      for (const w of workers.slice(round % 3)) {
        const dropped = shared.slice(3 + (round % 4));
        ix.forget(w, dropped);
        ref.forget(w, dropped);
      }
      for (const q of [chain('sys0.', 12), chain('sys1.', 12), [...chain('sys0.', 12), ...chain('w3.r0.', 4)]]) {
        assert.deepEqual([...ix.match(q)], ref.match(q), `round ${round}: ${q[0]}`);
      }
      for (const w of workers) assert.equal(ix.size(w), ref.size(w), `round ${round}: size of ${w}`);
    }
    // The second dozen rounds hold what the first did: moved and freed slot regions are reused.
    assert.ok(slotsTop() <= grown * 1.05, `slot array ${grown} numbers after 12 rounds, ${slotsTop()} after 24`);
  });

  test('expiry: a block matches up to exactly the TTL, is swept after it, oldest first, and one routed again meanwhile stays', () => {
    let now = 0;
    const ix = new PrefixIndex(1000, () => now);
    ix.record('w1', chain('a', 3));
    now = 500;
    ix.record('w1', ['a0']); // routed again: a0 is now the most recent, 500 ms younger than a1, a2
    now = 1000;
    ix.record('w1', ['z0']); // a second after the first record: sweeps, but nothing is past the TTL yet
    assert.equal(ix.size('w1'), 4);
    assert.equal(ix.match(chain('a', 3)).get('w1'), 3, 'at exactly the TTL a block still matches');
    now = 1001;
    assert.equal(ix.match(chain('a', 3)).get('w1'), 1, 'past it, a1 and a2 stop matching at once; a0 was routed at 500');
    assert.equal(ix.size('w1'), 4, 'and stay counted until the next sweep');
    now = 1200;
    ix.record('w1', ['a0']); // 200 ms after the last sweep: no sweep
    now = 2000;
    ix.record('w1', ['y0']);
    assert.equal(ix.size('w1'), 3, 'the sweep dropped a2 and a1, stopped at z0 (exactly the TTL old), kept a0 (routed at 1200) and y0');
    assert.equal(ix.match(chain('a', 3)).get('w1'), 1);
    assert.equal(ix.match(['z0']).get('w1'), 1);
  });

  test("a block that left the index and came back by another chain is matched through the new holders, not the old chain's memory of it", () => {
    const ix = new PrefixIndex(60_000);
    const a = chain('a', 3);
    ix.record('w1', a); // a0 → a1 → a2, remembered as a chain
    ix.forget('w1', ['a1', 'a2']); // a1 and a2 leave the index: nobody holds them
    ix.record('w2', ['z0', 'a1', 'a2']); // they come back, reached through another block
    ix.record('w2', ['a0']);
    assert.deepEqual(Object.fromEntries(ix.match(a)), { w1: 1, w2: 3 });
    ix.record('w3', a); // and a record along the old chain joins the live entries
    assert.deepEqual(Object.fromEntries(ix.match(a)), { w1: 1, w2: 3, w3: 3 });
    ix.forget('w2', ['z0', 'a1', 'a2']);
    assert.deepEqual(Object.fromEntries(ix.match(a)), { w1: 1, w2: 1, w3: 3 });
  });
});

describe('PrefixIndex releasing workers gone from the config', () => {
  test('a worker removed from the config is released once its blocks lapse, and its number reused', () => {
    let now = 0;
    const ix = new PrefixIndex(1_000, () => now);
    const first = ['w1', 'w2'];
    ix.configure(first);
    ix.record('w1', chain('a', 8), 100);
    ix.record('w2', chain('b', 8), 100);
    ix.configure(['w2', 'w3']); // w1 removed while its blocks are live: kept, still matched without a list
    ix.record('w3', chain('c', 8), 100);
    assert.deepEqual(ix.numberedWorkers(), { workers: 3, numbers: 3 });
    assert.equal(ix.match(chain('a', 8)).get('w1'), 8);
    assert.equal(ix.match(chain('a', 8), first).get('w1'), 8); // (first's worker mask is built now, with w1's number)
    now += 1_001; // w1's blocks lapse (and everyone else's)
    ix.configure(['w2', 'w3', 'w4']); // looks for the gone: w1 is released
    assert.deepEqual(ix.numberedWorkers(), { workers: 2, numbers: 3 });
    assert.equal(ix.size('w1'), 0);
    assert.equal(ix.match(chain('a', 8)).size, 0);
    ix.record('w4', chain('a', 8), 3); // takes w1's number: no new one, and none of w1's blocks
    assert.deepEqual(ix.numberedWorkers(), { workers: 3, numbers: 3 });
    // Its own three most recent blocks (the chain's root), counted against its capacity: not w1's eight.
    assert.equal(ix.size('w4'), 3);
    assert.deepEqual(Object.fromEntries(ix.match(chain('a', 8))), { w4: 3 });
    // A list that named w1 does not name w4, which now has w1's number.
    assert.equal(ix.match(chain('a', 8), first).size, 0);
    ix.forget('w2', chain('b', 8));
    ix.configure(['w3', 'w4']); // w2 holds nothing: released at once
    assert.deepEqual(ix.numberedWorkers(), { workers: 2, numbers: 3 });
    assert.equal(ix.match(chain('b', 8)).size, 0);
  });

  test('a removed worker is not released at exactly the TTL, only past it', () => {
    let now = 0;
    const ix = new PrefixIndex(1_000, () => now);
    ix.configure(['w1', 'w2']);
    ix.record('w1', chain('a', 4), 100);
    ix.record('w2', chain('b', 4), 100);
    ix.configure(['w2']);
    now = 1_000; // exactly the TTL since w1's last record
    ix.configure(['w2', 'w3']);
    assert.deepEqual(ix.numberedWorkers(), { workers: 2, numbers: 2 }, 'w1 kept at the TTL itself');
    now = 1_001;
    ix.configure(['w2']);
    assert.deepEqual(ix.numberedWorkers(), { workers: 1, numbers: 2 }, 'released past it');
  });

  test('churn: 1,000 worker ids routed and dropped keep the per-worker storage bounded', () => {
    let now = 0;
    const ix = new PrefixIndex(2_000, () => now);
    for (let i = 0; i < 1_000; i++) {
      ix.configure([`pod-${i}`]);
      ix.record(`pod-${i}`, chain(`s${i % 5}-`, 16), 200);
      if (i % 3 === 0) ix.forget(`pod-${i}`, chain(`s${i % 5}-`, 16)); // an engine's eviction empties some
      now += i % 2 === 0 ? 2_001 : 5;
    }
    const { workers, numbers } = ix.numberedWorkers();
    assert.ok(workers <= 3, `workers numbered: ${workers}`);
    assert.ok(numbers <= 4, `numbers needed at once: ${numbers}`);
  });

  test('a released number given to a new worker never carries the old one\'s blocks', async () => {
    const { default: fc } = await import('fast-check');
    const NAMES = ['w1', 'w2', 'w3', 'w4', 'w5', 'w6'];
    // Lists kept across the run (their worker masks too), matched after numbers changed hands.
    const LISTS: ReadonlyArray<readonly string[]> = [NAMES, ['w1', 'w2'], ['w2', 'w5'], ['w3'], ['w4', 'w6']];
    const block = fc.constantFrom('a0', 'a1', 'a2', 'a3', 'b1', 'b2', 'c0', 'x');
    const chainArb = fc.array(block, { maxLength: 7 });
    const op = fc.oneof(
      // Capacities always given, as the gate gives them: a released worker's capacity is not kept.
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('record' as const), worker: fc.constantFrom(...NAMES), blocks: chainArb, cap: fc.integer({ min: 1, max: 3 }) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('forget' as const), worker: fc.constantFrom(...NAMES), blocks: chainArb }) },
      // Small steps, and steps past the TTL (everything lapses: who is gone is released).
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.oneof(fc.integer({ min: 0, max: 600 }), fc.constant(1_501)) }) },
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('configure' as const), workers: fc.subarray(NAMES) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('match' as const), blocks: chainArb, list: fc.integer({ min: 0, max: LISTS.length - 1 }) }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 50 }), fc.array(chainArb, { minLength: 1, maxLength: 4 }), (ops, queries) => {
        let now = 10_000;
        const ix = new PrefixIndex(1500, () => now);
        // The reference never releases anyone: released workers held only lapsed blocks, so every
        // match (with the pool's list, and without) must be the same depths.
        const ref = new ReferenceIndex(1500, () => now);
        let pool: readonly string[] = NAMES;
        const check = (q: readonly string[], list?: readonly string[]) => {
          for (const among of [pool, list, undefined]) {
            assert.deepEqual(Object.fromEntries(ix.match(q, among)), Object.fromEntries(ref.match(q, among)), `match ${q.join(',')} among ${among?.join(',') ?? 'all'}`);
          }
        };
        for (const o of ops) {
          if (recordOrForget(o, ix, ref)) continue;
          if (o.kind === 'tick') now += o.ms;
          else if (o.kind === 'configure') ix.configure((pool = [...o.workers]));
          else check(o.blocks, LISTS[o.list]);
        }
        for (const q of queries) check(q);
      }),
      { numRuns: 2000 },
    );
  });
});
