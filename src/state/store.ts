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
import type { SignalRecord, WorkerSignals } from '../routing/health.js';
import type { Preconditions, WorkerState } from '../routing/types.js';
import type { RequestScope } from '../util/request-scope.js';

/**
 * One session moved off a pressured worker: a worker-side agent can move its KV cache to CPU RAM
 * or NVMe. On Redis these are entries of the stream `<prefix>:{<pool>}:offload` with exactly these
 * fields; the memory store hands them to `onOffload` listeners.
 */
export interface OffloadEvent {
  /** The session key's hash (never the raw id). */
  session: string;
  from: string;
  to: string;
  reason: string;
  /** Milliseconds since the epoch, by the store's clock. */
  time: number;
}

/** Which pool, key and prompt a snapshot or commit is about. */
export interface StateQuery {
  pool: string;
  /** The store key of a session (kind-prefixed hash); undefined when the request has none. */
  key: string | undefined;
  /** Every worker id of the pool, in config order. */
  workers: readonly string[];
  /** The request's chained prompt block hashes (hex), for prefix matching; may be empty. */
  blocks: readonly string[];
  /**
   * Count each worker's live sessions (`Snapshot.live`): those routed to it within this many
   * milliseconds. Absent: not counted.
   */
  liveWindowMs?: number;
}

/** What a decision needs to know about a pool, one key and one prompt. */
export interface Snapshot {
  affinity: string | undefined;
  /** Worker id → in-flight requests (missing = 0). */
  inflight: ReadonlyMap<string, number>;
  /** Worker id → state recorded in the store (missing = healthy). */
  states: ReadonlyMap<string, WorkerState>;
  /** Worker id → leading blocks of the query's prompt the worker probably holds (missing = 0). */
  prefix: ReadonlyMap<string, number>;
  /** The key's requests in flight on its affine worker. */
  keyInflight: number;
  /**
   * Worker id → how many live sessions it has (counted by their commits: `live`), when the query
   * asked (`liveWindowMs`; missing = 0).
   */
  live?: ReadonlyMap<string, number>;
}

/** A taken in-flight slot; release it exactly once when the request finishes. */
export interface Lease {
  readonly id: string;
  readonly pool: string;
  readonly worker: string;
  /** False when taken while the shared store was unreachable: it lives only in this process. */
  readonly shared: boolean;
}

export interface CommitRequest extends StateQuery {
  worker: string;
  preconditions: Preconditions;
  affinityTtlMs: number;
  /** How long an unused prefix block stays in the index. */
  prefixTtlMs: number;
  /** Prefix blocks the chosen worker can hold; the least recently routed go first past this. */
  capacityBlocks: number;
  /**
   * For a session: true, it counts among the chosen worker's live sessions (`Snapshot.live`) until
   * it is routed again or its window lapses; false, it counts nowhere. Absent: left as it was, and
   * a session the commit moves to another worker takes its count, if any, along.
   */
  live?: boolean;
}

/**
 * A failed commit carries the fresh snapshot to decide again on; a successful one does not (the
 * decision is made, and computing the state after it cost a second prefix match per request).
 */
export type CommitResult = { ok: true; lease: Lease; degraded: boolean } | { ok: false; snapshot: Snapshot };

/**
 * The calls a request makes take its `scope` (optional; backends may ignore it): a backend writes
 * its lines about the call with the request's trace ids, a timing wrapper adds the call to the
 * request's store usage. Background work (signals, migration, heartbeats) passes none.
 */
