/**
 * Routing state shared through Redis, so that many gate replicas place every session alike.
 *
 * Hot path: one round trip. The gate decides on its local view (the last state Redis returned,
 * refreshed every `store.refresh_ms` and by every reply, plus this replica's commits still on
 * their way) and commits with DECIDE_LUA, which checks the decision's preconditions and writes
 * affinity and lease atomically. A stale view costs one more round trip (the failed commit
 * returns fresh state), never a wrong placement.
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
import { EventEmitter } from 'node:events';
import { ReplyError, type RedisOptions } from 'ioredis';
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import { DEFAULTS, storeSocketTimeoutMs } from '../config/defaults.js';
import { KvgateError } from '../errors.js';
import { Coalesced, skipWhileRunning } from '../util/coalesced.js';
import { requestLogger, type RequestScope } from '../util/request-scope.js';
import type { SignalRecord, WorkerSignals } from '../routing/health.js';
import { WORKER_STATES, type WorkerState } from '../routing/types.js';
import { PrefixIndex } from './prefix-index.js';
import * as cmd from './redis-commands.js';
import { PoolKeys, type DecideCommit, type DecideReply, type StoredScrape } from './redis-commands.js';
import { closeRedis, connectRedis, type RedisClient, type StoreTls } from './redis-connection.js';
import { RedisLedger } from './redis-ledger.js';
import { MAX_LOCAL_RESPONSES, ResponseDirectory } from './response-directory.js';
import {
  leaseMember,
  leaseMemberKey,
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

/** At most one line per this while Redis keeps failing (see logFailure). */
const FAILURE_LOG_INTERVAL_MS = 60_000;

/**
 * A release waits at most this long for a command of this replica to the same pool to carry it
 * (./redis-ledger.ts, "releasing"); then it goes on its own. Under load the next commit comes
 * sooner and takes it along, so a release costs no command of its own; idle, other replicas see
 * the capacity back this much later than they would, which only makes them a little cautious.
 */
const RELEASE_FLUSH_MS = 5;

/** The local prefix index's TTL when the options give none (the config default's 30 minutes). */
const DEFAULT_LOCAL_PREFIX_TTL_MS = 1_800_000;
/** A pool with no live session counted yet. */
const NO_LIVE: ReadonlyMap<string, number> = new Map();
/**
 * The refresh keeps counting a pool's live sessions for this long after the last decision that
 * asked for them, then stops and forgets the count. Long enough that a replica whose long-prompt
 * sessions come minutes apart still starts each decision from a current count (the refresh's
 * count costs Redis one ZCOUNT a worker); bounded so that once decisions stop asking (a reload
 * turned the sessions term off, or no session's prompt reaches its threshold any more) the
 * counting stops too.
 */
const LIVE_ASK_IDLE_MS = 600_000;
/** At most this many releases ride on one script call (its arguments stay small). */
const MAX_RELEASES_PER_CALL = 256;
/**
 * At most this many releases Redis did not take are sent again per run (`retryReleases`, one run
 * at a time): at most this many removals wait on the connection, however long the list grew.
 */
const MAX_RETRIED_RELEASES_PER_RUN = 1024;
/**
 * At most this many affinities are written back by one script call (WRITE_BACK_LUA): Redis runs
 * nothing else while a script runs, and a restore may write back a whole cache.
 */
const WRITE_BACKS_PER_CALL = 1000;

export interface RedisStoreOptions {
  url: string;
  keyPrefix: string;
  timeoutMs: number;
  refreshMs: number;
  leaseTtlMs: number;
  localAffinityCacheSize: number;
  /** TTL of the local prefix index in front of Redis's. */
  prefixTtlMs?: number;
  /**
   * How recently a prefix must have been recorded for a commit to leave it as it is (`freshWindowMs`
   * of the prefix TTL by default). 0 records every commit in full: the exact LRU the memory store
   * keeps, which the tests that compare the two stores block for block ask for.
   */
  prefixFreshMs?: number;
  logger: Logger;
  /** CA / client certificate for rediss:// URLs. */
  tls?: StoreTls;
  /** Decisions waiting on Redis past which this replica decides locally (`DEFAULTS.storeMaxWaitingDecisions`). */
  maxWaitingDecisions?: number;
  /** How long the refresh counts live sessions after the last decision that asked (LIVE_ASK_IDLE_MS). */
  liveAskIdleMs?: number;
}

interface PoolView {
  workers: readonly string[];
  /** `workers` as a set (rebuilt when the list changes). */
  workerSet: ReadonlySet<string>;
  inflight: Map<string, number>;
  states: Map<string, WorkerState>;
  /** Prefix knowledge seen from Redis and from this replica's own commits. */
  index: PrefixIndex;
  /**
   * What this replica recorded in `index` lately: `<worker>\0<capacity>\0<deepest block>` → when.
   * A chain's deepest block names the whole chain (hashes are chained), so a hit means those very
   * blocks were recorded for the worker that recently. Cleared every `freshWindowMs` of the index's
   * TTL; see `recordUnlessFresh`.
   */
  recorded: Map<string, number>;
  recordedSince: number;
  /**
   * This replica's commits on their way to Redis, by worker: none of them is in `inflight` yet
   * (a reply counts only the commands Redis ran before it). Added to the view a decision starts
   * from, so that a burst of requests decided before any reply spreads as it would on fresh
   * counts, instead of every one of them taking the same least loaded worker up to its limit.
   */
  sending: Map<string, number>;
  /**
   * Each worker's live sessions (the sessions term's), as Redis last counted them for a decision
   * or a refresh that asked (`liveWindowMs`), and that window: the refresh asks again with it
   * until no decision has asked for `liveAskIdleMs` (then both are cleared).
   */
  live: Map<string, number> | undefined;
  liveWindowMs: number | undefined;
  /** When a decision (not a refresh) last asked for live sessions, in ms since the epoch. */
  liveAskedAt: number;
}

/**
 * A pool's worker states this replica wrote (undefined: cleared to healthy), by worker, each with
 * the number of the write among this store's commands (`RedisStore.issued`). A reply to a read
 * sent before the write cannot have seen it, yet may be handled after it (both answers in one
 * packet: the write's takes fewer steps back to the view), and would put the old state back until
 * the next refresh: a worker this very replica drained would get new sessions for up to
 * `refresh_ms`. So a reply sent earlier keeps these states; the first reply sent later is the
 * truth again (the write, or something newer another replica wrote) and retires the entry. Kept
 * apart from the pool's view so that a write made before the replica has one (an operator draining
 * a worker on a replica that has not routed yet) is in its first view too. Almost always empty.
 */
type OwnStates = Map<string, { state: WorkerState | undefined; issued: number }>;

/**
 * How recently a prefix must have been recorded for a commit to skip recording it again: a
 * thousandth of the prefix TTL, at most a second (30 min TTL: 1 s). It applies twice: a replica's
 * local prefix index (the copy in front of Redis's) skips recording a chain it recorded that
 * recently, and Redis skips rewriting the holdings of a prefix the chosen worker was sent that
 * recently, writing only the blocks past it (DECIDE_LUA). A skipped record lets a holding lapse,
 * and rank for the capacity trim, at most this much older than routing would have made it (0.06%
 * of the TTL: a block about to leave a busy worker's HBM either way); a local one is re-taught by
 * Redis on the next reply that matches it.
 */
