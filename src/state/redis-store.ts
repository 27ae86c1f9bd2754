/**
 * Routing state shared through Redis, so that many gate replicas place every session alike.
 *
 * Hot path: one round trip. The gate decides on its local view (the last state Redis returned,
 * refreshed every `store.refresh_ms` and by every reply) and commits with DECIDE_LUA, which checks
 * the decision's preconditions and writes affinity and lease atomically. A stale view costs one
 * more round trip (the failed commit returns fresh state), never a wrong placement.
 *
 * Redis slow or down: commands time out after `store.timeout_ms` and fail fast while disconnected
 * (no offline queue), and the store answers from its local view instead: affinities this replica
 * has seen, the last known loads, and leases kept in-process. Routing degrades, requests do not fail.
 */
import { randomUUID } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { KvgateError } from '../errors.js';
import { WORKER_STATES, type WorkerState } from '../routing/types.js';
import { PrefixIndex } from './prefix-index.js';
import { DECIDE_LUA, HEARTBEAT_LUA, MIGRATE_LUA, PUBLISH_SIGNALS_LUA, READ_SIGNALS_LUA, RENEW_LUA } from './redis-scripts.js';
import { EventEmitter } from 'node:events';
import type { SignalRecord } from '../routing/health.js';
import type { WorkerSignals } from '../signals/parse.js';
import {
  leaseMember,
  preconditionsHold,
  sessionHash,
  type OffloadEvent,
  type CommitRequest,
  type CommitResult,
  type Lease,
  type RoutingStore,
  type Snapshot,
  type StateQuery,
} from './store.js';

export interface RedisStoreOptions {
  url: string;
  keyPrefix: string;
  timeoutMs: number;
  refreshMs: number;
  leaseTtlMs: number;
  localAffinityCacheSize: number;
  /** TTL of the local prefix index in front of Redis's. */
  prefixTtlMs?: number;
  logger: Logger;
}

type DecideReply = [number, string, number[], string[], Array<string | number>, number];

interface PoolView {
  workers: readonly string[];
  inflight: Map<string, number>;
  states: Map<string, WorkerState>;
  /** Prefix knowledge seen from Redis and from this replica's own commits. */
  index: PrefixIndex;
}



export class RedisStore implements RoutingStore {
  readonly backend = 'redis' as const;
  private readonly redis: Redis;
  private readonly views = new Map<string, PoolView>();
  /** Affinities this replica has seen; validated by every commit, so staleness is harmless. */
  private readonly affinityCache: LRUCache<string, { worker: string; keyInflight: number }>;
  /** Leases held by this process and shared through Redis, renewed until released. */
  private readonly liveLeases = new Map<string, Lease>();
  /** Leases taken while Redis was unreachable: counted locally only. */
  private readonly localLeases = new Map<string, Lease>();
  private readonly timers: NodeJS.Timeout[] = [];
  private lastErrorLog = 0;
  private readonly events = new EventEmitter();
  private closed = false;

  constructor(private readonly opts: RedisStoreOptions) {
    const redisOptions: RedisOptions = {
      // Fail fast instead of queueing while disconnected: the caller falls back to local state.
      enableOfflineQueue: false,
      commandTimeout: opts.timeoutMs,
      maxRetriesPerRequest: 0,
      // Reconnect forever with a capped backoff; the gate keeps serving meanwhile.
      retryStrategy: (times) => Math.min(50 * times, 1000),
      lazyConnect: false,
    };
    this.redis = new Redis(opts.url, redisOptions);
    this.redis.on('error', (err: Error) => this.logFailure('redis connection error', err));
    // No numberOfKeys: the key count varies with the pool size and is passed first on each call.
    this.redis.defineCommand('kvgateDecide', { lua: DECIDE_LUA });
    this.redis.defineCommand('kvgateRenew', { numberOfKeys: 1, lua: RENEW_LUA });
    this.redis.defineCommand('kvgatePublishSignals', { numberOfKeys: 1, lua: PUBLISH_SIGNALS_LUA });
    this.redis.defineCommand('kvgateReadSignals', { numberOfKeys: 1, lua: READ_SIGNALS_LUA });
    this.redis.defineCommand('kvgateHeartbeat', { numberOfKeys: 1, lua: HEARTBEAT_LUA });
    this.redis.defineCommand('kvgateMigrate', { numberOfKeys: 1, lua: MIGRATE_LUA });
    this.affinityCache = new LRUCache({ max: opts.localAffinityCacheSize });
    this.timers.push(setInterval(() => void this.refreshAll(), opts.refreshMs).unref());
    this.timers.push(setInterval(() => void this.renewLeases(), Math.max(1000, opts.leaseTtlMs / 3)).unref());
  }

