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
 *
 * Redis back: `resync` brings it in line with what this replica did meanwhile (on every reconnect,
 * and on the next refresh after a slow spell): affinities decided locally are written back (SET NX,
 * so a placement another replica wrote first wins and this replica adopts it), its leases are
 * re-added (Redis may have restarted empty or expired them unrenewed) and local ones become shared,
 * and if Redis lost its data the worker states and affinities this replica knows are restored.
 * Decisions wait for that (within their deadline) after a reconnect. docs/RELIABILITY.md §1.
 *
 * Connection (one server or a cluster, TLS, AUTH): ./redis-connection.ts.
 */
import { randomUUID } from 'node:crypto';
import type { RedisOptions } from 'ioredis';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { KvgateError } from '../errors.js';
import { WORKER_STATES, type WorkerState } from '../routing/types.js';
import { MAX_LOCAL_RESPONSES, ResponseDirectory } from './response-directory.js';
import { PrefixIndex } from './prefix-index.js';
import { connectRedis, type RedisClient, type StoreTls } from './redis-connection.js';
import { DECIDE_LUA, HEARTBEAT_LUA, MIGRATE_LUA, PUBLISH_SIGNALS_LUA, READ_SIGNALS_LUA, RENEW_LUA, RESTORE_LEASES_LUA } from './redis-scripts.js';
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
  /** CA / client certificate for rediss:// URLs. */
  tls?: StoreTls;
}

/** An affinity decided while Redis was unreachable, to be written back when it returns. */
interface UnsyncedAffinity {
  pool: string;
  key: string;
  worker: string;
  expiresAt: number;
}