function freshWindowMs(prefixTtlMs: number): number {
  return Math.min(1000, Math.floor(prefixTtlMs / 1000));
}

/** A script reply and the number of its command among this store's (`RedisStore.issued`). */
type IssuedReply = DecideReply & { issued: number };

export class RedisStore implements RoutingStore {
  readonly backend = 'redis' as const;
  private readonly redis: RedisClient;
  private readonly views = new Map<string, PoolView>();
  /** The running config's pools (retainPools: the gate says at start and at each reload); undefined, for a store used without a gate, means every pool seen. */
  private configuredPools: ReadonlySet<string> | undefined;
  private readonly keys = new Map<string, PoolKeys>();
  /**
   * Affinities this replica has seen; validated by every commit, so staleness is harmless there.
   * Each lapses when Redis's does (`cacheAffinity`): decisions made while Redis is away, and the
   * restore after Redis lost its data, trust them without a commit to check them.
   */
  private readonly affinityCache: LRUCache<string, { worker: string; keyInflight: number }>;
  /** Leases and locally decided affinities Redis may not know (./redis-ledger.ts). */
  private readonly ledger: RedisLedger;
  /** One resync at a time; asked for while one runs, it runs once more before settling. */
  private readonly resyncs = new Coalesced(
    () => this.resyncOnce(),
    () => !this.closed,
  );
  /** (Re)connections seen, and the latest one after which the shared leases were re-added. */
  private connections = 0;
  private leasesRestoredAt = 0;
  /**
   * The resync after a reconnect. Decisions wait for it (within their deadline) so that none is
   * made on a Redis that has not yet been told what this replica knows.
   */
  private resyncAfterConnect: Promise<void> | undefined;
  /**
   * Redis's clock minus this process's, as last seen (a reply's time against its arrival, so never
   * more than the true offset): turns a decision's deadline into Redis time for the commit's
   * `notAfter`. Undefined until Redis first answered.
   */
  private clockOffsetMs: number | undefined;
  /** The affinity TTL of the latest commit: what a restored affinity of unknown expiry gets. */
  private affinityTtlMs = 0;
  private readonly timers: NodeJS.Timeout[] = [];
  private lastErrorLog = -Infinity;
  private failuresNotLogged = 0;
  private readonly events = new EventEmitter();
  private readonly responses = new ResponseDirectory(MAX_LOCAL_RESPONSES);
  /** Callers of `release` waiting for Redis to have taken their lease out (by lease id). */
  private readonly releaseWaiters = new Map<string, () => void>();
  private releaseTimer: NodeJS.Timeout | undefined;
  /**
   * Retries of releases Redis did not take (`retryReleases`): one run at a time; refreshes while it
   * is on its way ask for one more run after it, not for runs beside it.
   */
  private readonly releaseRetries = new Coalesced(
    () => this.retryReleases(),
    () => !this.closed && this.ledger.unreleasedCount > 0,
  );
  /**
   * Numbers this store's reads and state writes in the order they are sent. One connection (one
   * cluster node for a pool: its keys share a slot) runs commands in that order, so a reply to a
   * command numbered below a write was read before it (see `OwnStates`).
   */
  private issued = 0;
  /** By pool (`OwnStates`). */
  private readonly ownStates = new Map<string, OwnStates>();
  private closed = false;
  /** Decisions handed to the client and not answered or failed by it yet (not by our deadline). */
  private waiting = 0;
  private readonly maxWaiting: number;
  /** The key one server's readiness deletes (`ping`): no pool's, and never written. */
  private readonly readinessProbeKey: string;

  constructor(private readonly opts: RedisStoreOptions) {
    this.readinessProbeKey = `${opts.keyPrefix}:readiness-probe`;
    this.maxWaiting = opts.maxWaitingDecisions ?? DEFAULTS.storeMaxWaitingDecisions;
    const redisOptions: RedisOptions = {
      // Fail fast instead of queueing while disconnected: the caller falls back to local state.
      enableOfflineQueue: false,
      // No commandTimeout: every wait is bounded by `withDeadline` instead, and a command's promise
      // then settles only when Redis answers or the connection fails. The client keeps a command
      // whose caller gave up until its reply either way; so `waiting` counts what it really holds
      // (ioredis's timeout settled the promise early and hid the queue behind it).

      // A connection silent that long while replies are due is replaced (see the function).
      socketTimeout: storeSocketTimeoutMs(opts.timeoutMs, opts.leaseTtlMs),
      maxRetriesPerRequest: 0,
      // Reconnect forever with a capped backoff; the gate keeps serving meanwhile.
      retryStrategy: (times) => Math.min(50 * times, 1000),
      lazyConnect: false,
      // No auto-pipelining: ioredis runs one auto-pipeline per connection at a time, so every
      // command issued while one is on its way waits for all of its replies (`executeAutoPipeline`
      // in ioredis's autoPipelining.js), a round trip of Redis's work added to each decision under
      // load. Written at once instead, commands still pipeline on the one connection (replies in
      // order, which OwnStates relies on) at the cost of a write per command. `kvgate bench`, Redis
      // rows, alternating runs: decisions/s +19% at 2 KB and 32 KB, +4% at 400 KB, half-load
      // decision p50 lower at every size; the gate's CPU per request within noise.
      enableAutoPipelining: false,
      reconnectOnError: reconnectOnReadonly(),
    };
    this.redis = connectRedis(opts.url, redisOptions, opts.tls);
    this.redis.on('error', (err: Error) => this.logFailure('redis connection error', err));
    // Every (re)connection: Redis may have restarted empty or missed what we did without it.
    this.redis.on('ready', () => {
      this.connections++;
      this.learnClock();
      const done: Promise<void> = this.resync().finally(() => {
        if (this.resyncAfterConnect === done) this.resyncAfterConnect = undefined;
      });
      this.resyncAfterConnect = done;
    });
    cmd.defineScripts(this.redis);
    // Per-entry TTLs (`cacheAffinity`), read off the clock at each check: no timer (lru-cache's
    // default caches a reading for 1 ms with a timer per reading).
    this.affinityCache = new LRUCache({ max: opts.localAffinityCacheSize, ttlResolution: 0 });
    this.ledger = new RedisLedger(opts.localAffinityCacheSize, opts.leaseTtlMs);
    // One refresh and one renewal at a time: a tick while the last still waits on a slow Redis is
    // skipped (store.timeout_ms may exceed store.refresh_ms).
    const refresh = skipWhileRunning(() => this.refreshAll());
    const renew = skipWhileRunning(() => this.renewLeases());
    this.timers.push(setInterval(() => void refresh(), opts.refreshMs).unref());
    this.timers.push(setInterval(() => void renew(), Math.max(1000, opts.leaseTtlMs / 3)).unref());
  }

  /** The last state Redis returned, this replica's local leases, and its commits still on their way. */
  cachedSnapshot(q: StateQuery): Snapshot {
    return this.localSnapshot(q, true);
  }