  cachedSnapshot(q: StateQuery): Snapshot {
    const view = this.view(q.pool, q.workers);
    const inflight = new Map<string, number>();
    for (const w of q.workers) inflight.set(w, (view.inflight.get(w) ?? 0) + this.localCount(q.pool, w));
    const cached = q.key === undefined ? undefined : this.affinityCache.get(this.affinityCacheKey(q.pool, q.key));
    return {
      affinity: cached?.worker,
      inflight,
      states: new Map(view.states),
      prefix: q.blocks.length > 0 ? view.index.match(q.blocks) : new Map(),
      keyInflight: cached?.keyInflight ?? 0,
    };
  }

  async snapshot(q: StateQuery): Promise<Snapshot> {
    try {
      const reply = await this.decide(q, { m: 'read', k: q.key === undefined ? 0 : 1 });
      return this.absorb(q, reply);
    } catch (err) {
      this.logFailure('redis read failed; deciding on local state', err);
      return this.cachedSnapshot(q);
    }
  }

  async commit(req: CommitRequest): Promise<CommitResult> {
    const { pool, key, workers } = req;
    const index = (w: string) => workers.indexOf(w) + 1;
    const member = leaseMember(randomUUID(), key);
    const spec = {
      m: 'commit',
      k: key === undefined ? 0 : 1,
      c: index(req.worker),
      e: req.preconditions.affinity ?? '',
      b: req.preconditions.below.filter((b) => index(b.worker) > 0).map((b) => [index(b.worker), b.limit]),
      g: req.preconditions.atOrAbove.filter((g) => index(g.worker) > 0).map((g) => [index(g.worker), g.limit]),
      s: req.preconditions.states.map((s) => [s.worker, s.in]),
      pm: req.preconditions.prefixAtMost ?? -1,
      at: req.affinityTtlMs,
      l: member,
      lt: this.opts.leaseTtlMs,
      pt: req.prefixTtlMs,
      cap: req.capacityBlocks,
    };
    if (spec.c === 0) throw new KvgateError('internal', `worker ${req.worker} is not in pool ${pool}`);
    let reply: DecideReply;
    try {
      reply = await this.decide(req, spec);
    } catch (err) {
      this.logFailure('redis commit failed; routing on local state', err);
      // A timed-out script may still have run: take back the lease it would have written, or it
      // would count against the worker until its TTL (it is never renewed, so it lapses anyway).
      this.redis.zrem(this.inflightKey(pool, req.worker), member).catch(() => undefined);
      return this.commitLocally(req);
    }
    const snapshot = this.absorb(req, reply);
    if (reply[0] !== 1) return { ok: false, snapshot };
    this.view(pool, workers).index.record(req.worker, req.blocks, req.capacityBlocks);
    const lease: Lease = { id: member, pool, worker: req.worker, shared: true };
    this.liveLeases.set(lease.id, lease);
    return { ok: true, lease, snapshot, degraded: false };
  }