export interface RoutingStore {
  readonly backend: 'memory' | 'redis';
  /** The best local knowledge, without I/O. Exact for memory; last known shared state for Redis. */
  cachedSnapshot(q: StateQuery): Snapshot;
  /** Fresh shared state (falls back to the cached snapshot when the shared store is unreachable). */
  snapshot(q: StateQuery, scope?: RequestScope): Promise<Snapshot>;
  /**
   * Checks the preconditions and, if they hold, atomically: records the key's affinity (when there
   * is a key), takes an in-flight lease on the worker, and records that the worker now holds the
   * prompt's blocks (the prefix index learns from routing decisions).
   */
  commit(req: CommitRequest, scope?: RequestScope): Promise<CommitResult>;
  /**
   * Gives the lease back; never throws (a lost release expires with the lease TTL). Takes no
   * request scope: a lease is given back once its request's decision is over (its span ended),
   * and the Redis store sends many requests' releases in one command.
   */
  release(lease: Lease): Promise<void>;
  /** Records an operator- or signal-set state; undefined clears it back to healthy. */
  setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void>;
  /** Records a scrape of a worker: its signals, or the error that stopped it. Stamped by the store's clock. */
  publishSignals(pool: string, worker: string, update: { signals: WorkerSignals } | { error: string }): Promise<void>;
  /** The last scrape of each worker, aged by the store's clock (so replicas with skewed clocks agree). */
  readSignals(pool: string): Promise<Map<string, SignalRecord>>;
  /** Registers this gate as alive for `ttlMs` and returns every live gate of the pool (shares the scraping). */
  heartbeat(pool: string, gateId: string, ttlMs: number): Promise<string[]>;
  /** A worker's sessions, least recently routed first, and how many it has. */
  coldSessions(pool: string, worker: string, limit: number): Promise<{ keys: string[]; total: number }>;
  /**
   * Moves each session's affinity from `from` to its target, only if it is still on `from`, and
   * records one offload event per moved session. Returns the events recorded.
   */
  migrate(pool: string, from: string, moves: ReadonlyArray<{ key: string; to: string }>, reason: string, opts: { affinityTtlMs: number; streamMaxLen: number }): Promise<OffloadEvent[]>;
  /**
   * Takes a named lock for `ttlMs` if nobody holds it (no release: it lapses). Used so that one
   * replica, not several, runs a migration round while ownership of a worker changes hands.
   */
  tryLock(pool: string, name: string, ttlMs: number): Promise<boolean>;
  /**
   * Records that `worker` produced the stored response whose id hashes to `responseHash` (Responses
   * API), for `ttlMs`. Shared by every replica; never throws (an unreachable shared store keeps it
   * in this process only).
   */
  recordResponse(pool: string, responseHash: string, worker: string, ttlMs: number, scope?: RequestScope): Promise<void>;
  /** The worker that produced a stored response, or undefined when unknown or expired. Never throws. */
  responseWorker(pool: string, responseHash: string, scope?: RequestScope): Promise<string | undefined>;
  /** Calls `listener` for each offload event this store records; returns an unsubscribe function. */
  onOffload(listener: (e: OffloadEvent) => void): () => void;
  /** Resolves when the shared store answers; rejects with KvgateError('store_unavailable') otherwise. */
  ping(): Promise<void>;
  /**
   * The pools the running config has (after a reload): a store may stop tracking the others. The
   * Redis store stops refreshing a pool a reload removed once this replica has nothing left there
   * (no lease, nothing to write back); it would otherwise poll it every refresh for good.
   */
  retainPools(pools: readonly string[]): void;
  close(): Promise<void>;
}

/** The session hash inside a session store key (`s:<hash>`), as offload events carry it. */
export function sessionHash(key: string): string {
  return key.startsWith('s:') ? key.slice(2) : key;
}

/**
 * The facts a commit's preconditions are checked against: a snapshot's, or a store's own state
 * read in place (the memory store checks its live maps rather than copying them into a snapshot
 * first). Lookups only, like `ReadonlyMap.get`.
 */
export interface CommitFacts {
  readonly affinity: string | undefined;
  readonly inflight: { get(worker: string): number | undefined };
  readonly states: { get(worker: string): WorkerState | undefined };
  readonly prefix: { get(worker: string): number | undefined };
}

/** Checks preconditions against a snapshot (or live facts): the one rule both backends apply. */
export function preconditionsHold(p: Preconditions, snap: CommitFacts): boolean {
  if (p.affinity !== snap.affinity) return false;
  // No per-call closure for the count lookup: this runs on every commit.
  for (const b of p.below) if ((snap.inflight.get(b.worker) ?? 0) >= b.limit) return false;
  for (const a of p.atOrAbove) if ((snap.inflight.get(a.worker) ?? 0) < a.limit) return false;
  for (const s of p.states) if (!s.in.includes(snap.states.get(s.worker) ?? 'healthy')) return false;
  if (p.prefix !== undefined) for (const w of p.prefix.over) if ((snap.prefix.get(w) ?? 0) > p.prefix.atMost) return false;
  return true;
}

/** The lease member stored per in-flight request: its id and the key it serves (for per-key counts). */
export function leaseMember(id: string, key: string | undefined): string {
  return key === undefined ? id : `${id}|${key}`;
}

/** The key a lease member serves (`leaseMember`'s inverse; ids never contain the bar). */
export function leaseMemberKey(member: string): string | undefined {
  const bar = member.indexOf('|');
  return bar < 0 ? undefined : member.slice(bar + 1);
}