  /**
   * What this replica knows without asking Redis. `sending`: count the commits still on their way
   * too. Only the view a decision starts from does: a view that answers for Redis (a failed
   * commit's state, a read that failed, a commit checked locally) must not hold a worker full on
   * commits that may yet fail, or a decision would move a session off a worker Redis still has
   * room on (and its `atOrAbove` fail), or a degraded commit would shed on commits that timed out.
   * `prefix`: the match to report when the caller already has it (Redis's, from a reply), instead
   * of a walk of the local index.
   */
  private localSnapshot(q: StateQuery, sending: boolean, prefix?: Map<string, number>): Snapshot {
    const view = this.view(q.pool, q.workers);
    const inflight = new Map<string, number>();
    for (const w of q.workers) inflight.set(w, (view.inflight.get(w) ?? 0) + this.ledger.localCount(q.pool, w) + (sending ? (view.sending.get(w) ?? 0) : 0));
    const cached = q.key === undefined ? undefined : this.affinityCache.get(this.affinityCacheKey(q.pool, q.key));
    const snap: Snapshot = {
      affinity: cached?.worker,
      inflight,
      states: new Map(view.states),
      prefix: prefix ?? (q.blocks.length > 0 ? view.index.match(q.blocks, q.workers) : new Map<string, number>()),
      keyInflight: cached?.keyInflight ?? 0,
    };
    // Live sessions are counted in Redis, shared by every replica: as the last reply that counted
    // them said (a commit's own, or the refresh's), like the in-flight counts.
    if (q.liveWindowMs !== undefined) snap.live = view.live ?? NO_LIVE;
    return snap;
  }

  async snapshot(q: StateQuery, scope?: RequestScope): Promise<Snapshot> {
    try {
      return this.absorb(q, await this.decide(q));
    } catch (err) {
      this.logFailure('redis read failed; deciding on local state', err, scope);
      return this.localSnapshot(q, false);
    }
  }

  async commit(req: CommitRequest, scope?: RequestScope): Promise<CommitResult> {
    const { pool, key, workers } = req;
    if (!workers.includes(req.worker)) throw new KvgateError('internal', `worker ${req.worker} is not in pool ${pool}`);
    const member = leaseMember(randomUUID(), key);
    this.affinityTtlMs = req.affinityTtlMs;
    const commit: Omit<DecideCommit, 'notAfter'> = {
      worker: req.worker,
      preconditions: req.preconditions,
      affinityTtlMs: req.affinityTtlMs,
      leaseMember: member,
      leaseTtlMs: this.opts.leaseTtlMs,
      prefixTtlMs: req.prefixTtlMs,
      freshMs: this.opts.prefixFreshMs ?? freshWindowMs(req.prefixTtlMs),
      capacityBlocks: req.capacityBlocks,
    };
    if (req.live !== undefined) commit.live = req.live;
    let reply: IssuedReply;
    const sent = { value: false };
    const sending = this.view(pool, workers).sending;
    sending.set(req.worker, (sending.get(req.worker) ?? 0) + 1);
    try {
      try {
        reply = await this.decide(req, commit, sent);
      } finally {
        // Before the reply is learned: from here on it is in `inflight` (held) or nowhere (failed).
        const n = (sending.get(req.worker) ?? 1) - 1;
        if (n > 0) sending.set(req.worker, n);
        else sending.delete(req.worker);
      }
      if (reply.late) throw new LateCommit();
    } catch (err) {
      this.logFailure('redis commit failed; routing on local state', err, scope);
      // A script that was sent may have run though its reply did not come in time: take back the
      // lease it would have written, or it would count against the worker until its TTL (it is
      // never renewed). As a release: its removal rides on the next command to the pool, and one
      // that fails too (the connection broke) is retried on each refresh, where a removal sent
      // once was lost with the connection. A resend that lands later writes nothing: it carries
      // the deadline (`notAfter`). A commit Redis refused as late, or one never sent (no
      // connection, or one the client refused unwritten), wrote nothing; so did one Redis
      // answered with an error (READONLY from a demoted master, OOM, CLUSTERDOWN): the script did
      // not run, or stopped at its first write, which comes before the lease's (DECIDE_LUA).
      // Taken back, each of those was a removal sent for nothing, and while Redis kept refusing
      // writes, one more kept for retry per request.
      if (sent.value && !(err instanceof LateCommit) && !(err instanceof ReplyError) && !refusedUnwritten(err)) {
        this.ledger.takeBack({ id: member, pool, worker: req.worker, shared: true });
        this.scheduleReleaseFlush();
      }
      return this.commitLocally(req);
    }
    if (!reply.ok) return { ok: false, snapshot: this.absorb(req, reply) };
    // No snapshot after a commit that held (nobody reads it): only what the reply teaches. The
    // chosen worker now holds the whole prompt (recorded with its capacity).
    const { committedDepth } = this.learn(req, reply, { committed: req.worker });
    this.recordUnlessFresh(this.view(pool, workers), req.worker, req.blocks, req.blocks.length, req.capacityBlocks, committedDepth === req.blocks.length);
    const lease: Lease = { id: member, pool, worker: req.worker, shared: true };
    this.ledger.addShared(lease);
    return { ok: true, lease, degraded: false };
  }

  /**
   * Resolves once Redis has taken the lease out (or, failing that, once it is queued for retry on
   * the refresh). The removal rides on this replica's next command to the pool, or goes on its own
   * after RELEASE_FLUSH_MS: one command fewer per request under load.
   * Takes no request scope: many requests' removals go out in one command, and a failure is
   * about all of them, so its line carries no one request's trace ids.
   */
  async release(lease: Lease): Promise<void> {
    // By id, not by `shared`: a lease taken locally becomes shared once resync re-adds it to Redis.
    if (this.ledger.release(lease.id) !== 'shared') return;
    const view = this.views.get(lease.pool);
    const n = view?.inflight.get(lease.worker);
    if (view && n !== undefined && n > 0) view.inflight.set(lease.worker, n - 1);
    this.releaseKeyCount(lease);
    if (this.closed) return;
    this.scheduleReleaseFlush();
    return new Promise((resolve) => this.releaseWaiters.set(lease.id, resolve));
  }

  /** Sends the releasing leases within RELEASE_FLUSH_MS unless a command carries them first. */
  private scheduleReleaseFlush(): void {
    this.releaseTimer ??= setTimeout(() => {
      this.releaseTimer = undefined;
      void this.flushReleases();
    }, RELEASE_FLUSH_MS);
  }

  /**
   * The key's requests in flight, as this replica last learned them (a commit's reply counts its
   * own lease), go down by the one released. Left as they were, a session that once had
   * `max_inflight_per_session` requests running looked at that cap to every later decision made on
   * the cached view, until its next commit: the policy spilled it off an idle worker, and the
   * commit (whose preconditions do not include the count) moved its affinity there.
   */
  private releaseKeyCount(lease: Lease): void {
    const key = leaseMemberKey(lease.id);
    if (key === undefined) return;
    const cached = this.affinityCache.peek(this.affinityCacheKey(lease.pool, key));
    if (cached && cached.worker === lease.worker && cached.keyInflight > 0) cached.keyInflight--;
  }