  async release(lease: Lease): Promise<void> {
    if (!lease.shared) {
      this.localLeases.delete(lease.id);
      return;
    }
    if (!this.liveLeases.delete(lease.id)) return;
    const view = this.views.get(lease.pool);
    const n = view?.inflight.get(lease.worker);
    if (view && n !== undefined && n > 0) view.inflight.set(lease.worker, n - 1);
    try {
      await this.redis.zrem(this.inflightKey(lease.pool, lease.worker), lease.id);
    } catch (err) {
      // Not renewed any more, so Redis drops it within the lease TTL.
      this.logFailure('redis release failed; the lease will expire', err);
    }
  }

  async setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void> {
    const key = this.statesKey(pool);
    try {
      if (state === undefined || state === 'healthy') await this.redis.hdel(key, worker);
      else await this.redis.hset(key, worker, state);
    } catch (err) {
      throw new KvgateError('store_unavailable', `cannot record state of ${worker}: ${(err as Error).message}`, { cause: err });
    }
    const view = this.views.get(pool);
    if (view) {
      if (state === undefined || state === 'healthy') view.states.delete(worker);
      else view.states.set(worker, state);
    }
  }

  async publishSignals(pool: string, worker: string, update: { signals: WorkerSignals } | { error: string }): Promise<void> {
    const json = 'signals' in update ? JSON.stringify(update.signals) : '';
    await this.script('kvgatePublishSignals', `${this.tag(pool)}:sig`, worker, json, 'error' in update ? update.error : '');
  }

