/**
 * The store contract: every RoutingStore backend must pass this same suite. Memory and Redis run it
 * in memory-store.test.ts and redis-store.test.ts (Redis against a real redis-server).
 */
import assert from 'node:assert/strict';
import { describe, test, before, after } from 'node:test';
import type { Preconditions } from '../../src/routing/types.js';
import type { CommitRequest, RoutingStore } from '../../src/state/store.js';
import { NO_PRECONDITIONS } from '../helpers/commits.js';

export interface StoreFixture {
  store: RoutingStore;
  cleanup(): Promise<void>;
}

const WORKERS = ['w1', 'w2', 'w3'] as const;

let seq = 0;
/** Each test uses its own pool, so tests never see each other's state. */
function pool(): string {
  return `pool-${process.pid}-${++seq}`;
}

function req(p: string, key: string | undefined, worker: string, pre: Partial<Preconditions> = {}, ttlMs = 60_000, blocks: string[] = [], extra: Partial<CommitRequest> = {}): CommitRequest {
  return { pool: p, key, workers: WORKERS, blocks, worker, preconditions: { ...NO_PRECONDITIONS, ...pre }, affinityTtlMs: ttlMs, prefixTtlMs: 60_000, capacityBlocks: 1000, ...extra };
}

function q(p: string, key: string | undefined, blocks: string[] = []) {
  return { pool: p, key, workers: WORKERS, blocks };
}

const chain = (tag: string, n: number, from = 0) => Array.from({ length: n }, (_, i) => `${tag}${i + from}`);

