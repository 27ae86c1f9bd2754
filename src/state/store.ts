/**
 * The one interface to routing state: key affinities, per-worker in-flight leases and worker
 * states. Two backends implement it: `MemoryStore` (one gate process, the embedded default) and
 * `RedisStore` (many replicas agreeing through Redis). test/state/store.contract.ts runs the same
 * suite against both.
 *
 * A decision is made by the pure policy on a snapshot and then *committed*: the store checks, in
 * one atomic step, that the facts the decision relied on (its preconditions) still hold, then
 * records the affinity and takes an in-flight lease. If another replica changed those facts in the
 * meantime, the commit fails and returns the fresh snapshot to decide again on.
 */
import type { Preconditions, WorkerState } from '../routing/types.js';

/** What a decision needs to know about a pool and one key. */
export interface Snapshot {
  affinity: string | undefined;
  /** Worker id → in-flight requests (missing = 0). */
  inflight: ReadonlyMap<string, number>;
  /** Worker id → state recorded in the store (missing = healthy). */
  states: ReadonlyMap<string, WorkerState>;
}

/** A taken in-flight slot; release it exactly once when the request finishes. */
export interface Lease {
  readonly id: string;
  readonly pool: string;
  readonly worker: string;
  /** False when taken while the shared store was unreachable: it lives only in this process. */
  readonly shared: boolean;
}

export interface CommitRequest {
  pool: string;
  /** The store key of the routing key (kind-prefixed hash), or undefined for unkeyed requests. */
  key: string | undefined;
  /** Every worker id of the pool, in config order. */
  workers: readonly string[];
  worker: string;
  preconditions: Preconditions;
  affinityTtlMs: number;
}

export type CommitResult =
  | { ok: true; lease: Lease; snapshot: Snapshot; degraded: boolean }
  | { ok: false; snapshot: Snapshot };

export interface RoutingStore {
  readonly backend: 'memory' | 'redis';
  /** The best local knowledge, without I/O. Exact for memory; last known shared state for Redis. */
  cachedSnapshot(pool: string, key: string | undefined, workers: readonly string[]): Snapshot;
  /** Fresh shared state (falls back to the cached snapshot when the shared store is unreachable). */
  snapshot(pool: string, key: string | undefined, workers: readonly string[]): Promise<Snapshot>;
  commit(req: CommitRequest): Promise<CommitResult>;
  /** Gives the lease back; never throws (a lost release expires with the lease TTL). */
  release(lease: Lease): Promise<void>;
  /** Records an operator- or signal-set state; undefined clears it back to healthy. */
  setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void>;
  /** Resolves when the shared store answers; rejects with KvgateError('store_unavailable') otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** Checks preconditions against a snapshot: the one rule both backends apply. */
export function preconditionsHold(p: Preconditions, snap: Snapshot): boolean {
  if (p.affinity !== snap.affinity) return false;
  const inflight = (w: string) => snap.inflight.get(w) ?? 0;
  for (const b of p.below) if (inflight(b.worker) >= b.limit) return false;
  for (const a of p.atOrAbove) if (inflight(a.worker) < a.limit) return false;
  for (const s of p.states) if (!s.in.includes(snap.states.get(s.worker) ?? 'healthy')) return false;
  return true;
}