  async readSignals(pool: string): Promise<Map<string, SignalRecord>> {
    const [now, pairs] = (await this.script('kvgateReadSignals', `${this.tag(pool)}:sig`)) as [number, string[]];
    const out = new Map<string, SignalRecord>();
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      try {
        const r = JSON.parse(pairs[i + 1]!) as { s?: WorkerSignals; t?: number; f?: number; e?: string };
        const t = typeof r.t === 'number' && r.t >= 0 ? r.t : undefined;
        out.set(pairs[i]!, {
          // cjson writes an empty object as an empty array.
          signals: r.s && !Array.isArray(r.s) ? r.s : {},
          ageMs: t === undefined ? Infinity : Math.max(0, Number(now) - t),
          failures: r.f ?? 0,
          ...(r.e ? { error: r.e } : {}),
        });
      } catch {
        // A corrupt record reads as no data: the worker counts as down, never as healthy.
      }
    }
    return out;
  }

  async heartbeat(pool: string, gateId: string, ttlMs: number): Promise<string[]> {
    return (await this.script('kvgateHeartbeat', `${this.tag(pool)}:gates`, gateId, ttlMs)) as string[];
  }

  async coldSessions(pool: string, worker: string, limit: number): Promise<{ keys: string[]; total: number }> {
    const key = `${this.tag(pool)}:ws:${worker}`;
    const [keys, total] = await Promise.all([this.redis.zrange(key, '0', String(limit - 1)), this.redis.zcard(key)]);
    return { keys, total };
  }

  async migrate(pool: string, from: string, moves: ReadonlyArray<{ key: string; to: string }>, reason: string, opts: { affinityTtlMs: number; streamMaxLen: number }): Promise<OffloadEvent[]> {
    if (moves.length === 0) return [];
    const spec = { from, moves: moves.map((m) => [m.key, m.to]), reason, ap: `${this.tag(pool)}:a:`, sp: `${this.tag(pool)}:ws:`, at: opts.affinityTtlMs, maxlen: opts.streamMaxLen };
    const reply = (await this.script('kvgateMigrate', `${this.tag(pool)}:offload`, JSON.stringify(spec))) as Array<string | number>;
    const time = Number(reply[0]);
    const events: OffloadEvent[] = [];
    for (let i = 1; i + 1 < reply.length; i += 2) {
      const key = String(reply[i]);
      const e: OffloadEvent = { session: sessionHash(key), from, to: String(reply[i + 1]), reason, time };
      events.push(e);
      this.affinityCache.set(this.affinityCacheKey(pool, key), { worker: e.to, keyInflight: 0 });
      this.events.emit('offload', e);
    }
    return events;
  }

  async tryLock(pool: string, name: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(`${this.tag(pool)}:lock:${name}`, '1', 'PX', ttlMs, 'NX')) === 'OK';
  }

  onOffload(listener: (e: OffloadEvent) => void): () => void {
    this.events.on('offload', listener);
    return () => this.events.off('offload', listener);
  }

  /** The Redis Stream offload events are written to, for a pool. */
  offloadStreamKey(pool: string): string {
    return `${this.tag(pool)}:offload`;
  }

  private script(name: string, ...args: unknown[]): Promise<unknown> {
    const cmd = (this.redis as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[name]!;
    return cmd.call(this.redis, ...args);
  }

  async ping(): Promise<void> {
    try {
      await this.redis.ping();
    } catch (err) {
      throw new KvgateError('store_unavailable', `redis is unreachable: ${(err as Error).message}`, { cause: err });
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    // Give our leases back so other replicas see the capacity at once, not after the TTL.
    const leases = [...this.liveLeases.values()];
    this.liveLeases.clear();
    if (leases.length > 0 && this.redis.status === 'ready') {
      const p = this.redis.pipeline();
      for (const l of leases) p.zrem(this.inflightKey(l.pool, l.worker), l.id);
      await p.exec().catch(() => undefined);
    }
    this.redis.disconnect();
  }

  /** Waits until Redis answers, up to `ms`; false when it did not (the gate then starts degraded). */
  async waitReady(ms: number): Promise<boolean> {
    const until = Date.now() + ms;
    while (Date.now() < until && !this.closed) {
      if (this.redis.status === 'ready') return true;
      await new Promise((r) => setTimeout(r, 25));
    }
    return this.redis.status === 'ready';
  }

  private decide(q: StateQuery, spec: object): Promise<DecideReply> {
    const { pool, key, workers } = q;
    const keys = [
      key === undefined ? this.statesKey(pool) : this.affinityKey(pool, key),
      this.statesKey(pool),
      ...workers.map((w) => this.inflightKey(pool, w)),
    ];
    const full = {
      ...spec,
      w: workers,
      kt: key ?? '',
      bp: `${this.tag(pool)}:b:`,
      wp: `${this.tag(pool)}:bw:`,
      sp: `${this.tag(pool)}:ws:`,
      bl: q.blocks,
    };
    const cmd = (this.redis as unknown as Record<string, (...a: unknown[]) => Promise<DecideReply>>)['kvgateDecide']!;
    return cmd.call(this.redis, keys.length, ...keys, JSON.stringify(full));
  }

  /** Folds a script reply into the local view and returns it as a snapshot. */
  private absorb(q: StateQuery, reply: DecideReply): Snapshot {
    const [, affinity, counts, statePairs, depthPairs, keyInflight] = reply;
    const view = this.view(q.pool, q.workers);
    view.inflight = new Map(q.workers.map((w, i) => [w, Number(counts[i] ?? 0)]));
    view.states = parseStates(statePairs);
    // Redis's prefix match is the truth: teach it to the local index (so the next decision on this
    // prompt needs no extra round trip) and unlearn what Redis no longer has (expired, evicted).
    const prefix = new Map<string, number>();
    for (let i = 0; i + 1 < depthPairs.length; i += 2) {
      const d = Number(depthPairs[i + 1]);
      if (d > 0) prefix.set(String(depthPairs[i]), d);
    }
    if (q.blocks.length > 0) {
      for (const [w, d] of view.index.match(q.blocks)) {
        const truth = prefix.get(w) ?? 0;
        if (truth < d) view.index.forget(w, q.blocks.slice(truth, d));
      }
      for (const [w, d] of prefix) view.index.record(w, q.blocks.slice(0, d));
    }
    if (q.key !== undefined) {
      const ck = this.affinityCacheKey(q.pool, q.key);
      if (affinity) this.affinityCache.set(ck, { worker: affinity, keyInflight: Number(keyInflight) || 0 });
      else this.affinityCache.delete(ck);
    }
    return { ...this.cachedSnapshot(q), prefix };
  }

  private commitLocally(req: CommitRequest): CommitResult {
    const snapshot = this.cachedSnapshot(req);
    // Degraded: the shared affinity is unknown, so only the capacity facts are checked here.
    const holds = preconditionsHold({ ...req.preconditions, affinity: snapshot.affinity, prefixAtMost: undefined }, snapshot);
    if (!holds) return { ok: false, snapshot };
    if (req.key !== undefined) this.affinityCache.set(this.affinityCacheKey(req.pool, req.key), { worker: req.worker, keyInflight: snapshot.keyInflight + 1 });
    this.view(req.pool, req.workers).index.record(req.worker, req.blocks, req.capacityBlocks);
    const lease: Lease = { id: randomUUID(), pool: req.pool, worker: req.worker, shared: false };
    this.localLeases.set(lease.id, lease);
    return { ok: true, lease, snapshot: this.cachedSnapshot(req), degraded: true };
  }

  private async refreshAll(): Promise<void> {
    if (this.closed || this.redis.status !== 'ready') return;
    for (const [pool, view] of this.views) {
      try {
        const q: StateQuery = { pool, key: undefined, workers: view.workers, blocks: [] };
        this.absorb(q, await this.decide(q, { m: 'read', k: 0 }));
      } catch (err) {
        this.logFailure('redis refresh failed', err);
      }
    }
  }

  private async renewLeases(): Promise<void> {
    if (this.closed || this.liveLeases.size === 0 || this.redis.status !== 'ready') return;
    const byKey = new Map<string, string[]>();
    for (const l of this.liveLeases.values()) {
      const k = this.inflightKey(l.pool, l.worker);
      const ids = byKey.get(k);
      if (ids) ids.push(l.id);
      else byKey.set(k, [l.id]);
    }
    const p = this.redis.pipeline();
    for (const [k, ids] of byKey) (p as unknown as Record<string, (...a: unknown[]) => unknown>)['kvgateRenew']!.call(p, k, this.opts.leaseTtlMs, ...ids);
    await p.exec().catch((err: unknown) => this.logFailure('redis lease renewal failed', err));
  }

  private view(pool: string, workers: readonly string[]): PoolView {
    let v = this.views.get(pool);
    if (!v) this.views.set(pool, (v = { workers, inflight: new Map(), states: new Map(), index: new PrefixIndex(this.opts.prefixTtlMs ?? 1_800_000) }));
    else if (v.workers !== workers) v.workers = workers;
    return v;
  }

  private localCount(pool: string, worker: string): number {
    let n = 0;
    for (const l of this.localLeases.values()) if (l.pool === pool && l.worker === worker) n++;
    return n;
  }

  private logFailure(msg: string, err: unknown): void {
    // One line a second at most: a Redis outage must not flood the logs at request rate.
    const now = Date.now();
    if (now - this.lastErrorLog < 1000) return;
    this.lastErrorLog = now;
    this.opts.logger.warn({ err: err instanceof Error ? err.message : String(err) }, msg);
  }

  private tag(pool: string): string {
    return `${this.opts.keyPrefix}:{${pool}}`;
  }
  private affinityKey(pool: string, key: string): string {
    return `${this.tag(pool)}:a:${key}`;
  }
  private statesKey(pool: string): string {
    return `${this.tag(pool)}:s`;
  }
  private inflightKey(pool: string, worker: string): string {
    return `${this.tag(pool)}:f:${worker}`;
  }
  private affinityCacheKey(pool: string, key: string): string {
    return `${pool}\u0000${key}`;
  }
}

function parseStates(pairs: string[]): Map<string, WorkerState> {
  const m = new Map<string, WorkerState>();
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const state = pairs[i + 1] as WorkerState;
    if (WORKER_STATES.includes(state)) m.set(pairs[i]!, state);
  }
  return m;
}
