/**
 * The routing policy: a pure function from what is known to a decision. No I/O, no clock.
 *
 * 1. Affinity first: the key's worker takes the request if it still holds the key's KV cache and
 *    can take load (healthy or pressured, below its in-flight limit).
 * 2. Else the least loaded worker that takes new sessions (healthy, below its limit); an affine
 *    key that moves is a migration.
 * 3. Else shed at once: 'overloaded' when some worker is up but all are full, 'no_healthy_workers'
 *    when none can take anything. Queueing behind a full worker only grows latency.
 *
 * "Least loaded" is the lowest in-flight share of the worker's limit, then the lowest count; ties
 * are broken by rendezvous hashing on the key, so every gate replica picks the same worker from
 * the same view and unkeyed ties do not all pile onto the first worker.
 */
import { rendezvousScore } from './rendezvous.js';
import type { Decision, DecisionInput, Preconditions, WorkerState, WorkerView } from './types.js';

const KEEPS: readonly WorkerState[] = ['healthy', 'pressured'];
const TAKES: readonly WorkerState[] = ['healthy'];

/** Can keep serving the keys it already holds. */
export function keepsSessions(w: WorkerView): boolean {
  return (w.state === 'healthy' || w.state === 'pressured') && w.inflight < w.maxInflight;
}

/** Can take a key it does not hold. */
export function takesNewSessions(w: WorkerView): boolean {
  return w.state === 'healthy' && w.inflight < w.maxInflight;
}

export function decide(input: DecisionInput): Decision {
  const { workers, affinity, keyHash } = input;
  const affine = affinity === undefined ? undefined : workers.find((w) => w.id === affinity);

  if (affine && keepsSessions(affine)) {
    return {
      kind: 'route',
      worker: affine.id,
      cluster: affine.cluster,
      outcome: 'affinity_hit',
      preconditions: {
        affinity,
        below: [{ worker: affine.id, limit: affine.maxInflight }],
        atOrAbove: [],
        states: [{ worker: affine.id, in: KEEPS }],
      },
    };
  }

  const target = leastLoaded(workers.filter(takesNewSessions), keyHash ?? '');
  if (!target) {
    const anyUp = workers.some((w) => w.state === 'healthy' || w.state === 'pressured');
    const preconditions: Preconditions = {
      affinity,
      below: [],
      // Shedding relied on every up worker being full; a commit-free recheck uses these.
      atOrAbove: workers
        .filter((w) => w.state === 'healthy' || (w.state === 'pressured' && w.id === affinity))
        .map((w) => ({ worker: w.id, limit: w.maxInflight })),
      states: [],
    };
    return { kind: 'shed', reason: anyUp ? 'overloaded' : 'no_healthy_workers', preconditions };
  }

  const preconditions: Preconditions = {
    affinity,
    below: [{ worker: target.id, limit: target.maxInflight }],
    // A move away from a live, merely full worker is only right while it is still full.
    atOrAbove:
      affine && (affine.state === 'healthy' || affine.state === 'pressured') && affine.inflight >= affine.maxInflight
        ? [{ worker: affine.id, limit: affine.maxInflight }]
        : [],
    states: [
      { worker: target.id, in: TAKES },
      // Leaving a dead or drained worker is only right while it still is.
      ...(affine && !KEEPS.includes(affine.state) ? [{ worker: affine.id, in: [affine.state] }] : []),
    ],
  };
  return {
    kind: 'route',
    worker: target.id,
    cluster: target.cluster,
    // An affinity whose worker is gone from the config moves too: that is still a migration.
    outcome: keyHash === undefined ? 'unkeyed' : affinity !== undefined ? 'migrated' : 'new',
    ...(affinity !== undefined ? { from: affinity } : {}),
    preconditions,
  };
}

function leastLoaded(candidates: readonly WorkerView[], keyHash: string): WorkerView | undefined {
  let best: WorkerView | undefined;
  let bestShare = Infinity;
  let bestScore = 0;
  for (const w of candidates) {
    const share = w.inflight / w.maxInflight;
    if (best === undefined || share < bestShare || (share === bestShare && w.inflight < best.inflight)) {
      best = w;
      bestShare = share;
      bestScore = rendezvousScore(keyHash, w.id);
      continue;
    }
    if (share === bestShare && w.inflight === best.inflight) {
      const score = rendezvousScore(keyHash, w.id);
      if (score > bestScore) {
        best = w;
        bestScore = score;
      }
    }
  }
  return best;
}
