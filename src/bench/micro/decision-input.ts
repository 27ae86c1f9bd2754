/**
 * Inputs for the routing-decision micro-benchmarks: fleets of N workers with spread-out loads,
 * and one function that turns a fleet and a request into `decide()`'s input. When `decide`'s input
 * changes (per-worker prefix-match counts for scoring, say), `decisionInput` is the one place the
 * benchmark needs to follow: give each worker its match count from `req.matchedBlocks` here.
 */
import { DEFAULTS } from '../../config/defaults.js';
import type { DecisionInput, WorkerView } from '../../routing/types.js';
import { Rng } from '../../sim/rng.js';

/** What a request brings to a decision, independent of the policy's input shape. */
export interface BenchDecisionRequest {
  keyHash: string;
  /** The worker the key is affine to (undefined: a new key). */
  affinity: string | undefined;
  /** Per worker (same order as the fleet): leading prompt blocks the worker probably holds. */
  matchedBlocks: readonly number[];
  /** Blocks in the request's prompt. */
  totalBlocks: number;
}

/** A fleet of `n` healthy workers at the default limit, loads spread over [0, limit). */
export function benchFleet(n: number, rng: Rng, maxInflight = 16): WorkerView[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `worker_${i + 1}`,
    state: 'healthy' as const,
    inflight: rng.int(0, maxInflight - 1),
    maxInflight,
    prefixBlocks: 0,
  }));
}

/** Requests against a fleet: a quarter affine to some worker, the rest new; prefix matches on a few workers. */
export function benchDecisionRequests(fleet: readonly WorkerView[], count: number, rng: Rng, affineShare = 0.25): BenchDecisionRequest[] {
  return Array.from({ length: count }, (_, i) => {
    const totalBlocks = rng.int(4, 64);
    const holders = new Set(Array.from({ length: Math.min(3, fleet.length) }, () => rng.int(0, fleet.length - 1)));
    return {
      keyHash: (0x1000_0000 + i * 7919 + rng.int(0, 1 << 20)).toString(16).padStart(16, '0'),
      affinity: rng.next() < affineShare ? rng.pick(fleet).id : undefined,
      matchedBlocks: fleet.map((_, w) => (holders.has(w) ? rng.int(1, totalBlocks) : 0)),
      totalBlocks,
    };
  });
}

/** One weights object for every input, as the gate hands one per config (the policy builds its profiles once per weights object). */
const WEIGHTS = { prefix: DEFAULTS.prefixWeight, load: DEFAULTS.loadWeight, kv: DEFAULTS.kvWeight, balance: DEFAULTS.balanceWeight };

/** `decide()`'s input for one request on one fleet: the one function to adapt when that input changes. */
export function decisionInput(fleet: readonly WorkerView[], req: BenchDecisionRequest): DecisionInput {
  return {
    keyHash: req.keyHash,
    session: true,
    affinity: req.affinity,
    keyInflight: 0,
    totalBlocks: req.totalBlocks,
    workers: fleet.map((w, i) => ({ ...w, prefixBlocks: req.matchedBlocks[i] ?? 0 })),
    mode: 'both',
    weights: WEIGHTS,
    balanceFloor: DEFAULTS.balanceFloor,
    maxInflightPerSession: 4,
  };
}

/**
 * The baseline a decision is compared with: the cheapest useful pick, the least loaded worker by
 * in-flight share, in one pass with no tie-break, no states and no preconditions.
 */
export function trivialLeastLoaded(fleet: readonly WorkerView[]): WorkerView | undefined {
  let best: WorkerView | undefined;
  let bestShare = Infinity;
  for (const w of fleet) {
    const share = w.inflight / w.maxInflight;
    if (share < bestShare) {
      best = w;
      bestShare = share;
    }
  }
  return best;
}
