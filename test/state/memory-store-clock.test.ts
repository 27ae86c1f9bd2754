/**
 * MemoryStore's injected clock decides every expiry. A fake clock is moved by hand, with no real
 * time passing between readings, so an expiry read from any other clock (lru-cache's own, the
 * prefix index's default, a reading cached for a real millisecond) leaves an entry alive.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MemoryStore } from '../../src/state/memory-store.js';
import type { CommitRequest } from '../../src/state/store.js';
import { commitRequest } from '../helpers/commits.js';

const WORKERS = ['w1', 'w2'];
/** A prompt of many blocks, so the index walks a chain rather than one entry. */
const CHAIN = Array.from({ length: 8 }, (_, i) => `block-${i}`);

function commit(store: MemoryStore, over: Partial<CommitRequest>): void {
  const res = store.commitSync(commitRequest({ workers: WORKERS, worker: 'w1', affinityTtlMs: 1000, prefixTtlMs: 1000, ...over }));
  assert.ok(res.ok, 'commit accepted');
  void store.release(res.lease);
}

function fakeClock(start: number): { now: () => number; set: (t: number) => void } {
  let t = start;
  return { now: () => t, set: (v) => void (t = v) };
}

describe('MemoryStore on an injected clock', () => {
  test('an affinity lapses after its TTL of that clock, from time 0 on (a simulation starts there)', () => {
    const clock = fakeClock(0);
    const store = new MemoryStore({ now: clock.now });
    commit(store, { key: 's:a', affinityTtlMs: 1000 });
    const q = { pool: 'p', key: 's:a', workers: WORKERS, blocks: [] };
    clock.set(1000);
    assert.equal(store.cachedSnapshot(q).affinity, 'w1', 'held for the whole TTL');
    // No real time passes: a clock reading cached for a real millisecond would still say 1000.
    clock.set(1001);
    assert.equal(store.cachedSnapshot(q).affinity, undefined, 'gone one clock millisecond past it');
  });

  test('a migrated affinity keeps its remaining TTL on that clock', async () => {
    const clock = fakeClock(10_000);
    const store = new MemoryStore({ now: clock.now });
    commit(store, { key: 's:a', affinityTtlMs: 1000 });
    clock.set(10_600);
    const moved = await store.migrate('p', 'w1', [{ key: 's:a', to: 'w2' }], 'pressure', { affinityTtlMs: 60_000 });
    assert.equal(moved.length, 1);
    assert.equal(moved[0]!.time, 10_600, 'the offload event is stamped by the same clock');
    const q = { pool: 'p', key: 's:a', workers: WORKERS, blocks: [] };
    clock.set(11_000);
    assert.equal(store.cachedSnapshot(q).affinity, 'w2');
    clock.set(11_001);
    assert.equal(store.cachedSnapshot(q).affinity, undefined, 'the 400 ms it had left, not a fresh minute');
  });

  test('a prefix holding lapses after the prefix TTL of that clock (same chain and worker list: the index memo must not answer for an older instant)', () => {
    const clock = fakeClock(5_000);
    const store = new MemoryStore({ now: clock.now });
    commit(store, { blocks: CHAIN, prefixTtlMs: 2000 });
    const q = { pool: 'p', key: undefined, workers: WORKERS, blocks: CHAIN };
    clock.set(7_000);
    assert.equal(store.cachedSnapshot(q).prefix.get('w1'), CHAIN.length, 'every block held for the whole TTL');
    clock.set(7_001);
    assert.equal(store.cachedSnapshot(q).prefix.get('w1'), undefined, 'none past it');
  });

  test('a stored response lapses after its TTL of that clock', async () => {
    const clock = fakeClock(0);
    const store = new MemoryStore({ now: clock.now });
    await store.recordResponse('p', 'resp-hash', 'w2', 3_600_000);
    clock.set(3_600_000);
    assert.equal(await store.responseWorker('p', 'resp-hash'), 'w2');
    clock.set(3_600_001);
    assert.equal(await store.responseWorker('p', 'resp-hash'), undefined);
  });

  test('a lock is held for its TTL of that clock, and signal ages are read on it', async () => {
    const clock = fakeClock(0);
    const store = new MemoryStore({ now: clock.now });
    assert.equal(await store.tryLock('p', 'migrate:w1', 500), true);
    clock.set(499);
    assert.equal(await store.tryLock('p', 'migrate:w1', 500), false);
    clock.set(500);
    assert.equal(await store.tryLock('p', 'migrate:w1', 500), true);
    await store.publishSignals('p', 'w1', { signals: { running: 1, waiting: 0, kvUsage: 0.5 } });
    clock.set(750);
    assert.equal((await store.readSignals('p')).get('w1')?.ageMs, 250);
  });
});
