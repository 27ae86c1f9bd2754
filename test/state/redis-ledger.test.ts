/**
 * The Redis store's ledger moves each lease along the diagram in docs/DESIGN.md ("The Redis
 * store's ledger") and nowhere else: local → shared (resync) → releasing → gone or unreleased → gone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RedisLedger } from '../../src/state/redis-ledger.js';
import type { Lease } from '../../src/state/store.js';

const lease = (id: string, pool = 'p', worker = 'w1'): Lease => ({ id, pool, worker, shared: false });
/** The lease TTL: Redis lapses a lease no renewal reached for this long. */
const TTL = 30_000;

test('a local lease counts locally until a resync shares it; released first, it is never shared', () => {
  const l = new RedisLedger(10, TTL);
  const a = lease('a');
  const b = lease('b');
  l.addLocal(a);
  l.addLocal(b);
  assert.equal(l.localCount('p', 'w1'), 2);
  assert.equal(l.behind, true);
  assert.deepEqual([...l.poolsBehind()], ['p']);
  // b ends while the resync's pipeline runs: only a becomes shared.
  const snapshot = l.localLeases('p');
  assert.equal(l.release('b'), 'local');
  l.shareLocal(snapshot);
  assert.equal(l.isShared('a'), true);
  assert.equal(l.isShared('b'), false);
  assert.equal(l.localCount('p', 'w1'), 0);
  assert.equal(l.behind, false);
  assert.deepEqual(l.sharedLeases('p'), [a]);
});

test('a shared lease whose removal failed is retried until Redis confirms it, and is released only once', () => {
  const l = new RedisLedger(10, TTL);
  const a = lease('a');
  l.addShared(a);
  assert.equal(l.release('a'), 'shared');
  assert.equal(l.release('a'), undefined, 'a second release is a no-op');
  l.releaseFailed(a);
  assert.deepEqual(l.unreleasedLeases(), [a]);
  assert.deepEqual(l.sharedLeases(), [], 'not renewed any more');
  l.removedFromRedis(['a']);
  assert.deepEqual(l.unreleasedLeases(), []);
});

test('a released shared lease waits for a command of its own pool that names its worker; a failed one is retried, in one state only', () => {
  const l = new RedisLedger(10, TTL);
  const [a, b, c, d] = [lease('a'), lease('b', 'p', 'w2'), lease('c', 'other'), lease('d')];
  for (const x of [a, b, c, d]) l.addShared(x);
  for (const x of [a, b, c, d]) assert.equal(l.release(x.id), 'shared');
  assert.equal(l.releasingCount, 4);
  assert.deepEqual(l.sharedLeases(), [], 'none is renewed any more');
  // A command to pool p naming only w1 carries a and d (at most 1 here: then a alone).
  assert.deepEqual(l.takeReleasing('p', new Set(['w1']), 1), [a]);
  assert.deepEqual(l.takeReleasing('p', new Set(['w1'])), [d]);
  assert.equal(l.release('a'), undefined, 'taken out: released only once');
  // The flush takes whatever is left, of every pool.
  assert.deepEqual(l.takeReleasing(), [b, c]);
  assert.equal(l.releasingCount, 0);
  // The command carrying d failed: d is retried, and only as unreleased.
  l.releaseFailed(d);
  assert.deepEqual(l.unreleasedLeases(), [d]);
  assert.deepEqual(l.drainForClose(), [d]);
});

test('closing hands back every lease Redis may still count, and empties the ledger', () => {
  const l = new RedisLedger(10, TTL);
  l.addShared(lease('s'));
  l.addShared(lease('u'));
  l.release('u');
  l.releaseFailed(lease('u'));
  l.addShared(lease('r'));
  l.release('r'); // releasing: no command has carried it yet
  l.addLocal(lease('local'));
  assert.deepEqual(l.drainForClose().map((x) => x.id).sort(), ['r', 's', 'u']);
  assert.equal(l.releasingCount, 0);
  assert.deepEqual(l.sharedLeases(), []);
  assert.deepEqual(l.unreleasedLeases(), []);
});