export function storeContract(name: string, make: () => Promise<StoreFixture>): void {
  describe(`store contract: ${name}`, () => {
    let fx: StoreFixture;
    let store: RoutingStore;
    before(async () => {
      fx = await make();
      store = fx.store;
    });
    after(async () => fx.cleanup());

    test('an unknown key has no affinity and an idle pool has no load', async () => {
      const s = await store.snapshot(q(pool(), 's:abc'));
      assert.equal(s.affinity, undefined);
      for (const w of WORKERS) assert.equal(s.inflight.get(w) ?? 0, 0);
      assert.equal(s.states.size, 0);
    });

    test('a commit records affinity and takes one in-flight lease; release gives it back', async () => {
      const p = pool();
      const res = await store.commit(req(p, 's:abc', 'w2', { below: [{ worker: 'w2', limit: 10 }] }));
      assert.ok(res.ok, "res.ok");
      assert.equal(res.lease.worker, 'w2');
      assert.equal(res.degraded, false);
      const s = await store.snapshot(q(p, 's:abc'));
      assert.equal(s.affinity, 'w2');
      assert.equal(s.inflight.get('w2'), 1);
      await store.release(res.lease);
      await store.release(res.lease); // a second release is harmless
      const after = await store.snapshot(q(p, 's:abc'));
      assert.equal(after.inflight.get('w2') ?? 0, 0);
      assert.equal(after.affinity, 'w2', 'affinity outlives the request');
    });

    test('a commit whose expected affinity is stale fails and returns the real one', async () => {
      const p = pool();
      assert.ok((await store.commit(req(p, 's:k', 'w1'))).ok);
      const res = await store.commit(req(p, 's:k', 'w3', { affinity: undefined }));
      assert.equal(res.ok, false);
      assert.equal(res.snapshot.affinity, 'w1');
      const again = await store.commit(req(p, 's:k', 'w3', { affinity: 'w1' }));
      assert.ok(again.ok, 'with the right expectation the same commit succeeds');
      assert.equal((await store.snapshot(q(p, 's:k'))).affinity, 'w3');
    });

    test('a commit fails when its target reached the limit it relied on', async () => {
      const p = pool();
      assert.ok((await store.commit(req(p, undefined, 'w1'))).ok);
      assert.ok((await store.commit(req(p, undefined, 'w1'))).ok);
      const res = await store.commit(req(p, 's:x', 'w1', { below: [{ worker: 'w1', limit: 2 }] }));
      assert.equal(res.ok, false);
      assert.equal(res.snapshot.inflight.get('w1'), 2);
      assert.equal((await store.snapshot(q(p, 's:x'))).affinity, undefined, 'a failed commit writes nothing');
    });

    test('a migration fails when the worker it left is no longer full', async () => {
      const p = pool();
      const res = await store.commit(req(p, 's:m', 'w2', { atOrAbove: [{ worker: 'w1', limit: 1 }] }));
      assert.equal(res.ok, false);
    });

    test('a commit fails when its target left the state it relied on', async () => {
      const p = pool();
      await store.setWorkerState(p, 'w2', 'draining');
      const res = await store.commit(req(p, 's:st', 'w2', { states: [{ worker: 'w2', in: ['healthy'] }] }));
      assert.equal(res.ok, false);
      assert.equal(res.snapshot.states.get('w2'), 'draining');
      const ok = await store.commit(req(p, 's:st', 'w1', { states: [{ worker: 'w1', in: ['healthy'] }, { worker: 'w2', in: ['draining'] }] }));
      assert.ok(ok.ok, "ok.ok");
    });

    test('unkeyed commits take leases without touching affinity', async () => {
      const p = pool();
      const res = await store.commit(req(p, undefined, 'w3'));
      assert.ok(res.ok, "res.ok");
      const s = await store.snapshot(q(p, undefined));
      assert.equal(s.inflight.get('w3'), 1);
      assert.equal(s.affinity, undefined);
      await store.release(res.lease);
    });

    test('worker states are recorded, shared and cleared', async () => {
      const p = pool();
      await store.setWorkerState(p, 'w2', 'draining');
      await store.setWorkerState(p, 'w3', 'down');
      let s = await store.snapshot(q(p, undefined));
      assert.equal(s.states.get('w2'), 'draining');
      assert.equal(s.states.get('w3'), 'down');
      await store.setWorkerState(p, 'w2', 'healthy');
      await store.setWorkerState(p, 'w3', undefined);
      s = await store.snapshot(q(p, undefined));
      assert.equal(s.states.size, 0);
    });

    test('affinity expires after its TTL', async () => {
      const p = pool();
      assert.ok((await store.commit(req(p, 's:ttl', 'w1', {}, 150))).ok);
      assert.equal((await store.snapshot(q(p, 's:ttl'))).affinity, 'w1');
      await new Promise((r) => setTimeout(r, 400));
      assert.equal((await store.snapshot(q(p, 's:ttl'))).affinity, undefined);
    });

    test('racing commits never push a worker past the limit they check', async () => {
      const p = pool();
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => store.commit(req(p, `s:r${i}`, 'w1', { below: [{ worker: 'w1', limit: 7 }] }))),
      );
      assert.equal(results.filter((r) => r.ok).length, 7);
      assert.equal((await store.snapshot(q(p, undefined))).inflight.get('w1'), 7);
      for (const r of results) if (r.ok) await store.release(r.lease);
      assert.equal((await store.snapshot(q(p, undefined))).inflight.get('w1') ?? 0, 0);
    });

    test('pools are independent', async () => {
      const a = pool();
      const b = pool();
      assert.ok((await store.commit(req(a, 's:same', 'w1'))).ok);
      const s = await store.snapshot(q(b, 's:same'));
      assert.equal(s.affinity, undefined);
      assert.equal(s.inflight.get('w1') ?? 0, 0);
    });

    test('the prefix index learns from commits and matches the longest shared run of blocks', async () => {
      const p = pool();
      const sys = chain('sys', 6);
      assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, [...sys, ...chain('u1-', 4)]))).ok);
      assert.ok((await store.commit(req(p, undefined, 'w2', {}, 60_000, sys.slice(0, 3)))).ok);
      const s = await store.snapshot(q(p, undefined, [...sys, ...chain('u2-', 4)]));
      assert.equal(s.prefix.get('w1'), 6, 'w1 holds the whole shared system prompt');
      assert.equal(s.prefix.get('w2'), 3);
      assert.equal(s.prefix.get('w3') ?? 0, 0);
      const other = await store.snapshot(q(p, undefined, chain('zzz', 5)));
      assert.equal(other.prefix.size, 0, 'an unrelated prompt matches nothing');
    });

    test('a worker keeps at most its capacity in blocks, losing the deepest first', async () => {
      const p = pool();
      const blocks = chain('b', 6);
      assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, blocks, { capacityBlocks: 4 }))).ok);
      assert.equal((await store.snapshot(q(p, undefined, blocks))).prefix.get('w1'), 4);
    });

    test('blocks of another prompt evicted past a worker’s capacity stop matching on it, not on others', async () => {
      const p = pool();
      const older = chain('older', 4);
      const newer = chain('newer', 4);
      assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, older, { capacityBlocks: 4 }))).ok);
      assert.ok((await store.commit(req(p, undefined, 'w2', {}, 60_000, older, { capacityBlocks: 4 }))).ok);
      // Distinct milliseconds: recency is kept to the millisecond, and within one the Redis store
      // orders blocks by name, so a fast machine could keep two of the older prompt's blocks.
      await new Promise((r) => setTimeout(r, 3));
      assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, newer, { capacityBlocks: 4 }))).ok);
      const s = await store.snapshot(q(p, undefined, older));
      assert.equal(s.prefix.get('w1') ?? 0, 0, 'w1 had room for the newer prompt only');
      assert.equal(s.prefix.get('w2'), 4, 'w2 still holds the older one');
      assert.equal((await store.snapshot(q(p, undefined, newer))).prefix.get('w1'), 4);
    });

    test('a prompt routed again counts as the most recent for capacity: the one routed in between goes first', async () => {
      // Past the freshness window: the Redis store leaves a prefix recorded less than a thousandth
      // of the prefix TTL ago as it is (its rank too), which a test of its own shows; the memory
      // store's LRU moves it up at once. The TTL here is 20 s, so the window is 20 ms.
      const p = pool();
      const [a, b, c] = [chain('lruA', 4), chain('lruB', 4), chain('lruC', 4)];
      for (const blocks of [a, b, a, c]) {
        assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, blocks, { capacityBlocks: 8, prefixTtlMs: 20_000 }))).ok);
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.equal((await store.snapshot(q(p, undefined, a))).prefix.get('w1'), 4, 'routed again: kept');
      assert.equal((await store.snapshot(q(p, undefined, b))).prefix.get('w1') ?? 0, 0, 'the least recently routed went');
      assert.equal((await store.snapshot(q(p, undefined, c))).prefix.get('w1'), 4);
    });

    test('prefix blocks expire after their TTL', async () => {
      const p = pool();
      const blocks = chain('t', 3);
      assert.ok((await store.commit(req(p, undefined, 'w2', {}, 60_000, blocks, { prefixTtlMs: 150 }))).ok);
      assert.equal((await store.snapshot(q(p, undefined, blocks))).prefix.get('w2'), 3);
      await new Promise((r) => setTimeout(r, 400));
      assert.equal((await store.snapshot(q(p, undefined, blocks))).prefix.get('w2') ?? 0, 0);
    });

    test('a commit that missed a deeper prefix match elsewhere fails and returns it', async () => {
      const p = pool();
      const blocks = chain('deep', 5);
      assert.ok((await store.commit(req(p, undefined, 'w3', {}, 60_000, blocks))).ok);
      const res = await store.commit(req(p, undefined, 'w1', { prefix: { atMost: 0, over: WORKERS } }, 60_000, blocks));
      assert.equal(res.ok, false);
      assert.equal(res.snapshot.prefix.get('w3'), 5);
      assert.ok((await store.commit(req(p, undefined, 'w1', { prefix: { atMost: 5, over: WORKERS } }, 60_000, blocks))).ok);
    });

    test('the prefix check weighs only the workers the decision weighed: a deeper holder outside them does not fail the commit', async () => {
      const p = pool();
      const blocks = chain('subset', 40);
      assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, blocks))).ok);
      // Decided over {w2, w3} (an endpoint subset hint): neither holds anything.
      const res = await store.commit(req(p, undefined, 'w2', { prefix: { atMost: 0, over: ['w2', 'w3'] } }, 60_000, blocks));
      assert.ok(res.ok, 'w1 is deeper but was not a candidate');
      // A deeper match on a worker the decision did weigh still fails it.
      const stale = await store.commit(req(p, undefined, 'w3', { prefix: { atMost: 0, over: ['w2', 'w3'] } }, 60_000, blocks));
      assert.equal(stale.ok, false);
      assert.equal(stale.ok ? 0 : stale.snapshot.prefix.get('w2'), 40);
    });

    test('a worker gone from the query’s workers (a reload removed it) is neither matched nor checked', async () => {
      const p = pool();
      const blocks = chain('removed', 30);
      assert.ok((await store.commit(req(p, undefined, 'w3', {}, 60_000, blocks))).ok);
      const remaining = ['w1', 'w2'];
      const s = await store.snapshot({ pool: p, key: undefined, workers: remaining, blocks });
      assert.equal(s.prefix.get('w3'), undefined, 'a removed worker is not a holder to the new config');
      const res = await store.commit({ ...req(p, undefined, 'w1', { prefix: { atMost: 0, over: remaining } }, 60_000, blocks), workers: remaining });
      assert.ok(res.ok, "res.ok");
    });

    test('a session’s requests in flight on its worker are counted', async () => {
      const p = pool();
      const a = await store.commit(req(p, 's:busy', 'w2'));
      assert.ok(a.ok, "a.ok");
      const b = await store.commit(req(p, 's:busy', 'w2', { affinity: 'w2' }));
      assert.ok(b.ok, "b.ok");
      assert.ok((await store.commit(req(p, 's:other', 'w2'))).ok);
      assert.equal((await store.snapshot(q(p, 's:busy'))).keyInflight, 2);
      await store.release(a.lease);
      assert.equal((await store.snapshot(q(p, 's:busy'))).keyInflight, 1);
      assert.equal((await store.snapshot(q(p, 's:other'))).keyInflight, 1);
    });

    test('the cached view counts a session’s requests down as they are released (no spill off an idle worker)', async () => {
      const p = pool();
      const leases = [];
      for (let i = 0; i < 3; i++) {
        const r = await store.commit(req(p, 's:turns', 'w1', i === 0 ? {} : { affinity: 'w1' }));
        assert.ok(r.ok, "r.ok");
        leases.push(r.lease);
      }
      assert.equal(store.cachedSnapshot(q(p, 's:turns')).keyInflight, 3);
      await store.release(leases[0]!);
      assert.equal(store.cachedSnapshot(q(p, 's:turns')).keyInflight, 2);
      for (const l of leases.slice(1)) await store.release(l);
      // The next turn is decided on this view: a stale count would read as the session at its cap.
      assert.equal(store.cachedSnapshot(q(p, 's:turns')).keyInflight, 0);
      assert.equal(store.cachedSnapshot(q(p, 's:turns')).affinity, 'w1');
    });

    test('signals are stamped and aged by the store; a failed scrape keeps the last good ones', async () => {
      const p = pool();
      await store.publishSignals(p, 'w1', { signals: { kvUsage: 0.5, running: 3 } });
      let r = (await store.readSignals(p)).get('w1');
      assert.ok(r, "r");
      assert.deepEqual(r.signals, { kvUsage: 0.5, running: 3 });
      assert.ok(r.ageMs >= 0 && r.ageMs < 1000, "r.ageMs >= 0 && r.ageMs < 1000");
      assert.equal(r.failures, 0);
      await store.publishSignals(p, 'w1', { error: 'timeout' });
      await store.publishSignals(p, 'w1', { error: 'timeout' });
      r = (await store.readSignals(p)).get('w1');
      assert.equal(r?.failures, 2);
      assert.equal(r?.error, 'timeout');
      assert.deepEqual(r?.signals, { kvUsage: 0.5, running: 3 });
      await store.publishSignals(p, 'w2', { error: 'refused' });
      const never = (await store.readSignals(p)).get('w2');
      assert.equal(never?.ageMs, Infinity, 'never scraped successfully');
    });

    test('signals come back as published: empty lists stay lists (LoRA adapters), through failed scrapes too', async () => {
      const p = pool();
      const signals = { kvUsage: 0.2, lora: { running: ['a1'], waiting: [], maxLora: 2 } };
      await store.publishSignals(p, 'w1', { signals });
      assert.deepEqual((await store.readSignals(p)).get('w1')?.signals, signals);
      const idle = { kvUsage: 0, lora: { running: [], waiting: [], maxLora: 4 } };
      await store.publishSignals(p, 'w2', { signals: idle });
      await store.publishSignals(p, 'w2', { error: 'timeout' });
      const r = (await store.readSignals(p)).get('w2');
      assert.equal(r?.failures, 1);
      assert.deepEqual(r?.signals, idle);
      assert.ok(Array.isArray(r?.signals.lora?.waiting) && Array.isArray(r?.signals.lora?.running), "Array.isArray(r?.signals.lora?.waiting) && Array.isArray(r?.signals.lora?.running)");
    });

    test('a gate that heartbeats is listed as live', async () => {
      const live = await store.heartbeat(pool(), 'gate-a', 5000);
      assert.ok(live.includes('gate-a'), "live.includes('gate-a')");
    });

    test('a worker’s sessions are listed coldest first', async () => {
      const p = pool();
      for (const k of ['s:a', 's:b', 's:c']) assert.ok((await store.commit(req(p, k, 'w1'))).ok);
      await new Promise((r) => setTimeout(r, 5));
      assert.ok((await store.commit(req(p, 's:a', 'w1', { affinity: 'w1' }))).ok);
      const cold = await store.coldSessions(p, 'w1', 2);
      assert.deepEqual(cold.keys, ['s:b', 's:c']);
      assert.equal(cold.total, 3);
    });

    test('a worker’s expired sessions leave its cold list and its total', async () => {
      const p = pool();
      assert.ok((await store.commit(req(p, 's:gone', 'w1', {}, 150))).ok);
      assert.ok((await store.commit(req(p, 's:moved', 'w1'))).ok);
      assert.ok((await store.commit(req(p, 's:kept', 'w1'))).ok);
      assert.ok((await store.commit(req(p, 's:moved', 'w2', { affinity: 'w1' }))).ok);
      assert.equal((await store.coldSessions(p, 'w1', 10)).total, 2, 'the moved one left at once');
      await new Promise((r) => setTimeout(r, 400));
      const cold = await store.coldSessions(p, 'w1', 10);
      assert.deepEqual(cold.keys, ['s:kept'], 'the expired one is not a session of w1 any more');
      assert.equal(cold.total, 1, 'nor counted: a migrator takes its share of this total');
    });

    test('several workers hold one block, and each holder expires on its own', async () => {
      const p = pool();
      const blocks = chain('shared', 12);
      const ttl = { prefixTtlMs: 700 };
      assert.ok((await store.commit(req(p, undefined, 'w1', {}, 60_000, blocks, ttl))).ok);
      await new Promise((r) => setTimeout(r, 400));
      assert.ok((await store.commit(req(p, undefined, 'w2', {}, 60_000, blocks, ttl))).ok);
      const both = await store.snapshot(q(p, undefined, blocks));
      assert.equal(both.prefix.get('w1'), 12);
      assert.equal(both.prefix.get('w2'), 12);
      // w1 was last sent these blocks 400 ms before w2: its holding lapses first, though w2's
      // keeps the blocks alive.
      await new Promise((r) => setTimeout(r, 450));
      const later = await store.snapshot(q(p, undefined, blocks));
      assert.equal(later.prefix.get('w1') ?? 0, 0, 'w1 was not sent these blocks within the TTL');
      assert.equal(later.prefix.get('w2'), 12);
    });

    test('migrate moves only sessions still on the worker and records one offload event each', async () => {
      const p = pool();
      assert.ok((await store.commit(req(p, 's:x', 'w1'))).ok);
      assert.ok((await store.commit(req(p, 's:y', 'w1'))).ok);
      assert.ok((await store.commit(req(p, 's:z', 'w2'))).ok);
      const seen: unknown[] = [];
      const off = store.onOffload((e) => seen.push(e));
      const events = await store.migrate(p, 'w1', [{ key: 's:x', to: 'w2' }, { key: 's:y', to: 'w3' }, { key: 's:z', to: 'w3' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 });
      off();
      assert.deepEqual(events.map((e) => [e.session, e.from, e.to, e.reason]), [['x', 'w1', 'w2', 'kv_pressure'], ['y', 'w1', 'w3', 'kv_pressure']]);
      assert.ok(events.every((e) => e.time > 0), "events.every((e) => e.time > 0)");
      assert.equal(seen.length, 2);
      assert.equal((await store.snapshot(q(p, 's:x'))).affinity, 'w2');
      assert.equal((await store.snapshot(q(p, 's:z'))).affinity, 'w2', 'not on w1: untouched');
      assert.equal((await store.coldSessions(p, 'w1', 10)).total, 0);
      assert.deepEqual((await store.coldSessions(p, 'w3', 10)).keys, ['s:y']);
    });

    test('a migrated session keeps its recency on its new worker (moved, not used): it is colder than the worker’s own until routed again', async () => {
      const p = pool();
      assert.ok((await store.commit(req(p, 's:idle', 'w1'))).ok);
      // Distinct milliseconds: recency is kept to the millisecond.
      await new Promise((r) => setTimeout(r, 5));
      assert.ok((await store.commit(req(p, 's:active', 'w2'))).ok);
      await new Promise((r) => setTimeout(r, 5));
      assert.equal((await store.migrate(p, 'w1', [{ key: 's:idle', to: 'w2' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 })).length, 1);
      assert.deepEqual((await store.coldSessions(p, 'w2', 10)).keys, ['s:idle', 's:active'], 'the moved session is still the coldest');
      await new Promise((r) => setTimeout(r, 5));
      assert.ok((await store.commit(req(p, 's:idle', 'w2', { affinity: 'w2' }))).ok);
      assert.deepEqual((await store.coldSessions(p, 'w2', 10)).keys, ['s:active', 's:idle'], 'a request makes it the most recent');
    });

    test('a stored response’s worker is recorded per pool, read back, and expires after its TTL', async () => {
      const p = pool();
      assert.equal(await store.responseWorker(p, 'r-unknown'), undefined);
      await store.recordResponse(p, 'r1', 'w2', 60_000);
      await store.recordResponse(p, 'r2', 'w3', 150);
      assert.equal(await store.responseWorker(p, 'r1'), 'w2');
      assert.equal(await store.responseWorker(p, 'r2'), 'w3');
      assert.equal(await store.responseWorker(pool(), 'r1'), undefined, 'another pool does not see it');
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(await store.responseWorker(p, 'r2'), undefined, 'expired');
      assert.equal(await store.responseWorker(p, 'r1'), 'w2');
    });

    test('live sessions: each worker counts the sessions its commits marked live, as last routed, and migrated', async () => {
      const p = pool();
      const live = async () => [...((await store.snapshot({ ...q(p, undefined), liveWindowMs: 60_000 })).live ?? [])].sort();
      assert.equal((await store.snapshot(q(p, undefined))).live, undefined, 'not asked: not counted');
      const commit = async (key: string, worker: string, live?: boolean, affinity?: string) => {
        const res = await store.commit(req(p, key, worker, { affinity }, 60_000, [], { live }));
        assert.ok(res.ok, 'res.ok');
        await store.release(res.lease);
      };
      await commit('s:a', 'w1', true);
      await commit('s:b', 'w1', true);
      await commit('s:c', 'w2', true);
      await commit('s:d', 'w2'); // no mark: not counted
      assert.deepEqual(await live(), [['w1', 2], ['w2', 1]]);
      await commit('s:b', 'w3', true, 'w1'); // routed again elsewhere: counted there only
      await commit('s:c', 'w2', false, 'w2'); // routed again with a short prompt: no longer counted
      assert.deepEqual(await live(), [['w1', 1], ['w3', 1]]);
      await store.migrate(p, 'w1', [{ key: 's:a', to: 'w2' }], 'kv_pressure', { affinityTtlMs: 60_000, streamMaxLen: 100 });
      assert.deepEqual(await live(), [['w2', 1], ['w3', 1]]);
      await commit('s:b', 'w1', undefined, 'w3'); // moved without a mark (another worker served it): its count goes along
      assert.deepEqual(await live(), [['w1', 1], ['w2', 1]]);
      await new Promise((r) => setTimeout(r, 60));
      assert.deepEqual([...((await store.snapshot({ ...q(p, undefined), liveWindowMs: 30 })).live ?? [])], [], 'all routed before the window');
    });

    test('a lock is held by one taker until it lapses', async () => {
      const p = pool();
      assert.equal(await store.tryLock(p, 'x', 200), true);
      assert.equal(await store.tryLock(p, 'x', 200), false);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(await store.tryLock(p, 'x', 200), true);
    });
  });
}