/**
 * In-process routing state: the embedded default for a single gate replica, and the engine of the
 * simulator. Affinities live in a bounded LRU with per-entry TTL; leases in per-worker sets.
 */
import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { WorkerState } from '../routing/types.js';
import {
  preconditionsHold,
  type CommitRequest,
  type CommitResult,
  type Lease,
  type RoutingStore,
  type Snapshot,
} from './store.js';

export interface MemoryStoreOptions {
  /** Most affinities kept; the least recently used go first. */
  maxAffinities?: number;
}

export class MemoryStore implements RoutingStore {
  readonly backend = 'memory' as const;
  private readonly affinities: LRUCache<string, string>;
  /** pool → worker → live lease ids */
  private readonly leases = new Map<string, Map<string, Set<string>>>();
  private readonly states = new Map<string, Map<string, WorkerState>>();

  constructor(opts: MemoryStoreOptions = {}) {
    this.affinities = new LRUCache<string, string>({ max: opts.maxAffinities ?? 1_000_000, ttlAutopurge: false });
  }

  cachedSnapshot(pool: string, key: string | undefined, workers: readonly string[]): Snapshot {
    const inflight = new Map<string, number>();
    const live = this.leases.get(pool);
    for (const w of workers) inflight.set(w, live?.get(w)?.size ?? 0);
    return {
      affinity: key === undefined ? undefined : this.affinities.get(affinityKey(pool, key)),
      inflight,
      states: new Map(this.states.get(pool) ?? []),
    };
  }

  snapshot(pool: string, key: string | undefined, workers: readonly string[]): Promise<Snapshot> {
    return Promise.resolve(this.cachedSnapshot(pool, key, workers));
  }

  commit(req: CommitRequest): Promise<CommitResult> {
    return Promise.resolve(this.commitSync(req, true));
  }

  /** The commit as one synchronous step (atomic by construction in one JS thread). */
  commitSync(req: CommitRequest, shared: boolean): CommitResult {
    const before = this.cachedSnapshot(req.pool, req.key, req.workers);
    if (!preconditionsHold(req.preconditions, before)) {
      return { ok: false, snapshot: before };
    }
    if (req.key !== undefined) this.affinities.set(affinityKey(req.pool, req.key), req.worker, { ttl: req.affinityTtlMs });
    const lease: Lease = { id: randomUUID(), pool: req.pool, worker: req.worker, shared };
    this.leaseSet(req.pool, req.worker).add(lease.id);
    return { ok: true, lease, snapshot: this.cachedSnapshot(req.pool, req.key, req.workers), degraded: false };
  }

  release(lease: Lease): Promise<void> {
    this.leases.get(lease.pool)?.get(lease.worker)?.delete(lease.id);
    return Promise.resolve();
  }

  setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void> {
    this.setWorkerStateSync(pool, worker, state);
    return Promise.resolve();
  }

  setWorkerStateSync(pool: string, worker: string, state: WorkerState | undefined): void {
    let m = this.states.get(pool);
    if (!m) this.states.set(pool, (m = new Map()));
    if (state === undefined || state === 'healthy') m.delete(worker);
    else m.set(worker, state);
  }

  ping(): Promise<void> {
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.affinities.clear();
    this.leases.clear();
    return Promise.resolve();
  }

  private leaseSet(pool: string, worker: string): Set<string> {
    let byWorker = this.leases.get(pool);
    if (!byWorker) this.leases.set(pool, (byWorker = new Map()));
    let set = byWorker.get(worker);
    if (!set) byWorker.set(worker, (set = new Set()));
    return set;
  }
}

function affinityKey(pool: string, key: string): string {
  return `${pool}\u0000${key}`;
}
