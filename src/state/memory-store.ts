/**
 * In-process routing state: the embedded default for a single gate replica, and the engine of the
 * simulator. Affinities live in a bounded LRU with per-entry TTL; leases in per-worker maps; the
 * prefix index in a PrefixIndex per pool.
 */
import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { WorkerState } from '../routing/types.js';
import { PrefixIndex } from './prefix-index.js';
import {
  preconditionsHold,
  type CommitRequest,
  type CommitResult,
  type Lease,
  type RoutingStore,
  type Snapshot,
  type StateQuery,
} from './store.js';

export interface MemoryStoreOptions {
  /** Most affinities kept; the least recently used go first. */
  maxAffinities?: number;
}

export class MemoryStore implements RoutingStore {
  readonly backend = 'memory' as const;
  private readonly affinities: LRUCache<string, string>;
  /** pool → worker → live lease id → the key it serves ('' for none) */
  private readonly leases = new Map<string, Map<string, Map<string, string>>>();
  private readonly states = new Map<string, Map<string, WorkerState>>();
  private readonly indexes = new Map<string, PrefixIndex>();

  constructor(opts: MemoryStoreOptions = {}) {
    this.affinities = new LRUCache<string, string>({ max: opts.maxAffinities ?? 1_000_000, ttlAutopurge: false });
  }

  cachedSnapshot(q: StateQuery): Snapshot {
    const inflight = new Map<string, number>();
    const live = this.leases.get(q.pool);
    for (const w of q.workers) inflight.set(w, live?.get(w)?.size ?? 0);
    const affinity = q.key === undefined ? undefined : this.affinities.get(affinityKey(q.pool, q.key));
    let keyInflight = 0;
    if (affinity !== undefined && q.key !== undefined) {
      for (const k of live?.get(affinity)?.values() ?? []) if (k === q.key) keyInflight++;
    }
    return {
      affinity,
      inflight,
      states: new Map(this.states.get(q.pool) ?? []),
      prefix: q.blocks.length > 0 ? (this.indexes.get(q.pool)?.match(q.blocks) ?? new Map()) : new Map(),
      keyInflight,
    };
  }

  snapshot(q: StateQuery): Promise<Snapshot> {
    return Promise.resolve(this.cachedSnapshot(q));
  }

  commit(req: CommitRequest): Promise<CommitResult> {
    return Promise.resolve(this.commitSync(req));
  }

  /** The commit as one synchronous step (atomic by construction in one JS thread). */
  commitSync(req: CommitRequest): CommitResult {
    const before = this.cachedSnapshot(req);
    if (!preconditionsHold(req.preconditions, before)) return { ok: false, snapshot: before };
    if (req.key !== undefined) this.affinities.set(affinityKey(req.pool, req.key), req.worker, { ttl: req.affinityTtlMs });
    const lease: Lease = { id: randomUUID(), pool: req.pool, worker: req.worker, shared: true };
    this.leaseMap(req.pool, req.worker).set(lease.id, req.key ?? '');
    if (req.blocks.length > 0) this.index(req.pool, req.prefixTtlMs).record(req.worker, req.blocks, req.capacityBlocks);
    return { ok: true, lease, snapshot: this.cachedSnapshot(req), degraded: false };
  }

  release(lease: Lease): Promise<void> {
    this.leases.get(lease.pool)?.get(lease.worker)?.delete(lease.id);
    return Promise.resolve();
  }

  setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void> {
    let m = this.states.get(pool);
    if (!m) this.states.set(pool, (m = new Map()));
    if (state === undefined || state === 'healthy') m.delete(worker);
    else m.set(worker, state);
    return Promise.resolve();
  }

  ping(): Promise<void> {
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.affinities.clear();
    this.leases.clear();
    for (const i of this.indexes.values()) i.clear();
    return Promise.resolve();
  }

  private index(pool: string, ttlMs: number): PrefixIndex {
    let i = this.indexes.get(pool);
    if (!i) this.indexes.set(pool, (i = new PrefixIndex(ttlMs)));
    return i;
  }

  private leaseMap(pool: string, worker: string): Map<string, string> {
    let byWorker = this.leases.get(pool);
    if (!byWorker) this.leases.set(pool, (byWorker = new Map()));
    let m = byWorker.get(worker);
    if (!m) byWorker.set(worker, (m = new Map()));
    return m;
  }
}

function affinityKey(pool: string, key: string): string {
  return `${pool}\u0000${key}`;
}
