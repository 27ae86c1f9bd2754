/**
 * In-process routing state: the embedded default for a single gate replica, and the engine of the
 * simulator. Affinities live in a bounded LRU with per-entry TTL; leases in per-worker maps; the
 * prefix index in a PrefixIndex per pool.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { LRUCache } from 'lru-cache';
import type { SignalRecord, WorkerSignals } from '../routing/health.js';
import { keepScrape, scrapeRecord, type KeptScrape } from './scrape-record.js';
import type { WorkerState } from '../routing/types.js';
import { LiveSessions } from './live-sessions.js';
import { lruClock } from './lru-clock.js';
import { PrefixIndex } from './prefix-index.js';
import { MAX_LOCAL_RESPONSES, ResponseDirectory } from './response-directory.js';
import {
  preconditionsHold,
  sessionHash,
  type CommitFacts,
  type OffloadEvent,
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
  /**
   * The clock (ms; Date.now by default) every time-based decision of the store reads: affinity,
   * prefix-holding and stored-response TTLs, lock TTLs, signal ages, session recency. The
   * simulator passes its simulated clock, so that these expire after the simulated time a real
   * gate's would, not after the few seconds of wall time a simulation takes.
   */
  now?: () => number;
}

export class MemoryStore implements RoutingStore {
  readonly backend = 'memory' as const;
  private readonly affinities: LRUCache<string, string>;
  /** pool → worker → live lease id → the key it serves ('' for none) */
  private readonly leases = new Map<string, Map<string, Map<string, string>>>();
  private readonly states = new Map<string, Map<string, WorkerState>>();
  private readonly indexes = new Map<string, PrefixIndex>();
  /** pool → worker → session key → last routed (ms): which sessions are coldest */
  private readonly sessions = new Map<string, Map<string, Map<string, number>>>();
  /** pool → its live sessions by worker (the sessions term's) */
  private readonly live = new Map<string, LiveSessions>();
  private readonly signals = new Map<string, Map<string, KeptScrape>>();
  private readonly events = new EventEmitter();
  private readonly locks = new Map<string, number>();
  private readonly responses: ResponseDirectory;
  /** The facts a commit checks, read in place (one reusable reader: commits are synchronous). */
  private readonly facts = new LiveFacts(this.leases, this.states, this.indexes);

  private readonly now: () => number;

  constructor(opts: MemoryStoreOptions = {}) {
    const now = (this.now = opts.now ?? Date.now);
    this.responses = new ResponseDirectory(MAX_LOCAL_RESPONSES, now);
    this.affinities = new LRUCache<string, string>({
      ...lruClock(now),
      // Bounded by count through maxSize (every entry weighs 1), not `max`: lru-cache allocates
      // `max` slots up front, which for a million took ~60 ms of a gate's start-up (and its
      // garbage collection more); this way the slots grow with use. Eviction is the same LRU.
      maxSize: opts.maxAffinities ?? 1_000_000,
      sizeCalculation: () => 1,
      ttlAutopurge: false,
      noDisposeOnSet: true,
      // A forgotten affinity leaves its worker's session list too, so that list stays bounded.
      dispose: (worker, ak) => {
        const [pool, key] = ak.split('\u0000') as [string, string];
        this.sessions.get(pool)?.get(worker)?.delete(key);
      },
    });
  }

  

  cachedSnapshot(q: StateQuery): Snapshot {
    const inflight = new Map<string, number>();
    const live = this.leases.get(q.pool);
    for (const w of q.workers) inflight.set(w, live?.get(w)?.size ?? 0);
    const affinity = this.affinityOf(q);
    let keyInflight = 0;
    const states = this.states.get(q.pool);
    if (affinity !== undefined && q.key !== undefined) {
      for (const k of live?.get(affinity)?.values() ?? []) if (k === q.key) keyInflight++;
    }
    const snap: Snapshot = {
      affinity,
      inflight,
      // A copy (a snapshot is a moment; operator states change in place), or a shared empty one.
      states: states !== undefined && states.size > 0 ? new Map(states) : NO_STATES,
      // The index's own (read-only) map: a snapshot only reads it.
      prefix: (q.blocks.length > 0 ? this.indexes.get(q.pool)?.depths(q.blocks, q.workers) : undefined) ?? NO_PREFIX,
      keyInflight,
    };
    if (q.liveWindowMs !== undefined) snap.live = this.liveOf(q.pool).totalsSince(this.now() - q.liveWindowMs, q.workers);
    return snap;
  }

  snapshot(q: StateQuery): Promise<Snapshot> {
    return Promise.resolve(this.cachedSnapshot(q));
  }

  recordResponse(pool: string, responseHash: string, worker: string, ttlMs: number): Promise<void> {
    this.responses.record(pool, responseHash, worker, ttlMs);
    return Promise.resolve();
  }

