import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import { DeadlineQueue } from '../../src/state/redis-deadlines.js';

describe('DeadlineQueue: every decision deadline on one timer', () => {
  test('an unsettled deadline lapses once, no earlier than its timeout; a settled one never does', async () => {
    const q = new DeadlineQueue(40);
    const lapsedAt: Array<[number, number]> = [];
    const setAt: number[] = [];
    // Deadlines set at different times, settled or not in an interleaved pattern, so the one timer
    // must be re-armed for later heads and skip settled ones in the middle of the queue.
    const ds = [];
    for (let i = 0; i < 12; i++) {
      setAt.push(performance.now());
      ds.push(q.add(() => lapsedAt.push([i, performance.now()])));
      await sleep(7);
      if (i % 3 === 1) assert.equal(q.settle(ds[i - 1]!), true, 'settled in time');
    }
    await sleep(120);
    const lapsed = lapsedAt.map(([i]) => i);
    // Settled: 0, 3, 6, 9 (each settled when 1, 4, 7, 10 was set). Everything else lapses.
    assert.deepEqual(lapsed, [1, 2, 4, 5, 7, 8, 10, 11]);
    for (const [i, at] of lapsedAt) assert.ok(at - setAt[i]! >= 40 - 1, `deadline ${i} lapsed after ${at - setAt[i]!} ms, before its 40 ms`);
    // Lapsed and settled deadlines stay so.
    assert.equal(q.settle(ds[1]!), false, 'a lapsed deadline cannot be settled');
    assert.equal(q.settle(ds[0]!), false, 'settled once');
    assert.equal(q.pending, 0);
  });

  test('a deadline added after the queue emptied gets a timer again', async () => {
    const q = new DeadlineQueue(10);
    let n = 0;
    q.add(() => n++);
    await sleep(40);
    assert.equal(n, 1);
    const t0 = performance.now();
    let at = 0;
    q.add(() => (at = performance.now()));
    await sleep(60);
    assert.ok(at > 0, 'lapsed');
    assert.ok(at - t0 >= 9, `lapsed ${at - t0} ms after being set`);
  });

  test('many deadlines, most settled: each unsettled one lapses exactly once', async () => {
    const q = new DeadlineQueue(20);
    const count = new Map<number, number>();
    const ds = [];
    for (let i = 0; i < 3000; i++) {
      ds.push(q.add(() => count.set(i, (count.get(i) ?? 0) + 1)));
      if (i % 500 === 499) {
        // Settled before their timeout (same synchronous step), in batches set at different times.
        for (let j = i - 499; j <= i; j++) if (j % 7 !== 0) assert.equal(q.settle(ds[j]!), true);
        await sleep(3);
      }
    }
    await sleep(80);
    assert.deepEqual([...count.keys()].sort((a, b) => a - b), [...Array(3000).keys()].filter((i) => i % 7 === 0));
    assert.ok([...count.values()].every((c) => c === 1));
  });
});