  async setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void> {
    const key = this.poolKeys(pool).states;
    const cleared = state === undefined || state === 'healthy';
    const issued = ++this.issued;
    try {
      // Bounded as a decision is (`withDeadline`): an operator's PUT waits on it.
      await this.withDeadline(cleared ? this.redis.hdel(key, worker) : this.redis.hset(key, worker, state));
    } catch (err) {
      throw new KvgateError('store_unavailable', `cannot record state of ${worker}: ${(err as Error).message}`, { cause: err });
    }
    // This replica acts on its own write at once (other replicas at their next refresh), and no
    // reply to a read sent before the write may undo that (`OwnStates`).
    let own = this.ownStates.get(pool);
    if (!own) this.ownStates.set(pool, (own = new Map()));
    const known = own.get(worker);
    if (known !== undefined && known.issued > issued) return; // a later write of ours was confirmed first
    const written = cleared ? undefined : state;
    own.set(worker, { state: written, issued });
    const view = this.views.get(pool);
    if (view) putState(view.states, worker, written);
  }

  // The collector's and the migrator's calls (publishSignals to tryLock) are bounded by
  // `store.timeout_ms` too (`withDeadline`), though no request waits on them: their loops do. A
  // worker's scrape loop awaits its publish before it schedules the next scrape, and a migration
  // round holds its worker until it ends; a call the client held on to (a cluster client retrying
  // through a failover, before ioredis's command timeout starts) stopped that worker's scrapes, or
  // its migrations, for as long as it was held, and the heartbeat and read loops, which do not
  // wait for their previous run, piled up calls meanwhile.
  async publishSignals(pool: string, worker: string, update: { signals: WorkerSignals } | { error: string }): Promise<void> {
    await this.withDeadline(cmd.publishSignals(this.redis, this.poolKeys(pool), worker, 'signals' in update ? { signalsJson: JSON.stringify(update.signals) } : update));
  }

  async readSignals(pool: string): Promise<Map<string, SignalRecord>> {
    const { now, records } = await this.withDeadline(cmd.readSignals(this.redis, this.poolKeys(pool)));
    const out = new Map<string, SignalRecord>();
    for (const [worker, json] of records) {
      try {
        const r = JSON.parse(json) as StoredScrape;
        const t = typeof r.t === 'number' && r.t >= 0 ? r.t : undefined;
        // The scrape's own JSON text (PUBLISH_SIGNALS_LUA); a record written by an older gate holds
        // it decoded, where cjson wrote an empty object as an empty array.
        const s: unknown = typeof r.s === 'string' ? JSON.parse(r.s) : r.s;
        out.set(worker, {
          signals: s && typeof s === 'object' && !Array.isArray(s) ? (s as WorkerSignals) : {},
          ageMs: t === undefined ? Infinity : Math.max(0, now - t),
          failures: r.f ?? 0,
          ...(r.e ? { error: r.e } : {}),
        });
      } catch {
        // A corrupt record reads as no data: the worker counts as down, never as healthy.
      }
    }
    return out;
  }

  heartbeat(pool: string, gateId: string, ttlMs: number): Promise<string[]> {
    return this.withDeadline(cmd.heartbeat(this.redis, this.poolKeys(pool), gateId, ttlMs));
  }

  coldSessions(pool: string, worker: string, limit: number): Promise<{ keys: string[]; total: number }> {
    return this.withDeadline(cmd.coldSessions(this.redis, this.poolKeys(pool), worker, limit));
  }

  async migrate(pool: string, from: string, moves: ReadonlyArray<{ key: string; to: string }>, reason: string, opts: { affinityTtlMs: number; streamMaxLen: number }): Promise<OffloadEvent[]> {
    if (moves.length === 0) return [];
    // Past the deadline the moves may still land: the sessions' next decisions read them from Redis.
    const { now, moved } = await this.withDeadline(cmd.migrate(this.redis, this.poolKeys(pool), from, moves, reason, { defaultTtlMs: opts.affinityTtlMs, streamMaxLen: opts.streamMaxLen }));
    return moved.map(({ key, to, ttlMs }) => {
      const e: OffloadEvent = { session: sessionHash(key), from, to, reason, time: now };
      this.cacheAffinity(this.affinityCacheKey(pool, key), to, 0, ttlMs);
      this.events.emit('offload', e);
      return e;
    });
  }

  // Stored responses (Responses API): one plain key per response id, written once with its TTL.
  // Kept in this process as well, so what this replica learned survives Redis being away. Both are
  // awaited on a request's way, so both are bounded by `store.timeout_ms` as decisions are
  // (`withDeadline`: ioredis's command timeout starts only once a node has the command, and a
  // cluster client retries through a failover before that).
  async recordResponse(pool: string, responseHash: string, worker: string, ttlMs: number, scope?: RequestScope): Promise<void> {
    this.responses.record(pool, responseHash, worker, ttlMs);
    try {
      await this.withDeadline(this.redis.set(this.poolKeys(pool).response(responseHash), worker, 'PX', ttlMs));
    } catch (err) {
      this.logFailure('redis write of a response id failed; kept on this replica only', err, scope);
    }
  }

  async responseWorker(pool: string, responseHash: string, scope?: RequestScope): Promise<string | undefined> {
    try {
      return (await this.withDeadline(this.redis.get(this.poolKeys(pool).response(responseHash)))) ?? this.responses.worker(pool, responseHash);
    } catch (err) {
      this.logFailure('redis read of a response id failed; using this replica\'s own', err, scope);
      return this.responses.worker(pool, responseHash);
    }
  }

  async tryLock(pool: string, name: string, ttlMs: number): Promise<boolean> {
    return (await this.withDeadline(this.redis.set(this.poolKeys(pool).lock(name), '1', 'PX', ttlMs, 'NX'))) === 'OK';
  }

  onOffload(listener: (e: OffloadEvent) => void): () => void {
    this.events.on('offload', listener);
    return () => this.events.off('offload', listener);
  }

  /** The Redis Stream offload events are written to, for a pool. */
  offloadStreamKey(pool: string): string {
    return this.poolKeys(pool).offload;
  }

  /**
   * Readiness. One server: a write that writes nothing, DEL of a key that never exists
   * (`readinessProbeKey`). A PING is answered by a server demoted to a replica too (REPLICAOF, a
   * failover whose address still leads to the old master), and readiness stayed green while every
   * commit failed with READONLY; the DEL is refused there, and wherever else Redis refuses writes
   * (NOREPLICAS under `min-replicas-to-write`). Chosen over ROLE or INFO: those are @dangerous
   * commands (ROLE @admin too) an ACL user limited to kvgate's keys may not have, where this needs
   * only the key and the writes the store makes anyway; like PING it costs one round trip, and a
   * DEL that deletes nothing is neither replicated nor written to the AOF. With no pools known yet
   * a cluster is PINGed as before. A cluster answers a keyless PING from any node, also while a
   * pool's hash slot has no master and every decision there falls back: so a cluster is asked for
   * each configured pool's marker key (EXISTS, a read on the master owning the pool's slot), all at
   * once, within `store.timeout_ms` whatever the cluster client retries meanwhile (its replicas
   * answer MOVED, which the cluster client follows: no replica is ever asked).
   */
  async ping(): Promise<void> {
    const pools = [...(this.configuredPools ?? this.views.keys())];
    if (!this.redis.isCluster || pools.length === 0) {
      try {
        // Bounded as every call here: readiness shares one ping among its callers, so a ping held
        // for ever would freeze the reported state.
        await this.withDeadline<unknown>(this.redis.isCluster ? this.redis.ping() : this.redis.del(this.readinessProbeKey));
      } catch (err) {
        // An error reply (READONLY): Redis answers but takes no writes, so no commit can hold.
        const why = err instanceof ReplyError ? 'redis refuses writes' : 'redis is unreachable';
        throw new KvgateError('store_unavailable', `${why}: ${(err as Error).message}`, { cause: err });
      }
      return;
    }
    await Promise.all(
      pools.map(async (pool) => {
        try {
          await this.withDeadline(this.redis.exists(this.poolKeys(pool).alive));
        } catch (err) {
          throw new KvgateError('store_unavailable', `redis cluster does not answer for pool ${pool}: ${(err as Error).message}`, { cause: err });
        }
      }),
    );
  }