test('a locally decided affinity is written back once, unless decided again meanwhile; expired ones are not', () => {
  const l = new RedisLedger(10, TTL);
  const first = { pool: 'p', key: 's:x', worker: 'w1', expiresAt: Date.now() + 60_000 };
  l.decidedLocally('p\u0000s:x', first);
  l.decidedLocally('p\u0000s:old', { pool: 'p', key: 's:old', worker: 'w1', expiresAt: Date.now() - 1 });
  assert.deepEqual(l.unsyncedAffinities('p', Date.now()).map(([, u]) => u.key), ['s:x']);
  // Decided again (another worker) while the write-back ran: the newer one stays to be written.
  const second = { ...first, worker: 'w2' };
  l.decidedLocally('p\u0000s:x', second);
  l.affinityWritten('p\u0000s:x', first);
  assert.deepEqual(l.unsyncedAffinities('p', Date.now()).map(([, u]) => u.worker), ['w2']);
  l.affinityWritten('p\u0000s:x', second);
  assert.deepEqual(l.unsyncedAffinities('p', Date.now()), []);
});

test('a lease a renewal added back after its release is removed again unless it is held or its removal is still to go', () => {
  const l = new RedisLedger(10, TTL);
  const [held, pending, gone] = [lease('held'), lease('pending'), lease('gone')];
  for (const x of [held, pending, gone]) l.addShared(x);
  l.release('pending');
  l.release('gone');
  assert.deepEqual(l.takeReleasing('p', new Set(['w1']), 1), [pending]);
  l.releaseFailed(pending);
  assert.deepEqual(l.takeReleasing(), [gone]);
  l.removedFromRedis([]);
  // gone's removal ran before a renewal sent earlier added it back.
  for (const x of [held, pending, gone]) l.mustRemove(x);
  assert.deepEqual(l.unreleasedLeases(), [pending, gone], 'retried on each refresh');
  assert.deepEqual(l.sharedLeases(), [held], 'a lease still held stays shared');
  const still = lease('still');
  l.addShared(still);
  l.release('still');
  l.mustRemove(still);
  assert.deepEqual(l.unreleasedLeases(), [pending, gone], 'one state only: its removal is still to be sent');
});

test('a lease a timed-out commit may have written is removed like a released one, and retried if that fails', () => {
  const l = new RedisLedger(10, TTL);
  const orphan = lease('orphan');
  l.takeBack(orphan);
  assert.deepEqual(l.sharedLeases(), [], 'nobody holds it: never renewed');
  assert.equal(l.release('orphan'), undefined, 'nor released by a request');
  assert.deepEqual(l.takeReleasing('p', new Set(['w1'])), [orphan], 'rides on the next command to its pool');
  l.releaseFailed(orphan);
  assert.deepEqual(l.unreleasedLeases(), [orphan]);
  l.removedFromRedis(['orphan']);
  assert.deepEqual(l.unreleasedLeases(), []);
});

test('a lease whose removal Redis keeps refusing is dropped once Redis has lapsed it: a lease TTL after it left the held leases', () => {
  const l = new RedisLedger(10, TTL);
  const [released, orphan, back] = [lease('released'), lease('orphan'), lease('back')];
  l.addShared(released);
  const t0 = Date.now();
  l.release('released');
  l.takeBack(orphan);
  assert.deepEqual(l.takeReleasing(), [released, orphan]);
  l.releaseFailed(released);
  l.releaseFailed(orphan);
  l.mustRemove(back);
  assert.deepEqual(l.unreleasedLeases(t0 + TTL - 1000), [released, orphan, back], 'retried while Redis may still count them');
  assert.deepEqual(l.unreleasedLeases(Date.now() + TTL), [], 'lapsed in Redis: nothing left to retry');
  assert.deepEqual(l.drainForClose(), [], 'and gone from the ledger');
});

test('the releases to retry come oldest first, at most as many as asked for', () => {
  const l = new RedisLedger(10, TTL);
  const all = ['a', 'b', 'c'].map((id) => lease(id));
  for (const x of all) l.mustRemove(x);
  assert.equal(l.unreleasedCount, 3);
  assert.deepEqual(l.unreleasedLeases(Date.now(), 2), all.slice(0, 2));
  assert.deepEqual(l.unreleasedLeases(), all);
});
