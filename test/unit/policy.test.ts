import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { decide } from '../../src/routing/policy.js';
import type { WorkerView } from '../../src/routing/types.js';
import { initHashing } from '../../src/util/xxhash.js';

before(() => initHashing());

function w(id: string, inflight: number, maxInflight = 10, state: WorkerView['state'] = 'healthy'): WorkerView {
  return { id, cluster: `c_${id}`, state, inflight, maxInflight };
}

describe('routing policy', () => {
  test('the article example: abc stays on worker_1 at 9 of 10; def and ghi go to worker_2', () => {
    // stateful-llm-load-balancing.txt: loads {worker_1: 9, worker_2: 2}, threshold 10, abc → worker_1.
    const loads = new Map([
      ['worker_1', 9],
      ['worker_2', 2],
    ]);
    const affinity = new Map([['abc', 'worker_1']]);
    const placed: Array<[string, string]> = [];
    for (const session of ['abc', 'def', 'ghi']) {
      const d = decide({
        keyHash: session,
        affinity: affinity.get(session),
        workers: [...loads].map(([id, n]) => w(id, n)),
      });
      assert.equal(d.kind, 'route');
      if (d.kind !== 'route') return;
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
    const d = decide({ keyHash: 'k', affinity: 'a', workers: [w('a', 8), w('b', 0)] });
    assert.equal(d.kind === 'route' && d.worker, 'a');
    assert.equal(d.kind === 'route' && d.outcome, 'affinity_hit');
  });

  test('a saturated affine worker sends the session to the least loaded one and records a migration', () => {
    const d = decide({ keyHash: 'k', affinity: 'a', workers: [w('a', 10), w('b', 5), w('c', 3)] });
    assert.equal(d.kind, 'route');
    if (d.kind !== 'route') return;
    assert.equal(d.worker, 'c');
    assert.equal(d.outcome, 'migrated');
    assert.equal(d.from, 'a');
    assert.deepEqual(d.preconditions.atOrAbove, [{ worker: 'a', limit: 10 }]);
    assert.deepEqual(d.preconditions.below, [{ worker: 'c', limit: 10 }]);
  });

  test('least loaded is by share of each worker’s own limit', () => {
    const d = decide({ keyHash: undefined, affinity: undefined, workers: [w('small', 2, 4), w('big', 6, 32)] });
    assert.equal(d.kind === 'route' && d.worker, 'big');
    assert.equal(d.kind === 'route' && d.outcome, 'unkeyed');
  });

  test('a pressured worker keeps its sessions but takes no new ones', () => {
    const workers = [w('p', 1, 10, 'pressured'), w('h', 5)];
    const kept = decide({ keyHash: 'k', affinity: 'p', workers });
    assert.equal(kept.kind === 'route' && kept.worker, 'p');
    const fresh = decide({ keyHash: 'n', affinity: undefined, workers });
    assert.equal(fresh.kind === 'route' && fresh.worker, 'h');
  });

  test('draining and down workers get nothing; their sessions move', () => {
    for (const state of ['draining', 'down'] as const) {
      const d = decide({ keyHash: 'k', affinity: 'x', workers: [w('x', 0, 10, state), w('y', 3)] });
      assert.equal(d.kind === 'route' && d.worker, 'y');
      assert.equal(d.kind === 'route' && d.outcome, 'migrated');
      assert.deepEqual(d.kind === 'route' && d.preconditions.atOrAbove, [], 'no load fact needed to leave a dead worker');
    }
  });

  test('every worker at its limit sheds as overloaded (429)', () => {
    const d = decide({ keyHash: 'k', affinity: undefined, workers: [w('a', 10), w('b', 10)] });
    assert.deepEqual(d.kind === 'shed' && d.reason, 'overloaded');
  });

  test('a full pool whose only free worker is pressured still sheds new sessions', () => {
    const d = decide({ keyHash: 'k', affinity: undefined, workers: [w('a', 10), w('p', 0, 10, 'pressured')] });
    assert.equal(d.kind === 'shed' && d.reason, 'overloaded');
  });

  test('no worker healthy sheds as no_healthy_workers (503)', () => {
    const d = decide({ keyHash: 'k', affinity: 'a', workers: [w('a', 0, 10, 'down'), w('b', 0, 10, 'draining')] });
    assert.equal(d.kind === 'shed' && d.reason, 'no_healthy_workers');
  });

  test('ties are broken the same way every time, and different keys spread over tied workers', () => {
    const workers = [w('a', 0), w('b', 0), w('c', 0), w('d', 0)];
    const pick = (k: string) => {
      const d = decide({ keyHash: k, affinity: undefined, workers });
      return d.kind === 'route' ? d.worker : 'shed';
    };
    assert.equal(pick('same'), pick('same'));
    const used = new Set(Array.from({ length: 64 }, (_, i) => pick(`k${i}`)));
    assert.equal(used.size, 4);
  });

  test('an affinity to a worker no longer configured is a migration', () => {
    const d = decide({ keyHash: 'k', affinity: 'gone', workers: [w('a', 0)] });
    assert.equal(d.kind === 'route' && d.outcome, 'migrated');
  });
});