  retainPools(pools: readonly string[]): void {
    this.configuredPools = new Set(pools);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.releaseTimer);
    // Give our leases back so other replicas see the capacity at once, not after the TTL.
    const leases = this.ledger.drainForClose();
    if (leases.length > 0 && this.redis.status === 'ready') {
      await Promise.all(
        [...byPool(leases)].map(([pool, ls]) => {
          const p = this.redis.pipeline();
          for (const l of ls) p.zrem(this.poolKeys(pool).inflight(l.worker), l.id);
          return this.withDeadline(p.exec()).catch(() => undefined);
        }),
      );
    }
    this.settleReleases(leases.map((l) => l.id));
    closeRedis(this.redis);
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

  /**
   * A read (no `commit`) or a commit through DECIDE_LUA, bounded by the decision's deadline.
   * `sent.value` turns true once the command is handed to a connection that is up (it may run).
   */
  private decide(q: StateQuery, commit?: Omit<DecideCommit, 'notAfter'>, sent?: { value: boolean }): Promise<IssuedReply> {
    const deadline = Date.now() + this.opts.timeoutMs;
    let late = false;
    // Past the deadline the caller has decided locally: a commit sent now would take a lease
    // nobody holds. One sent before it but resent by the client (EVAL after NOSCRIPT, a cluster
    // redirection) is stopped by Redis itself: it carries the deadline in Redis time.
    const send = () => {
      if (late) return Promise.reject(new KvgateError('store_unavailable', 'decision deadline passed'));
      const full = commit ? { ...commit, notAfter: this.clockOffsetMs === undefined ? 0 : deadline + this.clockOffsetMs } : undefined;
      // Redis is that far behind: decided locally at once, never written (`sent` stays false), as
      // with no connection. Sending more would only lengthen the client's queue of commands their
      // callers gave up on.
      if (this.waiting >= this.maxWaiting) {
        return Promise.reject(new KvgateError('store_unavailable', `redis has ${this.waiting} decisions of this replica unanswered; decided locally`));
      }
      // This replica's releases in the pool ride along, removed before the script counts anything.
      const carried = this.ledger.releasingCount > 0 ? this.ledger.takeReleasing(q.pool, this.view(q.pool, q.workers).workerSet, MAX_RELEASES_PER_CALL) : [];
      // Numbered when it goes to the client, not when asked for (it may wait for a resync above).
      const issued = ++this.issued;
      // Without a connection ioredis refuses the command at once (no offline queue): never written.
      if (sent && this.redis.status === 'ready') sent.value = true;
      const reply = cmd.decide(this.redis, this.poolKeys(q.pool), q, full, carried.length > 0 ? idsByWorker(carried) : undefined);
      this.waiting++;
      // One reaction for the reply's bookkeeping (the clock, the releases it carried).
      return reply.then(
        (reply) => {
          this.waiting--;
          if (carried.length > 0) this.settleReleases(carried.map((l) => l.id));
          // Each sample is Redis's clock minus ours when the reply is handled, so it is short by
          // however long the reply waited (the event loop, the way back): the largest seen is the
          // truest. Taking the latest let one late reply pull the deadlines of later commits
          // earlier, and Redis then refused commits that were in time. A reconnection starts over
          // (learnClock), so a clock step does not stick.
          const sample = reply.now - Date.now();
          if (this.clockOffsetMs === undefined || sample > this.clockOffsetMs) this.clockOffsetMs = sample;
          // Set on the reply itself: no second object per decision.
          const r = reply as IssuedReply;
          r.issued = issued;
          return r;
        },
        (err: unknown) => {
          this.waiting--;
          if (carried.length > 0) this.releasesFailed(carried, err);
          throw err;
        },
      );
    };
    return this.withDeadline(this.resyncAfterConnect ? this.resyncAfterConnect.then(send) : send(), () => (late = true));
  }