  responseWorker(pool: string, responseHash: string): Promise<string | undefined> {
    return Promise.resolve(this.responses.worker(pool, responseHash));
  }

  commit(req: CommitRequest): Promise<CommitResult> {
    return Promise.resolve(this.commitSync(req));
  }

  /** The commit as one synchronous step (atomic by construction in one JS thread). */
  commitSync(req: CommitRequest): CommitResult {
    // Checked against the live maps, not a snapshot of them: a snapshot per commit copied every
    // worker's count into a new Map (and the query into a new object) only to read one or two.
    // A failed commit returns the snapshot to decide again on.
    const facts = this.facts.of(req, req.preconditions.prefix !== undefined, this.affinityOf(req));
    if (!preconditionsHold(req.preconditions, facts)) return { ok: false, snapshot: this.cachedSnapshot(req) };
    const before = facts.affinity;
    if (req.key !== undefined) {
      this.affinities.set(affinityKey(req.pool, req.key), req.worker, { ttl: req.affinityTtlMs });
      if (before !== undefined && before !== req.worker) this.sessionMap(req.pool, before).delete(req.key);
      const m = this.sessionMap(req.pool, req.worker);
      // Re-insert so map order is recency order: the first entries are the coldest.
      m.delete(req.key);
      m.set(req.key, this.now());
      if (req.live !== undefined) this.liveOf(req.pool).record(req.key, req.worker, req.live, this.now());
      // Moved without a say on its count (the proxy reported another worker serving it): its count goes along.
      else if (before !== undefined && before !== req.worker) this.live.get(req.pool)?.moved(req.key, req.worker);
    }
    const lease: Lease = { id: randomUUID(), pool: req.pool, worker: req.worker, shared: true };
    this.leaseMap(req.pool, req.worker).set(lease.id, req.key ?? '');
    if (req.blocks.length > 0) {
      const index = this.index(req.pool, req.prefixTtlMs);
      // A commit carries the pool's worker list as configured now: the index releases the workers
      // a reload removed once their blocks lapse, so churning worker ids do not pile up.
      index.configure(req.workers);
      index.record(req.worker, req.blocks, req.capacityBlocks);
    }
    return { ok: true, lease, degraded: false };
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

  publishSignals(pool: string, worker: string, update: { signals: WorkerSignals } | { error: string }): Promise<void> {
    let m = this.signals.get(pool);
    if (!m) this.signals.set(pool, (m = new Map()));
    m.set(worker, keepScrape(m.get(worker), update, this.now()));
    return Promise.resolve();
  }

  readSignals(pool: string): Promise<Map<string, SignalRecord>> {
    const now = this.now();
    const out = new Map<string, SignalRecord>();
    for (const [w, r] of this.signals.get(pool) ?? []) out.set(w, scrapeRecord(r, now));
    return Promise.resolve(out);
  }

  heartbeat(_pool: string, gateId: string): Promise<string[]> {
    // One process, one gate: it scrapes every worker.
    return Promise.resolve([gateId]);
  }

  coldSessions(pool: string, worker: string, limit: number): Promise<{ keys: string[]; total: number }> {
    const m = this.sessionMap(pool, worker);
    for (const k of [...m.keys()]) if (this.affinities.get(affinityKey(pool, k)) !== worker) m.delete(k);
    // By when each was last routed: a migration appends a session with its own time (`migrate`),
    // maybe older than the worker's others. The sort is stable (ties keep insertion order) and
    // nearly linear on the mostly ordered map; this runs per migration round, not per request.
    const keys = [...m].sort((a, b) => a[1] - b[1]).slice(0, limit).map(([k]) => k);
    return Promise.resolve({ keys, total: m.size });
  }

  migrate(pool: string, from: string, moves: ReadonlyArray<{ key: string; to: string }>, reason: string, opts: { affinityTtlMs: number }): Promise<OffloadEvent[]> {
    const out: OffloadEvent[] = [];
    for (const { key, to } of moves) {
      const ak = affinityKey(pool, key);
      if (this.affinities.get(ak) !== from) continue;
      const ttl = this.affinities.getRemainingTTL(ak);
      this.affinities.set(ak, to, { ttl: ttl > 0 && Number.isFinite(ttl) ? ttl : opts.affinityTtlMs });
      const fromSessions = this.sessionMap(pool, from);
      const at = this.now();
      // The session keeps the recency it had (as on Redis, where it keeps the score of its lapse
      // time): it was moved, not used. It is among the coldest on its new worker, and so among the
      // first to move again if that worker turns pressured, which is right: no request has built
      // its KV cache there (its cache was on the old worker, offloaded with this event), so moving
      // it again costs no HBM, while taking it for the most recent would send the new worker's
      // active sessions, whose caches are hot there, ahead of it.
      const routed = fromSessions.get(key) ?? at;
      fromSessions.delete(key);
      const toSessions = this.sessionMap(pool, to);
      toSessions.delete(key);
      toSessions.set(key, routed);
      this.live.get(pool)?.moved(key, to);
      const e: OffloadEvent = { session: sessionHash(key), from, to, reason, time: at };
      out.push(e);
      this.events.emit('offload', e);
    }
    return Promise.resolve(out);
  }

  tryLock(pool: string, name: string, ttlMs: number): Promise<boolean> {
    const k = `${pool}\u0000${name}`;
    const now = this.now();
    if ((this.locks.get(k) ?? -Infinity) > now) return Promise.resolve(false);
    this.locks.set(k, now + ttlMs);
    return Promise.resolve(true);
  }

  onOffload(listener: (e: OffloadEvent) => void): () => void {
    this.events.on('offload', listener);
    return () => this.events.off('offload', listener);
  }

  ping(): Promise<void> {
    return Promise.resolve();
  }

  /** Nothing polls a pool here: a removed pool's state lapses with its TTLs. */
  retainPools(_pools: readonly string[]): void {}

  close(): Promise<void> {
    this.affinities.clear();
    this.leases.clear();
    for (const i of this.indexes.values()) i.clear();
    for (const l of this.live.values()) l.clear();
    return Promise.resolve();
  }

  /** Workers the pool's prefix index has numbered, now and at most at once (tests read it: no endpoint does). */
  prefixWorkers(pool: string): { workers: number; numbers: number } {
    return this.indexes.get(pool)?.numberedWorkers() ?? { workers: 0, numbers: 0 };
  }

  /** The key's worker (lru-cache's `get`: it counts as a use, as every snapshot's read did). */
  private affinityOf(q: StateQuery): string | undefined {
    return q.key === undefined ? undefined : this.affinities.get(affinityKey(q.pool, q.key));
  }

  private index(pool: string, ttlMs: number): PrefixIndex {
    let i = this.indexes.get(pool);
    if (!i) this.indexes.set(pool, (i = new PrefixIndex(ttlMs, this.now)));
    return i;
  }

  private liveOf(pool: string): LiveSessions {
    let l = this.live.get(pool);
    if (!l) this.live.set(pool, (l = new LiveSessions()));
    return l;
  }

  private sessionMap(pool: string, worker: string): Map<string, number> {
    let byWorker = this.sessions.get(pool);
    if (!byWorker) this.sessions.set(pool, (byWorker = new Map()));
    let m = byWorker.get(worker);
    if (!m) byWorker.set(worker, (m = new Map()));
    return m;
  }

  private leaseMap(pool: string, worker: string): Map<string, string> {
    let byWorker = this.leases.get(pool);
    if (!byWorker) this.leases.set(pool, (byWorker = new Map()));
    let m = byWorker.get(worker);
    if (!m) byWorker.set(worker, (m = new Map()));
    return m;
  }
}

const NO_PREFIX: ReadonlyMap<string, number> = new Map();

/**
 * A commit's facts as the store holds them now, exactly what `cachedSnapshot(req)` would show:
 * in-flight counts of the query's workers (0 for any other, as a snapshot has no entry for it),
 * operator states, the key's affinity, and the prefix match only when a precondition bounds it.
 */
class LiveFacts implements CommitFacts {
  affinity: string | undefined = undefined;
  private workers: readonly string[] = [];
  private live: Map<string, Map<string, string>> | undefined = undefined;
  private stateMap: Map<string, WorkerState> | undefined = undefined;
  private depth: ReadonlyMap<string, number> = NO_PREFIX;
  readonly inflight = { get: (w: string): number => (this.workers.includes(w) ? (this.live?.get(w)?.size ?? 0) : 0) };
  readonly states = { get: (w: string): WorkerState | undefined => this.stateMap?.get(w) };
  readonly prefix = { get: (w: string): number | undefined => this.depth.get(w) };

  constructor(
    private readonly leases: Map<string, Map<string, Map<string, string>>>,
    private readonly allStates: Map<string, Map<string, WorkerState>>,
    private readonly indexes: Map<string, PrefixIndex>,
  ) {}

  /** Points the reader at one commit's pool and query; `affinity` is read by the store (its LRU). */
  of(req: CommitRequest, matchPrefix: boolean, affinity?: string): this {
    this.affinity = affinity;
    this.workers = req.workers;
    this.live = this.leases.get(req.pool);
    this.stateMap = this.allStates.get(req.pool);
    this.depth = (matchPrefix && req.blocks.length > 0 ? this.indexes.get(req.pool)?.depths(req.blocks, req.workers) : undefined) ?? NO_PREFIX;
    return this;
  }
}
const NO_STATES: ReadonlyMap<string, WorkerState> = new Map();

function affinityKey(pool: string, key: string): string {
  return `${pool}\u0000${key}`;
}
