import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { assessHealth, hasEngineRoom } from '../../src/routing/health.js';
import { decide } from '../../src/routing/policy.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';
import { initHashing } from '../../src/util/xxhash.js';
import { decisionInput } from '../helpers/decisions.js';

before(() => initHashing());

function w(id: string, inflight: number, maxInflight = 10, state: WorkerView['state'] = 'healthy', prefixBlocks = 0): WorkerView {
  return { id, state, inflight, maxInflight, prefixBlocks };
}

/** A decision input with the gate's defaults; tests override what they are about. */
function input(p: Partial<DecisionInput> & Pick<DecisionInput, 'workers'>): DecisionInput {
  return decisionInput(p.workers, p);
}

describe('routing policy', () => {
  test('the article example: abc stays on worker_1 at 9 of 10; def and ghi go to worker_2', () => {
    // The article's example (StatefulLLMLoadBalancer.assign_worker): loads {worker_1: 9, worker_2: 2}, threshold 10, abc → worker_1.
    const loads = new Map([
      ['worker_1', 9],
      ['worker_2', 2],
    ]);
    const affinity = new Map([['abc', 'worker_1']]);
    const placed: Array<[string, string]> = [];
    for (const session of ['abc', 'def', 'ghi']) {
      const d = decide(input({
        keyHash: session,
        affinity: affinity.get(session),
        workers: [...loads].map(([id, n]) => w(id, n)),
      }));
      assert.equal(d.kind, 'route');
      assert.ok(d.kind === 'route', 'routed, not shed');
      loads.set(d.worker, loads.get(d.worker)! + 1);
      affinity.set(session, d.worker);
      placed.push([session, d.worker]);
    }
    assert.deepEqual(placed, [
      ['abc', 'worker_1'],
      ['def', 'worker_2'],
      ['ghi', 'worker_2'],
    ]);
    assert.deepEqual([...loads], [
      ['worker_1', 10],
      ['worker_2', 4],
    ]);
  });

  test('affinity wins while the affine worker is below its limit, even when others are idler', () => {
    const d = decide(input({ keyHash: 'k', affinity: 'a', workers: [w('a', 8), w('b', 0)] }));
    assert.equal(d.kind === 'route' && d.worker, 'a');
    assert.equal(d.kind === 'route' && d.outcome, 'affinity_hit');
  });

  test('a saturated affine worker sends the session to the least loaded one and records a migration', () => {
    const d = decide(input({ keyHash: 'k', affinity: 'a', workers: [w('a', 10), w('b', 5), w('c', 3)] }));
    assert.equal(d.kind, 'route');
    assert.ok(d.kind === 'route', 'routed, not shed');
    assert.equal(d.worker, 'c');
    assert.equal(d.outcome, 'migrated');
    assert.equal(d.from, 'a');
    assert.deepEqual(d.preconditions.atOrAbove, [{ worker: 'a', limit: 10 }]);
    assert.deepEqual(d.preconditions.below, [{ worker: 'c', limit: 10 }]);
  });

  test('least loaded is by share of each worker’s own limit', () => {
    const d = decide(input({ keyHash: undefined, session: false, affinity: undefined, workers: [w('small', 2, 4), w('big', 6, 32)] }));
    assert.equal(d.kind === 'route' && d.worker, 'big');
    assert.equal(d.kind === 'route' && d.outcome, 'unkeyed');
  });

  test('a pressured worker keeps its sessions but takes no new ones', () => {
    const workers = [w('p', 1, 10, 'pressured'), w('h', 5)];
    const kept = decide(input({ keyHash: 'k', affinity: 'p', workers }));
    assert.equal(kept.kind === 'route' && kept.worker, 'p');
    const fresh = decide(input({ keyHash: 'n', affinity: undefined, workers }));
    assert.equal(fresh.kind === 'route' && fresh.worker, 'h');
  });

  test('draining and down workers get nothing; their sessions move', () => {
    for (const state of ['draining', 'down'] as const) {
      const d = decide(input({ keyHash: 'k', affinity: 'x', workers: [w('x', 0, 10, state), w('y', 3)] }));
      assert.equal(d.kind === 'route' && d.worker, 'y');
      assert.equal(d.kind === 'route' && d.outcome, 'migrated');
      assert.deepEqual(d.kind === 'route' && d.preconditions.atOrAbove, [], 'no load fact needed to leave a dead worker');
    }
  });

  test('every worker at its limit sheds as overloaded (429)', () => {
    const d = decide(input({ keyHash: 'k', affinity: undefined, workers: [w('a', 10), w('b', 10)] }));
    assert.deepEqual(d.kind === 'shed' && d.reason, 'overloaded');
  });

  test('a full pool whose only free worker is pressured still sheds new sessions', () => {
    const d = decide(input({ keyHash: 'k', affinity: undefined, workers: [w('a', 10), w('p', 0, 10, 'pressured')] }));
    assert.equal(d.kind === 'shed' && d.reason, 'overloaded');
  });

  describe('a pressured worker keeps what it holds', () => {
    /** Past KV pressure (as the engine reported), holding `held` of the prompt's blocks. */
    const kvFull = (id: string, inflight: number, held: number): WorkerView => ({ ...w(id, inflight, 10, 'pressured', held), kvUsage: 0.9, engineRoom: false });
    const idle = (id: string): WorkerView => ({ ...w(id, 0, 10, 'healthy', 0), kvUsage: 0.1, engineRoom: true });

    test('a sessionless request whose prompt it holds most of still goes there, below its limit, and must find it still serving', () => {
      const d = decide(input({ session: false, totalBlocks: 20, workers: [kvFull('holder', 2, 20), idle('b')] }));
      assert.equal(d.kind === 'route' && d.worker, 'holder', 'the whole prompt there beats recomputing it on an idle worker');
      assert.equal(d.kind === 'route' && d.outcome, 'prefix_hit');
      assert.deepEqual(d.kind === 'route' && d.preconditions.states, [{ worker: 'holder', in: ['healthy', 'pressured'] }]);
      // The same when every worker is pressured: it is served, not shed.
      const all = decide(input({ session: false, totalBlocks: 20, workers: [kvFull('holder', 2, 12), kvFull('b', 0, 0)] }));
      assert.equal(all.kind === 'route' && all.worker, 'holder');
    });

    test('not for less than half the prompt, at its limit, for a session being placed, or in least_loaded mode', () => {
      const part = decide(input({ session: false, totalBlocks: 20, workers: [kvFull('holder', 2, 9), idle('b')] }));
      assert.equal(part.kind === 'route' && part.worker, 'b');
      const full = decide(input({ session: false, totalBlocks: 20, workers: [kvFull('holder', 10, 20), idle('b')] }));
      assert.equal(full.kind === 'route' && full.worker, 'b');
      const placing = decide(input({ session: true, totalBlocks: 20, workers: [kvFull('holder', 2, 20), idle('b')] }));
      assert.equal(placing.kind === 'route' && placing.worker, 'b', 'a new session would commit its later turns to a pressured worker');
      const alone = decide(input({ session: true, totalBlocks: 20, workers: [kvFull('holder', 2, 20)] }));
      assert.equal(alone.kind === 'shed' && alone.reason, 'overloaded');
      const byLoad = decide(input({ session: false, mode: 'least_loaded', totalBlocks: 20, workers: [kvFull('holder', 0, 20), idle('b')] }));
      assert.equal(byLoad.kind === 'route' && byLoad.worker, 'b');
    });

    test('in prefix mode sessions are not sticky, so a session\'s request is matched by prompt like any other', () => {
      const d = decide(input({ session: true, mode: 'prefix', totalBlocks: 20, workers: [kvFull('holder', 2, 20), idle('b')] }));
      assert.equal(d.kind === 'route' && d.worker, 'holder');
    });
  });

  describe('past the in-flight limit (overflow)', () => {
    /** A scraped worker: its engine reports queue and KV use, and whether it has room (health.ts hasEngineRoom). */
    const m = (id: string, inflight: number, state: WorkerView['state'] = 'healthy', prefixBlocks = 0, engineRoom = true): WorkerView => ({
      ...w(id, inflight, 10, state, prefixBlocks),
      waiting: 0,
      running: 0,
      kvUsage: engineRoom ? 0.3 : 0.9,
      engineRoom,
    });

    test('every worker at its limit but reporting room: the request queues on one of them instead of shedding', () => {
      const d = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [m('a', 10), m('b', 12)] }));
      assert.equal(d.kind, 'route');
      if (d.kind !== 'route') return;
      assert.equal(d.worker, 'a', 'the shorter queue');
      assert.equal(d.outcome, 'new');
      assert.equal(d.explanation.rule, 'overflow');
      assert.deepEqual(d.preconditions.below, [{ worker: 'a', limit: 40 }], 'the commit relies on the hard bound, not the limit');
      assert.deepEqual(d.preconditions.states, [{ worker: 'a', in: ['healthy', 'pressured'] }]);
    });

    test('a session’s worker past its limit keeps it while its queue costs less than the prefill a move recomputes', () => {
      const pick = (homeInflight: number, homeState: WorkerView['state'] = 'healthy') => {
        const d = decide(input({ keyHash: 'k', affinity: 'home', totalBlocks: 20, overflowFactor: 4, workers: [m('home', homeInflight, homeState, 20), m('free', 3)] }));
        assert.equal(d.kind, 'route');
        return d.kind === 'route' ? d : undefined;
      };
      // Whole prompt at home: 1 − 1.2 (12 of 10) beats 0 − 0.3 at the free worker.
      const stay = pick(12)!;
      assert.equal(stay.worker, 'home');
      assert.equal(stay.outcome, 'affinity_hit');
      assert.equal(stay.explanation.rule, 'overflow');
      assert.deepEqual(stay.preconditions.below, [{ worker: 'home', limit: 40 }], 'the hard bound, not the limit');
      // Pressured by its queue alone (engine room): the same.
      assert.equal(pick(12, 'pressured')!.worker, 'home');
      // 1 − 1.4 loses to 0 − 0.3: the queue at home now costs more than recomputing the prompt.
      const move = pick(14)!;
      assert.equal(move.worker, 'free');
      assert.equal(move.outcome, 'migrated');
      assert.equal(move.explanation.rule, 'scored');
    });

    test('a session’s worker past its limit and out of KV room loses the session to a free worker', () => {
      const d = decide(input({ keyHash: 'k', affinity: 'home', totalBlocks: 20, overflowFactor: 4, workers: [m('home', 11, 'pressured', 20, false), m('free', 3)] }));
      assert.equal(d.kind === 'route' && d.worker, 'free');
      assert.equal(d.kind === 'route' && d.outcome, 'migrated');
    });

    test('fan-out past the limit spreads: a session with maxInflightPerSession running at home is not kept there', () => {
      const d = decide(input({ keyHash: 'k', affinity: 'home', keyInflight: 4, totalBlocks: 20, overflowFactor: 4, workers: [m('home', 11, 'healthy', 20), m('free', 3)] }));
      assert.equal(d.kind === 'route' && d.worker, 'free');
    });

    test('fan-out with every worker at its limit: the session’s own worker gets no queue of its own, the score decides', () => {
      // Both full; home has the longer queue. With maxInflightPerSession requests of this session
      // already running at home, the next one must not be sent there by the own-worker rule.
      const fan = decide(input({ keyHash: 'k', affinity: 'home', keyInflight: 4, overflowFactor: 4, workers: [m('home', 14), m('other', 10)] }));
      assert.equal(fan.kind === 'route' && fan.worker, 'other');
      assert.equal(fan.kind === 'route' && fan.explanation.rule, 'overflow');
      // Below the per-session cap the session queues at home, as before.
      const one = decide(input({ keyHash: 'k', affinity: 'home', keyInflight: 1, overflowFactor: 4, workers: [m('home', 14), m('other', 10)] }));
      assert.equal(one.kind === 'route' && one.worker, 'home');
    });

    test('past the limit the load term keeps counting: a whole-prompt holder 3 limits deep loses to an empty queue', () => {
      const d = decide(input({ session: false, totalBlocks: 20, overflowFactor: 4, workers: [m('holder', 30, 'healthy', 20), m('other', 10)] }));
      assert.equal(d.kind === 'route' && d.worker, 'other', '1 − 3 < 0 − 1');
      const e = decide(input({ session: false, totalBlocks: 20, overflowFactor: 4, workers: [m('holder', 12, 'healthy', 20), m('other', 10)] }));
      assert.equal(e.kind === 'route' && e.worker, 'holder', '1 − 1.2 > 0 − 1');
    });

    test('a queue-pressured worker (room, long queue) takes overflow; a KV-pressured one does not; all KV-pressured sheds', () => {
      const d = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [m('kv', 10, 'pressured', 0, false), m('queue', 10, 'pressured', 0, true)] }));
      assert.equal(d.kind === 'route' && d.worker, 'queue');
      const e = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [m('a', 10, 'pressured', 0, false), m('b', 10, 'pressured', 0, false)] }));
      assert.equal(e.kind === 'shed' && e.reason, 'overloaded');
    });

    test('every worker pressured by its queue alone, below its limit: a new session still goes to one of them', () => {
      // The README's worker states: pressured workers get no new sessions while another worker takes them.
      const queued = (id: string, waiting: number): WorkerView => ({ ...m(id, 0, 'pressured'), waiting });
      const d = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [queued('a', 40), queued('b', 50)] }));
      assert.equal(d.kind === 'route' && d.outcome, 'new');
      assert.equal(d.kind === 'route' && d.explanation.rule, 'overflow');
      assert.equal(d.kind === 'route' && d.worker, 'a', 'the shorter queue');
      const withHealthy = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [queued('a', 40), m('h', 9)] }));
      assert.equal(withHealthy.kind === 'route' && withHealthy.worker, 'h', 'not while a healthy worker takes it');
    });

    test('in session mode a session whose worker is at its limit moves at once; it queues at home only when every worker is full', () => {
      const moved = decide(input({ mode: 'session', keyHash: 'k', affinity: 'home', overflowFactor: 4, workers: [m('home', 10), m('other', 3)] }));
      assert.equal(moved.kind === 'route' && moved.worker, 'other');
      assert.equal(moved.kind === 'route' && moved.outcome, 'migrated');
      const queued = decide(input({ mode: 'session', keyHash: 'k', affinity: 'home', overflowFactor: 4, workers: [m('home', 10), m('other', 10)] }));
      assert.equal(queued.kind === 'route' && queued.worker, 'home');
      assert.equal(queued.kind === 'route' && queued.outcome, 'affinity_hit');
    });

    test('the hard bound holds while a scrape is on its way: at factor × limit the worker is full', () => {
      const d = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [m('a', 40), m('b', 40)] }));
      assert.equal(d.kind === 'shed' && d.reason, 'overloaded');
      const e = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [m('a', 40), m('b', 39)] }));
      assert.equal(e.kind === 'route' && e.worker, 'b');
    });

    test('the hard bound counts what the engines have not reported: past factor × limit by the shallowest queue, while every engine has room', () => {
      const q = (id: string, inflight: number, waiting: number, engineRoom = true): WorkerView => ({ ...m(id, inflight, 'healthy', 0, engineRoom), waiting });
      // Both at 4 × 10 in flight, but their engines report 30 and 25 of those queued with room for more.
      const d = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [q('a', 40, 30), q('b', 40, 25)] }));
      assert.equal(d.kind, 'route', 'queued work the engines reported is not what the bound is for');
      assert.deepEqual(d.kind === 'route' && d.preconditions.below, [{ worker: d.kind === 'route' ? d.worker : '', limit: 65 }], '40 past the shallowest queue (25): the commit checks the same bound');
      // 40 past the shallowest queue on both: full.
      assert.equal(decide(input({ keyHash: 'k', overflowFactor: 4, workers: [q('a', 65, 30), q('b', 65, 25)] })).kind, 'shed');
      // One engine out of KV room: the memory decides, and the bound is the count alone, as before.
      const e = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [q('a', 40, 30), q('b', 12, 25, false)] }));
      assert.equal(e.kind === 'shed' && e.reason, 'overloaded');
      // A worker without engine metrics reports no queue: no credit for anyone.
      const f = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [q('a', 40, 30), w('b', 10)] }));
      assert.equal(f.kind === 'shed' && f.reason, 'overloaded');
      // The session's own worker past the bound keeps it by the same rule.
      const home = decide(input({ keyHash: 'k', affinity: 'a', totalBlocks: 20, overflowFactor: 4, workers: [{ ...q('a', 45, 30), prefixBlocks: 20 }, q('b', 50, 30)] }));
      assert.equal(home.kind === 'route' && home.worker, 'a');
      assert.deepEqual(home.kind === 'route' && home.preconditions.below, [{ worker: 'a', limit: 70 }]);
    });

    test('the queue credit is weighed once a decision, however many steps use it', () => {
      // A session whose worker is full and out of room; the other worker is full with room: the
      // session's own worker is weighed past its limit, then the overflow filter, then the commit's
      // bound, each of which once computed the credit afresh. queueCredit reads `waiting` of each
      // serving worker with room, and the explanation once a worker (as `running` is set).
      let reads = 0;
      const counted: WorkerView = {
        ...m('b', 10),
        get waiting() {
          reads++;
          return 3;
        },
      };
      const d = decide(input({ keyHash: 'k', affinity: 'a', mode: 'session', overflowFactor: 2, workers: [m('a', 10, 'healthy', 0, false), counted] }));
      assert.equal(d.kind === 'route' && d.worker, 'b');
      assert.equal(d.kind === 'route' && d.explanation.rule, 'overflow');
      // a has no room: no credit, the bound is 2 × 10.
      assert.deepEqual(d.kind === 'route' && d.preconditions.below, [{ worker: 'b', limit: 20 }]);
      assert.equal(reads, 2, 'one read for the credit, one for the explanation');
    });

    test('a worker without engine metrics has only the count: its limit stays hard', () => {
      const d = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [w('a', 10), w('b', 10)] }));
      assert.equal(d.kind === 'shed' && d.reason, 'overloaded');
      const e = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [w('a', 10), m('b', 10)] }));
      assert.equal(e.kind === 'route' && e.worker, 'b');
      const home = decide(input({ keyHash: 'k', affinity: 'a', totalBlocks: 20, overflowFactor: 4, workers: [w('a', 11, 10, 'healthy', 20), m('b', 3)] }));
      assert.equal(home.kind === 'route' && home.worker, 'b', 'no engine word: the session moves, as before');
    });

    test('a lower class of service is held to its share: it never goes past the limit', () => {
      const top = decide(input({ keyHash: 'k', overflowFactor: 4, workers: [m('a', 10), m('b', 10)] }));
      assert.equal(top.kind === 'route' && top.explanation.rule, 'overflow');
      const low = decide(input({ keyHash: 'k', overflowFactor: 4, classShare: 0.5, workers: [m('a', 10), m('b', 10)] }));
      assert.equal(low.kind === 'shed' && low.reason, 'overloaded');
      const home = decide(input({ keyHash: 'k', affinity: 'a', totalBlocks: 20, overflowFactor: 4, classShare: 0.5, workers: [m('a', 6, 'healthy', 20), m('b', 0)] }));
      assert.equal(home.kind === 'route' && home.worker, 'b', 'past its class share at home, the session moves');
    });

    test('factor 0 or 1 turns overflow off', () => {
      for (const overflowFactor of [0, 1]) {
        const d = decide(input({ keyHash: 'k', overflowFactor, workers: [m('a', 10), m('b', 10)] }));
        assert.equal(d.kind === 'shed' && d.reason, 'overloaded');
        const e = decide(input({ keyHash: 'k', affinity: 'a', totalBlocks: 20, overflowFactor, workers: [m('a', 11, 'healthy', 20), m('b', 3)] }));
        assert.equal(e.kind === 'route' && e.worker, 'b');
      }
    });

    test('engine room: a queue alone leaves room; KV, memory or heat do not', () => {
      const t = { kvPressure: 0.85, memoryPressure: 0.9, maxQueue: 32, maxTempC: 85, staleAfterMs: 5000, failuresDown: 3 };
      const v = (signals: Record<string, number>) => assessHealth({ signals, ageMs: 0, failures: 0 }, t, false);
      const room = (signals: Record<string, number>) => hasEngineRoom(v(signals), signals, false);
      assert.equal(room({ waiting: 40, kvUsage: 0.5 }), true);
      assert.equal(v({ waiting: 40, kvUsage: 0.5 }).state, 'pressured', 'still no new sessions below the limit');
      assert.equal(room({ waiting: 40, kvUsage: 0.9 }), false);
      assert.equal(room({ waiting: 0, kvUsage: 0.2, gpuTempC: 90 }), false);
      assert.equal(room({ waiting: 0, kvUsage: 0.2 }), true);
      assert.equal(hasEngineRoom(assessHealth(undefined, t, false), undefined, false), false);
    });

    test('engine room needs a memory figure: a page of running and waiting counts alone gives none', () => {
      const t = { kvPressure: 0.85, memoryPressure: 0.9, maxQueue: 32, maxTempC: 85, staleAfterMs: 5000, failuresDown: 3 };
      const counts = { running: 16, waiting: 0 };
      const healthy = assessHealth({ signals: counts, ageMs: 0, failures: 0 }, t, false);
      assert.equal(healthy.state, 'healthy', 'still healthy below the limit');
      assert.equal(hasEngineRoom(healthy, counts, false), false, 'unknown is not room');
      // GPU memory counts where the worker is configured to be judged by it.
      const fb = { ...counts, fbUsedMiB: 30_000, fbFreeMiB: 50_000 };
      assert.equal(hasEngineRoom(assessHealth({ signals: fb, ageMs: 0, failures: 0 }, t, true), fb, true), true);
      assert.equal(hasEngineRoom(assessHealth({ signals: fb, ageMs: 0, failures: 0 }, t, false), fb, false), false, 'not where it is not read');
    });
  });

  test('no worker healthy sheds as no_healthy_workers (503)', () => {
    const d = decide(input({ keyHash: 'k', affinity: 'a', workers: [w('a', 0, 10, 'down'), w('b', 0, 10, 'draining')] }));
    assert.equal(d.kind === 'shed' && d.reason, 'no_healthy_workers');
  });

  test('ties are broken the same way every time, and different keys spread over tied workers', () => {
    const workers = [w('a', 0), w('b', 0), w('c', 0), w('d', 0)];
    const pick = (k: string) => {
      const d = decide(input({ keyHash: k, affinity: undefined, workers }));
      return d.kind === 'route' ? d.worker : 'shed';
    };
    assert.equal(pick('same'), pick('same'));
    const used = new Set(Array.from({ length: 64 }, (_, i) => pick(`k${i}`)));
    assert.equal(used.size, 4);
  });

  test('requests without a key spread over tied workers by the tie seed the gate gives each; with a key the key decides', () => {
    const workers = [w('a', 0), w('b', 0), w('c', 0), w('d', 0)];
    const pick = (p: Partial<DecisionInput>) => {
      const d = decide(input({ session: false, affinity: undefined, workers, ...p }));
      return d.kind === 'route' ? d.worker : 'shed';
    };
    const used = new Set(Array.from({ length: 64 }, (_, i) => pick({ keyHash: undefined, tieSeed: `#${i}` })));
    assert.equal(used.size, 4, 'unkeyed requests do not all go to the empty key\'s winner');
    assert.equal(pick({ keyHash: undefined, tieSeed: '#7' }), pick({ keyHash: undefined, tieSeed: '#7' }), 'the seed is an input: same seed, same pick');
    assert.equal(pick({ keyHash: 'k', tieSeed: '#1' }), pick({ keyHash: 'k', tieSeed: '#2' }), 'a key, not the seed, breaks its ties');
  });

  test('by load alone the fewest in flight win, and ties go to the shorter reported queue before the hash', () => {
    // A worker whose engine queues 30 (traffic that bypassed this gate, or work past its first
    // token) loses every tie to idle ones, whatever the request's tie seed.
    const queued = { ...w('a', 0), waiting: 30, running: 120 };
    for (const mode of ['least_loaded', 'session', 'both'] as const) {
      for (let i = 0; i < 32; i++) {
        const d = decide(input({ mode, session: false, keyHash: undefined, tieSeed: `#${i}`, totalBlocks: 0, workers: [queued, w('b', 0), w('c', 0)] }));
        assert.ok(d.kind === 'route' && d.worker !== 'a', `${mode}: ${d.kind === 'route' ? d.worker : d.kind}`);
      }
      // The gate's own count decides first: it is instant, the queue a scrape old.
      const d = decide(input({ mode, session: false, keyHash: undefined, tieSeed: '#0', totalBlocks: 0, workers: [queued, w('b', 2)] }));
      assert.equal(d.kind === 'route' && d.worker, 'a', mode);
    }
    // Equal scores: the shorter queue wins, whatever the key.
    const deep = { ...w('x', 0), waiting: 50 };
    const shallow = { ...w('y', 0), waiting: 12 };
    for (let i = 0; i < 16; i++) {
      const d = decide(input({ mode: 'least_loaded', keyHash: `k${i}`, workers: [deep, shallow] }));
      assert.equal(d.kind === 'route' && d.worker, 'y');
    }
  });

  test('an affinity to a worker no longer configured is a migration', () => {
    const d = decide(input({ keyHash: 'k', affinity: 'gone', workers: [w('a', 0)] }));
    assert.equal(d.kind === 'route' && d.outcome, 'migrated');
  });

  describe('prefix-aware scoring', () => {
    test('a worker holding the prompt beats an idle one until it is nearly full', () => {
      const holder = (load: number) => w('holder', load, 10, 'healthy', 40);
      const pick = (load: number) => {
        const d = decide(input({ session: false, totalBlocks: 40, workers: [holder(load), w('idle', 0)] }));
        return d.kind === 'route' ? d.worker : 'shed';
      };
      assert.equal(pick(0), 'holder');
      assert.equal(pick(8), 'holder');
      assert.equal(pick(9), 'holder', '1 − 0.9 > 0');
      const full = decide(input({ session: false, totalBlocks: 40, workers: [holder(10), w('idle', 0)] }));
      assert.equal(full.kind === 'route' && full.worker, 'idle', 'a full holder is not a candidate');
    });

    test('a half match is worth half a limit of load', () => {
      const d = decide(input({ session: false, totalBlocks: 10, workers: [w('half', 6, 10, 'healthy', 5), w('idle', 0)] }));
      assert.equal(d.kind === 'route' && d.worker, 'idle', '0.5 − 0.6 < 0');
      const e = decide(input({ session: false, totalBlocks: 10, workers: [w('half', 4, 10, 'healthy', 5), w('idle', 0)] }));
      assert.equal(e.kind === 'route' && e.worker, 'half', '0.5 − 0.4 > 0');
      assert.equal(e.kind === 'route' && e.outcome, 'prefix_hit');
    });

    test('KV pressure steers near-ties away from a worker close to evicting', () => {
      const hot = { ...w('hot', 2), kvUsage: 0.95 };
      const cool = { ...w('cool', 2), kvUsage: 0.1 };
      const d = decide(input({ session: false, totalBlocks: 4, workers: [hot, cool] }));
      assert.equal(d.kind === 'route' && d.worker, 'cool');
    });

    test('a session whose worker is full follows its prefix, not just the least loaded', () => {
      const d = decide(input({ affinity: 'home', totalBlocks: 20, workers: [w('home', 10, 10, 'healthy', 20), w('shares-system-prompt', 3, 10, 'healthy', 12), w('idle', 0)] }));
      assert.equal(d.kind === 'route' && d.worker, 'shares-system-prompt');
      assert.equal(d.kind === 'route' && d.outcome, 'migrated');
    });

    test('fair share: a new session leaves its prefix holder once that worker runs twice the fleet mean of decode work', () => {
      // The gate's in-flight counts are all 0 (requests are released at the first token); only
      // the engine's running counts show that 'holder' decodes for many more sessions.
      const fleet = (holderRunning: number) => [
        { ...w('holder', 0, 16, 'healthy', 16), running: holderRunning, waiting: 0 },
        { ...w('a', 0, 16), running: 4, waiting: 0 },
        { ...w('b', 0, 16), running: 4, waiting: 0 },
        { ...w('c', 0, 16), running: 4, waiting: 0 },
      ];
      const pick = (holderRunning: number, p: Partial<DecisionInput> = {}) => {
        const d = decide(input({ totalBlocks: 20, workers: fleet(holderRunning), ...p }));
        return d.kind === 'route' ? d.worker : d.reason;
      };
      // 5 running against a mean of 4.25: a little ahead, the prefix (0.8 of the prompt) wins.
      assert.equal(pick(5), 'holder');
      // 12 against a mean of 6: twice its share, the prefix advantage is gone.
      assert.ok(['a', 'b', 'c'].includes(pick(12)), `placed on another worker, not shed: ${pick(12)}`);
      // Off with weight 0, as before this term existed.
      assert.equal(pick(12, { weights: { ...input({ workers: [] }).weights, balance: 0 } }), 'holder');
      // One-off requests (no session) and a session's spill-over are not placements: prefix wins.
      assert.equal(pick(12, { session: false }), 'holder');
      assert.equal(pick(12, { affinity: 'holder', keyInflight: 4 }), 'holder');
      // The explanation shows each candidate's work, so /debug/decisions says why.
      const moved = decide(input({ totalBlocks: 20, workers: fleet(12) }));
      assert.deepEqual(moved.explanation.candidates.map((c) => c.work), [12, 4, 4, 4]);
      // A nearly idle fleet is not judged on one-request differences: 1 running against a mean of 0.25.
      const idle = decide(input({ totalBlocks: 20, workers: [{ ...w('holder', 0, 16, 'healthy', 16), running: 1 }, w('a', 0, 16), w('b', 0, 16), w('c', 0, 16)] }));
      assert.equal(idle.kind === 'route' && idle.worker, 'holder');
    });

    test('a session with too many requests in flight on its worker spills to scoring', () => {
      const workers = [w('home', 5, 10, 'healthy', 20), w('other', 0, 10, 'healthy', 0)];
      const stays = decide(input({ affinity: 'home', keyInflight: 3, totalBlocks: 20, workers }));
      assert.equal(stays.kind === 'route' && stays.worker, 'home');
      const spills = decide(input({ affinity: 'home', keyInflight: 4, totalBlocks: 20, workers }));
      assert.equal(spills.kind === 'route' && spills.explanation.spilled, true);
      // Scored: home has the whole prompt at half load (1 − 0.5) against an idle stranger (0).
      assert.equal(spills.kind === 'route' && spills.worker, 'home');
      const crowded = decide(input({ affinity: 'home', keyInflight: 4, totalBlocks: 20, workers: [w('home', 9, 10, 'healthy', 2), w('other', 0)] }));
      assert.equal(crowded.kind === 'route' && crowded.worker, 'other');
      // Placed elsewhere, the spill moves the session (measured: keeping it home lost goodput; policy.ts).
      assert.equal(crowded.kind === 'route' && crowded.outcome, 'migrated');
      assert.equal(crowded.kind === 'route' && crowded.from, 'home');
    });

    test('modes: session ignores prefixes, prefix ignores sessions, least_loaded ignores both', () => {
      const workers = [w('affine', 5, 10, 'healthy', 0), w('holder', 3, 10, 'healthy', 30), w('idle', 0)];
      const pick = (mode: DecisionInput['mode']) => {
        const d = decide(input({ mode, affinity: 'affine', totalBlocks: 30, workers }));
        return d.kind === 'route' ? d.worker : 'shed';
      };
      assert.equal(pick('both'), 'affine');
      assert.equal(pick('session'), 'affine');
      assert.equal(pick('prefix'), 'holder');
      assert.equal(pick('least_loaded'), 'idle');
    });

    test('a scored decision relies on the deepest match it saw, and explains every candidate', () => {
      const d = decide(input({ session: false, totalBlocks: 8, workers: [w('a', 1, 10, 'healthy', 8), w('b', 0, 10, 'healthy', 3), w('gone', 0, 10, 'down', 8)] }));
      assert.equal(d.kind, 'route');
      assert.ok(d.kind === 'route', 'routed, not shed');
      assert.deepEqual(d.preconditions.prefix, { atMost: 8, over: ['a', 'b', 'gone'] });
      assert.equal(d.explanation.rule, 'scored');
      const byWorker = new Map(d.explanation.candidates.map((c) => [c.worker, c]));
      assert.equal(byWorker.get('a')?.score, 0.9);
      assert.equal(byWorker.get('b')?.score, 0.375);
      assert.equal(byWorker.get('gone')?.score, undefined, 'a down worker is not scored');
      assert.equal(byWorker.get('gone')?.prefixBlocks, 8);
    });
  });
});