  /**
   * Bounds a wait on Redis (a decision's, a response id's, readiness's, a background loop's) by
   * `store.timeout_ms` whatever the client does meanwhile (a cluster client retries through a
   * failover, a script may need EVAL after NOSCRIPT): past it the gate answers locally, well inside
   * Envoy's message timeout, and a loop goes on. `onLate` runs when the deadline passes first.
   * Every wait goes through it, pipelines included: resyncs run one at a time and decisions wait
   * for the one after a reconnect, release retries one run at a time, and a stopping gate awaits
   * its lease removals, so one pipeline the client held (2.4 s at a 200 ms timeout, against a
   * cluster whose master had stalled) held all of them as long.
   */
  private withDeadline<T>(p: Promise<T>, onLate?: () => void): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        onLate?.();
        reject(new KvgateError('store_unavailable', `redis did not answer within ${this.opts.timeoutMs} ms`));
      }, this.opts.timeoutMs);
    });
    return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
  }

  /** Learns Redis's clock on (re)connection, so the first commit already carries its deadline. */
  private learnClock(): void {
    this.redis
      .time()
      .then(([s, us]) => {
        this.clockOffsetMs = Number(s) * 1000 + Math.floor(Number(us) / 1000) - Date.now();
      })
      .catch(() => undefined);
  }

  /** Folds a script reply into the local view and returns it as a snapshot. */
  private absorb(q: StateQuery, reply: IssuedReply): Snapshot {
    // Redis's match, not the local index's: `learn` has just recorded it there (a new version of
    // the index), so a local walk would be a whole walk made only to be replaced.
    return this.localSnapshot(q, false, this.learn(q, reply).prefix);
  }

  /**
   * Folds a script reply into the local view; returns Redis's prefix match. `committed`: the worker
   * a commit just gave the whole prompt, which the caller records itself (with its capacity), told
   * how deep the local index matched the prompt on it before. `refresh`: the reply answers the
   * store's own refresh, not a decision, so it does not count as a decision asking for live
   * sessions.
   */
  private learn(q: StateQuery, reply: IssuedReply, opts: { committed?: string; refresh?: boolean } = {}): { prefix: Map<string, number>; committedDepth: number } {
    const { committed, refresh = false } = opts;
    const view = this.view(q.pool, q.workers);
    view.inflight = new Map(q.workers.map((w, i) => [w, reply.inflight[i] ?? 0]));
    if (q.liveWindowMs !== undefined && !refresh) view.liveAskedAt = Date.now();
    if (reply.live !== undefined) {
      const live = new Map<string, number>();
      q.workers.forEach((w, i) => {
        if ((reply.live![i] ?? 0) > 0) live.set(w, reply.live![i]!);
      });
      view.live = live;
      view.liveWindowMs = q.liveWindowMs;
    }
    view.states = parseStates(reply.states);
    const own = this.ownStates.get(q.pool);
    if (own !== undefined && own.size > 0) keepOwnStates(view.states, own, reply.issued);
    // Redis's prefix match is the truth: teach it to the local index (so the next decision on this
    // prompt needs no extra round trip) and unlearn what Redis no longer has (expired, evicted).
    const prefix = new Map<string, number>();
    for (const [w, d] of reply.depth) if (d > 0) prefix.set(w, d);
    let committedDepth = 0;
    if (q.blocks.length > 0) {
      // Read-only (the index's memoised answer, not a copy): nothing below changes this map.
      const local = view.index.depths(q.blocks, q.workers);
      if (committed !== undefined) committedDepth = local.get(committed) ?? 0;
      for (const [w, d] of local) {
        const truth = prefix.get(w) ?? 0;
        if (truth < d && w !== committed) {
          view.index.forget(w, q.blocks.slice(truth, d));
        }
      }
      for (const [w, d] of prefix) {
        // Already known to this depth and recorded that recently: recording it again would only
        // move its time by less than the freshness window.
        if (w !== committed) this.recordUnlessFresh(view, w, q.blocks, d, undefined, local.get(w) === d);
      }
    }
    if (q.key !== undefined) {
      const ck = this.affinityCacheKey(q.pool, q.key);
      if (reply.affinity !== undefined) this.cacheAffinity(ck, reply.affinity, reply.keyInflight, reply.affinityTtlMs);
      else this.affinityCache.delete(ck);
    }
    return { prefix, committedDepth };
  }

  /**
   * Records that `worker` holds the chain's first `depth` blocks in the local index, unless it holds
   * exactly those already (`known`: the index matched the chain that deep on it) and this replica
   * recorded them less than the freshness window ago (a thousandth of the index's TTL, at most 1 s:
   * `freshWindowMs`). A skipped record leaves the blocks' times and recency that much older: they
   * lapse at most that much earlier, and Redis re-teaches them on the next reply that matches them.
   */
  private recordUnlessFresh(view: PoolView, worker: string, blocks: readonly string[], depth: number, capacityBlocks: number | undefined, known: boolean): void {
    if (depth <= 0) return;
    const now = Date.now();
    const window = this.opts.prefixFreshMs ?? freshWindowMs(this.opts.prefixTtlMs ?? DEFAULT_LOCAL_PREFIX_TTL_MS);
    if (now - view.recordedSince > window) {
      view.recorded.clear();
      view.recordedSince = now;
    }
    const memo = `${worker}\u0000${capacityBlocks ?? ''}\u0000${blocks[depth - 1]!}`;
    const at = view.recorded.get(memo);
    if (known && window > 0 && at !== undefined && now - at <= window) return;
    view.index.record(worker, depth === blocks.length ? blocks : blocks.slice(0, depth), capacityBlocks);
    view.recorded.set(memo, now);
  }

  private commitLocally(req: CommitRequest): CommitResult {
    const snapshot = this.localSnapshot(req, false);
    // Degraded: checked against what this replica knows. The affinity the decision expected came
    // from this same local cache, so comparing them still catches two concurrent requests of one
    // new session both placing it (the second re-decides and follows the first). Prefix depth is
    // not checked: Redis's index is out of reach.
    const { prefix: _unchecked, ...preconditions } = req.preconditions;
    if (!preconditionsHold(preconditions, snapshot)) return { ok: false, snapshot };
    if (req.key !== undefined) {
      const ck = this.affinityCacheKey(req.pool, req.key);
      // No count is kept while degraded (releases cannot be seen): never let a stale one grow into a spill.
      this.cacheAffinity(ck, req.worker, 0, req.affinityTtlMs);
      this.ledger.decidedLocally(ck, { pool: req.pool, key: req.key, worker: req.worker, expiresAt: Date.now() + req.affinityTtlMs });
    }
    this.view(req.pool, req.workers).index.record(req.worker, req.blocks, req.capacityBlocks);
    const lease: Lease = { id: randomUUID(), pool: req.pool, worker: req.worker, shared: false };
    this.ledger.addLocal(lease);
    return { ok: true, lease, degraded: true };
  }

  /** Sends the releases no command carried within RELEASE_FLUSH_MS, one pipeline per pool. */
  private async flushReleases(): Promise<void> {
    const leases = this.ledger.takeReleasing();
    if (leases.length === 0) return;
    await Promise.all(
      [...byPool(leases)].map(async ([pool, ls]) => {
        const p = this.redis.pipeline();
        for (const [worker, ids] of idsByWorker(ls)) p.zrem(this.poolKeys(pool).inflight(worker), ...ids);
        try {
          const replies = await this.withDeadline(p.exec());
          const failed = replies?.find(([err]) => err);
          if (!replies || failed) throw failed?.[0] ?? new Error('pipeline aborted');
          this.settleReleases(ls.map((l) => l.id));
        } catch (err) {
          this.releasesFailed(ls, err);
        }
      }),
    );
  }

  /** Redis took these leases out: their `release` calls resolve. */
  private settleReleases(ids: Iterable<string>): void {
    for (const id of ids) {
      const done = this.releaseWaiters.get(id);
      if (done) {
        this.releaseWaiters.delete(id);
        done();
      }
    }
  }

  /**
   * The command carrying these removals failed or timed out (it may still have run: removing a
   * lease twice is harmless): retried on each refresh; their `release` calls resolve, as a failed
   * release always did. Not renewed any more, so Redis drops them within the lease TTL at the latest.
   */
  private releasesFailed(leases: readonly Lease[], err: unknown): void {
    for (const l of leases) this.ledger.releaseFailed(l);
    this.settleReleases(leases.map((l) => l.id));
    this.logFailure('redis release failed; retrying on the next refresh', err);
  }

  private async refreshAll(): Promise<void> {
    if (this.closed || this.redis.status !== 'ready') return;
    // Redis answered slowly without disconnecting: what was decided locally still needs writing back.
    if (this.ledger.behind || this.connections !== this.leasesRestoredAt) void this.resync();
    if (this.ledger.unreleasedCount > 0) void this.releaseRetries.trigger();
    let behind: Set<string> | undefined;
    for (const [pool, view] of this.views) {
      if (this.configuredPools && !this.configuredPools.has(pool)) {
        // A reload removed this pool: once nothing of this replica's is left in it, stop polling.
        behind ??= this.ledger.poolsBehind();
        if (this.ledger.sharedLeases(pool).length === 0 && !behind.has(pool)) this.views.delete(pool);
        continue;
      }
      try {
        const q: StateQuery = { pool, key: undefined, workers: view.workers, blocks: [] };
        // Counted again while decisions ask for live sessions (the window the last one asked).
        if (view.liveWindowMs !== undefined) {
          if (Date.now() - view.liveAskedAt <= (this.opts.liveAskIdleMs ?? LIVE_ASK_IDLE_MS)) q.liveWindowMs = view.liveWindowMs;
          else view.live = view.liveWindowMs = undefined;
        }
        // Into the view only: nobody reads a snapshot of a refresh.
        this.learn(q, await this.decide(q), { refresh: true });
      } catch (err) {
        this.logFailure('redis refresh failed', err);
      }
    }
  }

  /**
   * Renews the leases this replica holds, adding back any Redis lost (RENEW_LUA): after a stall
   * longer than the lease TTL that kept the connection, no reconnection re-adds them, and each
   * running request would count for nothing until it ended.
   */
  private async renewLeases(): Promise<void> {
    const leases = this.ledger.sharedLeases();
    if (this.closed || leases.length === 0 || this.redis.status !== 'ready') return;
    // One pipeline per pool: a pool's keys share one cluster slot, different pools may not.
    await Promise.all(
      [...byPool(leases)].map(async ([pool, ls]) => {
        const p = this.redis.pipeline();
        for (const [worker, ids] of idsByWorker(ls)) p.kvgateRenew(this.poolKeys(pool).inflight(worker), this.opts.leaseTtlMs, ...ids);
        try {
          const replies = await this.withDeadline(p.exec());
          const back = new Set<string>();
          for (const [err, members] of replies ?? []) if (!err && Array.isArray(members)) for (const m of members) back.add(String(m));
          if (back.size === 0) return;
          this.opts.logger.warn({ pool, leases: back.size }, 'leases had lapsed in redis (no renewal reached it within leases.ttl_s); added back');
          // A lease released since the renewal was sent may have had its removal run first (the
          // pipeline can wait on a script check): added back, it would count until its TTL. Its
          // removal is sent again, as a release Redis did not take.
          for (const l of ls) if (back.has(l.id)) this.ledger.mustRemove(l); // mustRemove passes over a lease still held
        } catch (err) {
          this.logFailure('redis lease renewal failed', err);
        }
      }),
    );
  }

  /**
   * Sends again the removals Redis did not take: one run at a time (`releaseRetries`), at most
   * MAX_RETRIED_RELEASES_PER_RUN of them, one ZREM per worker. Resending
   * the whole list on every refresh while earlier runs still waited for their replies (a connection
   * that went silent) piled up commands in the client as fast as the list grew, quadratically.
   */
  private async retryReleases(): Promise<void> {
    const leases = this.ledger.unreleasedLeases(Date.now(), MAX_RETRIED_RELEASES_PER_RUN);
    await Promise.all(
      [...byPool(leases)].map(async ([pool, ls]) => {
        const p = this.redis.pipeline();
        for (const [worker, ids] of idsByWorker(ls)) p.zrem(this.poolKeys(pool).inflight(worker), ...ids);
        const replies = await this.withDeadline(p.exec()).catch(() => null);
        if (replies && !replies.some(([err]) => err)) this.ledger.removedFromRedis(ls.map((l) => l.id));
      }),
    );
  }

  /** Brings Redis in line with this replica after it could not reach Redis (see the file comment). */
  private resync(): Promise<void> {
    return this.closed ? Promise.resolve() : this.resyncs.trigger();
  }

  private async resyncOnce(): Promise<void> {
    if (this.redis.status !== 'ready') return;
    // Re-add the shared leases too after a reconnect: Redis may have lost them.
    const connection = this.connections;
    const restoreLive = connection !== this.leasesRestoredAt;
    try {
      const pools = new Set([...this.views.keys(), ...this.ledger.poolsBehind()]);
      for (const pool of pools) await this.resyncPool(pool, restoreLive);
      this.leasesRestoredAt = connection;
    } catch (err) {
      this.logFailure('redis resync failed; retrying on the next refresh', err);
    }
  }

  private async resyncPool(pool: string, restoreLive: boolean): Promise<void> {
    const keys = this.poolKeys(pool);
    const now = Date.now();
    const affinities = this.ledger.unsyncedAffinities(pool, now);
    const local = this.ledger.localLeases(pool);
    const live = restoreLive ? this.ledger.sharedLeases(pool) : [];
    const statePairs = [...(this.views.get(pool)?.states ?? [])].flat();

    const p = this.redis.pipeline();
    p.exists(keys.alive);
    let calls = 0;
    for (let i = 0; i < affinities.length; i += WRITE_BACKS_PER_CALL, calls++) {
      const chunk = affinities.slice(i, i + WRITE_BACKS_PER_CALL).map(([, u]) => ({ key: u.key, worker: u.worker, ttlMs: u.expiresAt - now }));
      p.kvgateWriteBack(...cmd.writeBackCall(keys, chunk));
    }
    for (const [worker, ids] of idsByWorker([...local, ...live])) p.kvgateRestoreLeases(keys.inflight(worker), this.opts.leaseTtlMs, ...ids);
    const replies = await this.withDeadline(p.exec());
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw failed?.[0] ?? new Error('pipeline aborted');
    if (replies[0]![1] === 0) await this.restoreLostData(pool, statePairs);

    // Adopt what Redis holds now: ours, or the placement another replica wrote first.
    const held = Array.from({ length: calls }, (_, c) => cmd.readWriteBack(replies[1 + c]![1] as Array<string | number>)).flat();
    affinities.forEach(([ck, u], i) => {
      const h = held[i];
      if (h) this.cacheAffinity(ck, h.worker, this.affinityCache.get(ck)?.keyInflight ?? 0, h.ttlMs);
      this.ledger.affinityWritten(ck, u);
    });
    this.ledger.shareLocal(local);
    // A lease released while the pipeline ran must not linger until its TTL.
    const gone = [...local, ...live].filter((l) => !this.ledger.isShared(l.id));
    if (gone.length > 0) {
      const z = this.redis.pipeline();
      for (const l of gone) z.zrem(keys.inflight(l.worker), l.id);
      await this.withDeadline(z.exec()).catch(() => undefined);
    }
  }

  /**
   * Redis lost its data (restarted empty, or a failover lost unreplicated writes): its marker is
   * gone. Without this, operator drains would be forgotten and every session's next request would
   * be placed anew by load, losing its KV cache. The states and affinities this replica knows are
   * the best truth left. HSETNX / SET NX, so whatever was recorded since wins; the marker is written
   * last, so a restore cut short is tried again on the next refresh. Each affinity gets what it had
   * left, so it lapses when it would have; those that lapsed meanwhile are not in the cache.
   */
  private async restoreLostData(pool: string, statePairs: string[]): Promise<void> {
    const keys = this.poolKeys(pool);
    const prefix = this.affinityCacheKey(pool, '');
    const entries: cmd.WriteBack[] = [];
    for (const [ck, cached] of this.affinityCache.entries()) {
      if (!ck.startsWith(prefix)) continue;
      const left = this.affinityCache.getRemainingTTL(ck);
      // No expiry known (Redis had none): the latest commit's TTL, if there was a commit.
      const ttl = Number.isFinite(left) ? Math.floor(left) : this.affinityTtlMs;
      if (ttl > 0) entries.push({ key: ck.slice(prefix.length), worker: cached.worker, ttlMs: ttl });
    }
    for (let i = 0; i === 0 || i < entries.length; i += WRITE_BACKS_PER_CALL) {
      const p = this.redis.pipeline();
      if (i === 0) for (let j = 0; j + 1 < statePairs.length; j += 2) p.hsetnx(keys.states, statePairs[j]!, statePairs[j + 1]!);
      const chunk = entries.slice(i, i + WRITE_BACKS_PER_CALL);
      if (chunk.length > 0) p.kvgateWriteBack(...cmd.writeBackCall(keys, chunk));
      const replies = await this.withDeadline(p.exec());
      const failed = replies?.find(([err]) => err);
      if (!replies || failed) throw failed?.[0] ?? new Error('pipeline aborted');
    }
    await this.withDeadline(this.redis.set(keys.alive, '1'));
    if (entries.length > 0 || statePairs.length > 0) {
      this.opts.logger.warn({ pool, states: statePairs.length / 2, affinities: entries.length }, 'redis had lost its data; restored the worker states and affinities this replica knew');
    }
  }

  /** Written once per pool; its absence after a reconnect means Redis lost its data. */
  private writeMarker(pool: string): void {
    if (this.redis.status !== 'ready') return;
    this.redis.set(this.poolKeys(pool).alive, '1', 'NX').catch(() => undefined);
  }

  private view(pool: string, workers: readonly string[]): PoolView {
    let v = this.views.get(pool);
    if (!v) {
      const index = new PrefixIndex(this.opts.prefixTtlMs ?? DEFAULT_LOCAL_PREFIX_TTL_MS);
      // Before any reply: only what this replica wrote itself (`OwnStates`).
      const states = new Map<string, WorkerState>();
      const own = this.ownStates.get(pool);
      if (own !== undefined) keepOwnStates(states, own, BEFORE_ANY_REPLY);
      this.views.set(pool, (v = { workers, workerSet: new Set(workers), inflight: new Map(), states, index, recorded: new Map(), recordedSince: Date.now(), sending: new Map(), live: undefined, liveWindowMs: undefined, liveAskedAt: 0 }));
      this.writeMarker(pool);
    } else if (v.workers !== workers) {
      v.workers = workers;
      v.workerSet = new Set(workers);
    }
    // The local index releases workers the config dropped once their blocks lapse (as the memory
    // store's does); an identity check when the list is unchanged.
    v.index.configure(workers);
    return v;
  }

  private poolKeys(pool: string): PoolKeys {
    let k = this.keys.get(pool);
    if (!k) this.keys.set(pool, (k = new PoolKeys(this.opts.keyPrefix, pool)));
    return k;
  }

  /** `scope`: the request the failing call was made for, whose trace ids the line then carries. */
  private logFailure(msg: string, err: unknown, scope?: RequestScope): void {
    // A Redis outage fails every reconnect attempt (one a second) and every request: the first
    // failure is logged at once, then one line a minute at most while it lasts, counting the
    // failures it left out. Readiness logs the recovery ("store reachable again").
    const now = Date.now();
    if (now - this.lastErrorLog < FAILURE_LOG_INTERVAL_MS) {
      this.failuresNotLogged++;
      return;
    }
    this.lastErrorLog = now;
    const skipped = this.failuresNotLogged;
    this.failuresNotLogged = 0;
    requestLogger(this.opts.logger, scope).warn({ err: err instanceof Error ? err.message : String(err), ...(skipped > 0 ? { failures_since_last_line: skipped } : {}) }, msg);
  }

  /**
   * Caches an affinity until it lapses in Redis: `ttlMs` is what it has left there (0: no expiry
   * known, kept until the LRU drops it). A copy kept past its lapse would be restored with a fresh
   * TTL after Redis lost its data, and followed by decisions made while Redis is away, for a
   * session whose cache the worker has long dropped.
   */
  private cacheAffinity(ck: string, worker: string, keyInflight: number, ttlMs: number): void {
    this.affinityCache.set(ck, { worker, keyInflight }, { ttl: ttlMs > 0 ? Math.ceil(ttlMs) : 0 });
  }

  private affinityCacheKey(pool: string, key: string): string {
    return `${pool}\u0000${key}`;
  }
}