type Pipeline = ReturnType<RedisClient['pipeline']>;
type ScriptCall = (...args: unknown[]) => unknown;

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
  private readonly redis: RedisClient;
  private readonly views = new Map<string, PoolView>();
  /** Affinities this replica has seen; validated by every commit, so staleness is harmless. */
  private readonly affinityCache: LRUCache<string, { worker: string; keyInflight: number }>;
  /** Leases held by this process and shared through Redis, renewed until released. */
  private readonly liveLeases = new Map<string, Lease>();
  /** Leases taken while Redis was unreachable: counted locally only, until resync shares them. */
  private readonly localLeases = new Map<string, Lease>();
  /** Released leases whose ZREM failed: retried on each refresh, so capacity comes back within refresh_ms, not the lease TTL. */
  private readonly unreleased = new Map<string, Lease>();
  /** Affinities decided locally (degraded), keyed like affinityCache, until written back. */
  private readonly unsynced: LRUCache<string, UnsyncedAffinity>;
  /** The resync running now (it runs again before settling if asked for meanwhile). */
  private resyncRun: Promise<void> | undefined;
  private resyncQueued = false;
  /** (Re)connections seen, and the latest one after which the shared leases were re-added. */
  private connections = 0;
  private leasesRestoredAt = 0;
  /**
   * The resync after a reconnect. Decisions wait for it (within their deadline) so that none is
   * made on a Redis that has not yet been told what this replica knows.
   */
  private resyncAfterConnect: Promise<void> | undefined;
  /** The affinity TTL of the latest commit: what restored affinities get. */
  private affinityTtlMs = 0;
  private readonly timers: NodeJS.Timeout[] = [];
  private lastErrorLog = 0;
  private readonly events = new EventEmitter();
  private readonly responses = new ResponseDirectory(MAX_LOCAL_RESPONSES);
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
    this.redis = connectRedis(opts.url, redisOptions, opts.tls);
    this.redis.on('error', (err: Error) => this.logFailure('redis connection error', err));
    // Every (re)connection: Redis may have restarted empty or missed what we did without it.
    this.redis.on('ready', () => {
      this.connections++;
      const done: Promise<void> = this.resync().finally(() => {
        if (this.resyncAfterConnect === done) this.resyncAfterConnect = undefined;
      });
      this.resyncAfterConnect = done;
    });
    // No numberOfKeys: the key count varies with the pool size and is passed first on each call.
    this.redis.defineCommand('kvgateDecide', { lua: DECIDE_LUA });
    this.redis.defineCommand('kvgateRenew', { numberOfKeys: 1, lua: RENEW_LUA });
    this.redis.defineCommand('kvgatePublishSignals', { numberOfKeys: 1, lua: PUBLISH_SIGNALS_LUA });
    this.redis.defineCommand('kvgateReadSignals', { numberOfKeys: 1, lua: READ_SIGNALS_LUA });
    this.redis.defineCommand('kvgateHeartbeat', { numberOfKeys: 1, lua: HEARTBEAT_LUA });
    this.redis.defineCommand('kvgateMigrate', { numberOfKeys: 1, lua: MIGRATE_LUA });
    this.redis.defineCommand('kvgateRestoreLeases', { numberOfKeys: 1, lua: RESTORE_LEASES_LUA });
    this.affinityCache = new LRUCache({ max: opts.localAffinityCacheSize });
    this.unsynced = new LRUCache({ max: opts.localAffinityCacheSize });
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
    this.affinityTtlMs = req.affinityTtlMs;
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
    return { ok: true, lease, degraded: false };
  }

  async release(lease: Lease): Promise<void> {
    // By id, not by `shared`: a lease taken locally becomes shared once resync re-adds it to Redis.
    if (this.localLeases.delete(lease.id)) return;
    if (!this.liveLeases.delete(lease.id)) return;
    const view = this.views.get(lease.pool);
    const n = view?.inflight.get(lease.worker);
    if (view && n !== undefined && n > 0) view.inflight.set(lease.worker, n - 1);
    try {
      await this.redis.zrem(this.inflightKey(lease.pool, lease.worker), lease.id);
    } catch (err) {
      // Not renewed any more, so Redis drops it within the lease TTL at the latest.
      this.unreleased.set(lease.id, lease);
      this.logFailure('redis release failed; retrying on the next refresh', err);
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

  // Stored responses (Responses API): one plain key per response id, written once with its TTL.
  // Kept in this process as well, so what this replica learned survives Redis being away.
  async recordResponse(pool: string, responseHash: string, worker: string, ttlMs: number): Promise<void> {
    this.responses.record(pool, responseHash, worker, ttlMs);
    try {
      await this.redis.set(this.responseKey(pool, responseHash), worker, 'PX', ttlMs);
    } catch (err) {
      this.logFailure('redis write of a response id failed; kept on this replica only', err);
    }
  }

  async responseWorker(pool: string, responseHash: string): Promise<string | undefined> {
    try {
      return (await this.redis.get(this.responseKey(pool, responseHash))) ?? this.responses.worker(pool, responseHash);
    } catch (err) {
      this.logFailure('redis read of a response id failed; using this replica\'s own', err);
      return this.responses.worker(pool, responseHash);
    }
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
    const leases = [...this.liveLeases.values(), ...this.unreleased.values()];
    this.liveLeases.clear();
    this.unreleased.clear();
    if (leases.length > 0 && this.redis.status === 'ready') {
      await Promise.all(
        [...byPool(leases)].map(([, ls]) => {
          const p = this.redis.pipeline();
          for (const l of ls) p.zrem(this.inflightKey(l.pool, l.worker), l.id);
          return p.exec().catch(() => undefined);
        }),
      );
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
    let late = false;
    // Past the deadline the caller has decided locally: a commit sent now would take a lease nobody holds.
    const send = () => (late ? Promise.reject(new KvgateError('store_unavailable', 'decision deadline passed')) : cmd.call(this.redis, keys.length, ...keys, JSON.stringify(full)));
    return this.withDeadline(this.resyncAfterConnect ? this.resyncAfterConnect.then(send) : send(), () => (late = true));
  }

  /**
   * Bounds a decision's wait by `store.timeout_ms` whatever the client does meanwhile (a cluster
   * client retries through a failover, a script may need EVAL after NOSCRIPT): past it the gate
   * decides locally, well inside Envoy's message timeout.
   */
  private withDeadline<T>(p: Promise<T>, onLate: () => void): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        onLate();
        reject(new KvgateError('store_unavailable', `redis did not answer within ${this.opts.timeoutMs} ms`));
      }, this.opts.timeoutMs);
    });
    return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
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
    // Degraded: checked against what this replica knows. The affinity the decision expected came
    // from this same local cache, so comparing them still catches two concurrent requests of one
    // new session both placing it (the second re-decides and follows the first). Prefix depth is
    // not checked: Redis's index is out of reach.
    const holds = preconditionsHold({ ...req.preconditions, prefixAtMost: undefined }, snapshot);
    if (!holds) return { ok: false, snapshot };
    if (req.key !== undefined) {
      const ck = this.affinityCacheKey(req.pool, req.key);
      // No count is kept while degraded (releases cannot be seen): never let a stale one grow into a spill.
      this.affinityCache.set(ck, { worker: req.worker, keyInflight: 0 });
      this.unsynced.set(ck, { pool: req.pool, key: req.key, worker: req.worker, expiresAt: Date.now() + req.affinityTtlMs });
    }
    this.view(req.pool, req.workers).index.record(req.worker, req.blocks, req.capacityBlocks);
    const lease: Lease = { id: randomUUID(), pool: req.pool, worker: req.worker, shared: false };
    this.localLeases.set(lease.id, lease);
    return { ok: true, lease, degraded: true };
  }

  private async refreshAll(): Promise<void> {
    if (this.closed || this.redis.status !== 'ready') return;
    // Redis answered slowly without disconnecting: what was decided locally still needs writing back.
    if (this.unsynced.size > 0 || this.localLeases.size > 0 || this.connections !== this.leasesRestoredAt) void this.resync();
    if (this.unreleased.size > 0) void this.retryReleases();
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
    // One pipeline per pool: a pool's keys share one cluster slot, different pools may not.
    await Promise.all(
      [...byPool(this.liveLeases.values())].map(([pool, leases]) => {
        const p = this.redis.pipeline();
        for (const [worker, ids] of idsByWorker(leases)) script(p, 'kvgateRenew').call(p, this.inflightKey(pool, worker), this.opts.leaseTtlMs, ...ids);
        return p.exec().catch((err: unknown) => this.logFailure('redis lease renewal failed', err));
      }),
    );
  }

  private async retryReleases(): Promise<void> {
    const leases = [...this.unreleased.values()];
    await Promise.all(
      [...byPool(leases)].map(async ([pool, ls]) => {
        const p = this.redis.pipeline();
        for (const l of ls) p.zrem(this.inflightKey(pool, l.worker), l.id);
        const replies = await p.exec().catch(() => null);
        if (replies && !replies.some(([err]) => err)) for (const l of ls) this.unreleased.delete(l.id);
      }),
    );
  }

  /** Brings Redis in line with this replica after it could not reach Redis (see the file comment). */
  private resync(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.resyncRun) {
      this.resyncQueued = true;
      return this.resyncRun;
    }
    const run = (async () => {
      do {
        this.resyncQueued = false;
        await this.resyncOnce();
      } while (this.resyncQueued && !this.closed);
    })().finally(() => {
      this.resyncRun = undefined;
    });
    this.resyncRun = run;
    return run;
  }

  private async resyncOnce(): Promise<void> {
    if (this.redis.status !== 'ready') return;
    // Re-add the shared leases too after a reconnect: Redis may have lost them.
    const connection = this.connections;
    const restoreLive = connection !== this.leasesRestoredAt;
    try {
      const pools = new Set(this.views.keys());
      for (const u of this.unsynced.values()) pools.add(u.pool);
      for (const l of this.localLeases.values()) pools.add(l.pool);
      for (const pool of pools) await this.resyncPool(pool, restoreLive);
      this.leasesRestoredAt = connection;
    } catch (err) {
      this.logFailure('redis resync failed; retrying on the next refresh', err);
    }
  }

  private async resyncPool(pool: string, restoreLive: boolean): Promise<void> {
    const now = Date.now();
    const affinities = [...this.unsynced.entries()].filter(([, u]) => u.pool === pool && u.expiresAt > now);
    const local = [...this.localLeases.values()].filter((l) => l.pool === pool);
    const live = restoreLive ? [...this.liveLeases.values()].filter((l) => l.pool === pool) : [];
    const statePairs = [...(this.views.get(pool)?.states ?? [])].flat();

    const p = this.redis.pipeline();
    p.exists(this.markerKey(pool));
    for (const [, u] of affinities) {
      const k = this.affinityKey(pool, u.key);
      p.set(k, u.worker, 'PX', u.expiresAt - now, 'NX');
      p.get(k);
    }
    for (const [worker, ids] of idsByWorker([...local, ...live])) script(p, 'kvgateRestoreLeases').call(p, this.inflightKey(pool, worker), this.opts.leaseTtlMs, ...ids);
    const replies = await p.exec();
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error('pipeline aborted');
    if (replies[0]![1] === 0) await this.restoreLostData(pool, statePairs);

    // Adopt what Redis holds now: ours, or the placement another replica wrote first.
    affinities.forEach(([ck, u], i) => {
      const held = replies[2 + 2 * i]![1] as string | null;
      if (held) this.affinityCache.set(ck, { worker: held, keyInflight: this.affinityCache.get(ck)?.keyInflight ?? 0 });
      if (this.unsynced.get(ck) === u) this.unsynced.delete(ck);
    });
    for (const l of local) if (this.localLeases.delete(l.id)) this.liveLeases.set(l.id, l);
    // A lease released while the pipeline ran must not linger until its TTL.
    const gone = [...local, ...live].filter((l) => !this.liveLeases.has(l.id));
    if (gone.length > 0) {
      const z = this.redis.pipeline();
      for (const l of gone) z.zrem(this.inflightKey(pool, l.worker), l.id);
      await z.exec().catch(() => undefined);
    }
  }

  /**
   * Redis lost its data (restarted empty, or a failover lost unreplicated writes): its marker is
   * gone. Without this, operator drains would be forgotten and every session's next request would
   * be placed anew by load, losing its KV cache. The states and affinities this replica knows are
   * the best truth left. HSETNX / SET NX, so whatever was recorded since wins; the marker is written
   * last, so a restore cut short is tried again on the next refresh.
   */
  private async restoreLostData(pool: string, statePairs: string[]): Promise<void> {
    const prefix = this.affinityCacheKey(pool, '');
    const entries: Array<[string, string]> = [];
    if (this.affinityTtlMs > 0) {
      for (const [ck, cached] of this.affinityCache.entries()) if (ck.startsWith(prefix)) entries.push([ck.slice(prefix.length), cached.worker]);
    }
    for (let i = 0; i === 0 || i < entries.length; i += 1000) {
      const p = this.redis.pipeline();
      if (i === 0) for (let j = 0; j + 1 < statePairs.length; j += 2) p.hsetnx(this.statesKey(pool), statePairs[j]!, statePairs[j + 1]!);
      for (const [key, worker] of entries.slice(i, i + 1000)) p.set(this.affinityKey(pool, key), worker, 'PX', this.affinityTtlMs, 'NX');
      const replies = await p.exec();
      const failed = replies?.find(([err]) => err);
      if (!replies || failed) throw failed?.[0] ?? new Error('pipeline aborted');
    }
    await this.redis.set(this.markerKey(pool), '1');
    if (entries.length > 0 || statePairs.length > 0) {
      this.opts.logger.warn({ pool, states: statePairs.length / 2, affinities: entries.length }, 'redis had lost its data; restored the worker states and affinities this replica knew');
    }
  }

  /** Written once per pool; its absence after a reconnect means Redis lost its data. */
  private writeMarker(pool: string): void {
    if (this.redis.status !== 'ready') return;
    this.redis.set(this.markerKey(pool), '1', 'NX').catch(() => undefined);
  }

  private view(pool: string, workers: readonly string[]): PoolView {
    let v = this.views.get(pool);
    if (!v) {
      this.views.set(pool, (v = { workers, inflight: new Map(), states: new Map(), index: new PrefixIndex(this.opts.prefixTtlMs ?? 1_800_000) }));
      this.writeMarker(pool);
    } else if (v.workers !== workers) v.workers = workers;
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
  private responseKey(pool: string, responseHash: string): string {
    return `${this.tag(pool)}:r:${responseHash}`;
  }
  private markerKey(pool: string): string {
    return `${this.tag(pool)}:alive`;
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

function byPool(leases: Iterable<Lease>): Map<string, Lease[]> {
  const m = new Map<string, Lease[]>();
  for (const l of leases) {
    const ls = m.get(l.pool);
    if (ls) ls.push(l);
    else m.set(l.pool, [l]);
  }
  return m;
}

function idsByWorker(leases: Iterable<Lease>): Map<string, string[]> {
  const m = new Map<string, string[]>();
  for (const l of leases) {
    const ids = m.get(l.worker);
    if (ids) ids.push(l.id);
    else m.set(l.worker, [l.id]);
  }
  return m;
}

/** A script defined with defineCommand, on a pipeline (ioredis types do not know custom commands). */
function script(p: Pipeline, name: string): ScriptCall {
  return (p as unknown as Record<string, ScriptCall>)[name]!;
}
