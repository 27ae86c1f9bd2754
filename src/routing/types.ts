/**
 * The vocabulary of routing decisions. Nothing here knows Envoy, gRPC or a store backend.
 */

/**
 * healthy: takes new and existing sessions.
 * pressured: keeps the sessions it holds, gets no new ones (KV or memory pressure, queue, heat).
 * draining: set by an operator; gets nothing, its sessions move.
 * down: unreachable or stale; gets nothing, its sessions move.
 */
export type WorkerState = 'healthy' | 'pressured' | 'draining' | 'down';
export const WORKER_STATES: readonly WorkerState[] = ['healthy', 'pressured', 'draining', 'down'];

/** One worker as a decision sees it. */
export interface WorkerView {
  id: string;
  cluster: string;
  state: WorkerState;
  /** Requests this fleet of gates has sent and not yet seen finish. */
  inflight: number;
  /** In-flight count at which the worker is saturated. */
  maxInflight: number;
}

export interface DecisionInput {
  /** Hash of the routing key, or undefined for requests without one. */
  keyHash: string | undefined;
  /** The worker id the key is affine to, if any. */
  affinity: string | undefined;
  workers: readonly WorkerView[];
}

export type RouteOutcome =
  /** The key's worker took it. */
  | 'affinity_hit'
  /** The key had no worker yet and got the least loaded one. */
  | 'new'
  /** The key's worker could not take it; it moved to the least loaded one. */
  | 'migrated'
  /** No key: routed by load alone. */
  | 'unkeyed';

/**
 * What the decision relied on. The store checks these atomically when it commits, so a decision
 * made from a slightly stale view is either still right or re-made from fresh state.
 */
export interface Preconditions {
  /** The affinity the decision saw (undefined: none). */
  affinity: string | undefined;
  /** Workers that must still be below these in-flight counts. */
  below: ReadonlyArray<{ worker: string; limit: number }>;
  /** Workers that must still be at or above these counts (the reason a session migrated). */
  atOrAbove: ReadonlyArray<{ worker: string; limit: number }>;
  /** Workers whose state must still be one of these (an operator may have drained it meanwhile). */
  states: ReadonlyArray<{ worker: string; in: readonly WorkerState[] }>;
}

export type Decision =
  | {
      kind: 'route';
      worker: string;
      cluster: string;
      outcome: RouteOutcome;
      /** The worker a migrated key left. */
      from?: string;
      preconditions: Preconditions;
    }
  | {
      kind: 'shed';
      /** overloaded: every eligible worker is at its limit; no_healthy_workers: none eligible at all. */
      reason: 'overloaded' | 'no_healthy_workers';
      preconditions: Preconditions;
    };