/** A commit that reached Redis after its deadline: the script wrote nothing. */
class LateCommit extends KvgateError {
  constructor() {
    super('store_unavailable', 'the commit reached redis after its deadline');
  }
}

/**
 * The client refused the command without writing it: without the offline queue, ioredis rejects a
 * command at once when it has no writable connection ("Stream isn't writeable and
 * enableOfflineQueue options is false", or "Cluster isn't ready and …"). That includes the moment
 * after a reconnection began (`reconnectOnError`), while the client's status still reads ready.
 */
function refusedUnwritten(err: unknown): boolean {
  return err instanceof Error && err.message.endsWith('and enableOfflineQueue options is false');
}

/** At most one reconnection per this long for READONLY replies (`reconnectOnReadonly`). */
const READONLY_RECONNECT_INTERVAL_MS = 1000;

/**
 * ioredis's `reconnectOnError` (its README, "Reconnect on Error"): a READONLY reply means the server
 * this connection reached was demoted to a replica in a failover. The connection stays up, so
 * without a reconnection every write would be refused for as long as the process runs, while the
 * address (a DNS name, a virtual IP, a managed service's primary endpoint) already leads to the new
 * master. The command that got the reply still fails (the caller decides locally). At most one
 * reconnection a second: a URL that names a replica for good would otherwise be reconnected to on
 * every refresh and every request. Redis Cluster needs none: a replica answers MOVED there, which
 * the cluster client follows.
 */
function reconnectOnReadonly(): (err: Error) => boolean {
  let last = -Infinity;
  return (err) => {
    if (!err.message.startsWith('READONLY')) return false;
    const now = Date.now();
    if (now - last < READONLY_RECONNECT_INTERVAL_MS) return false;
    last = now;
    return true;
  };
}

/** `keepOwnStates`'s `issued` for a view no reply has filled yet: below every command's number. */
const BEFORE_ANY_REPLY = 0;

/**
 * Lays this replica's state writes over `states` (`OwnStates`), read by the reply to command
 * `issued`: a reply to a command sent before a write keeps the write's state; one sent after it
 * retires the write. A new view (`BEFORE_ANY_REPLY`) keeps them all.
 */
function keepOwnStates(states: Map<string, WorkerState>, own: OwnStates, issued: number): void {
  for (const [worker, w] of own) {
    if (issued > w.issued) own.delete(worker);
    else putState(states, worker, w.state);
  }
}

/** A worker's state in a view; undefined (cleared to healthy) is no entry. */
function putState(states: Map<string, WorkerState>, worker: string, state: WorkerState | undefined): void {
  if (state === undefined) states.delete(worker);
  else states.set(worker, state);
}

function parseStates(recorded: ReadonlyMap<string, string>): Map<string, WorkerState> {
  const m = new Map<string, WorkerState>();
  for (const [w, s] of recorded) if (isWorkerState(s)) m.set(w, s);
  return m;
}

function isWorkerState(s: string): s is WorkerState {
  return WORKER_STATES.some((x) => x === s);
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
