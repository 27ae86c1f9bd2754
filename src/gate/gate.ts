/**
 * The gate: from an understood request to a committed routing decision. It joins the three rooms
 * behind the transport: request understanding (keys, prompt blocks), the pure policy, and the
 * store. It knows no protocol; the ext_proc transport, the simulator and the benchmarks all call
 * `route()`.
 */
import type { Logger } from 'pino';
import type { Config, WorkerConfig } from '../config/schema.js';
import { DEFAULTS } from '../config/defaults.js';
import { applyKnobs, type Knobs } from '../config/knobs.js';
import { KvgateError } from '../errors.js';
import { NO_HASH_KEYS, responseIdHash, understand, type RoutingKey, type SessionHashKeys } from '../request/keys.js';
import type { RequestInfo } from '../request/request.js';
import { serviceClass, type ServiceClass } from '../request/service-class.js';
import { classLimit } from '../routing/filters/class-share.js';
import { assessHealth, effectiveState, hasEngineRoom, kvRoomTokens, type HealthThresholds, type HealthVerdict, type SignalRecord } from '../routing/health.js';
import { decide } from '../routing/policy.js';
import { weightsByName } from '../routing/profiles.js';
import { SCORER_NAMES } from '../routing/scorers/index.js';
import type { Decision, Explanation, Preconditions, RouteOutcome, ScoreWeights, WorkerState, WorkerView } from '../routing/types.js';
import type { Lease, RoutingStore, Snapshot, StateQuery } from '../state/store.js';
import { LogThrottle } from '../util/log-throttle.js';
import { debugLogger, requestLogger, type RequestScope } from '../util/request-scope.js';
import { DecisionLog, type DecisionEntry } from './decision-log.js';
import { PendingPrefill } from './pending-prefill.js';
import { PoolTable, type Pool } from './pools.js';

export type GateResult =
  | {
      kind: 'route';
      /** The pool the request was routed in. */
      pool: string;
      worker: string;
      cluster: string;
      /**
       * The worker's address (endpoint-picker mode), from the config the decision was made on: a
       * reload landing while the decision waited on the store may have removed the worker since.
       */
      endpoint?: string | undefined;
      outcome: RouteOutcome;
      from?: string;
      lease: Lease;
      key: RoutingKey | undefined;
      /** Routed on local state because the shared store was unreachable. */
      degraded: boolean;
      /**
       * Its session's worker, or its stored response's, was found only under the previous session
       * hash key (a rotation in progress): while any are, the previous key is still needed.
       */
      fromPreviousKey?: true;
      /** Store commits it took (1 unless another replica raced this one). */
      attempts: number;
      /** Why: every candidate with its load, prefix match and score. */
      explanation: Explanation;
      /** Time spent waiting on the store for this decision. */
      storeMs: number;
      /** The candidates as the deciding snapshot showed them (for traces). */
      views?: readonly WorkerView[];
      /** The request's class of service. */
      class?: string;
      /** The model the request's body names (for traces), when it names one. */
      model?: string | undefined;
    }
  | {
      kind: 'reject';
      error: KvgateError;
      /** The request's pool, once one was chosen (a shed's pool); absent when no pool took it. */
      pool?: string;
      key: RoutingKey | undefined;
      explanation?: Explanation;
      /** The candidates the decision saw (for traces). */
      views?: readonly WorkerView[];
      /** The shed answer this request's knobs asked for (status and retry-after), when they were read. */
      routing?: Pick<Config['routing'], 'shed_status' | 'retry_after_s'>;
      /** The class of service that was shed (sheds only: 429/503 for load). */
      class?: string;
      /** The model the request's body names, when it was read and names one. */
      model?: string | undefined;
    };

/** How one request is to be routed, beyond the request itself. Protocol-free: the transport fills it. */
export interface RouteOptions {
  /**
   * Only these worker ids may take the request (e.g. the proxy's endpoint subset hint). Others
   * are invisible to the policy; an affinity to one of them moves. An empty set sheds with 503.
   */
  eligible?: ReadonlySet<string>;
  /** The route's knobs from Envoy (already validated); they override the config for this request only. */
  knobs?: Knobs;
  /**
   * The request being routed, as the transport's telemetry knows it: the gate's and the store's
   * lines about it carry its trace ids, and the store calls made for it count in its store usage.
   */
  scope?: RequestScope;
}

/** Everything a decision reads from the config, swapped as one value by `reconfigure`. */
interface Setup {
  readonly config: Config;
  readonly pools: PoolTable;
}

/**
 * Commits tried before giving up. Each failed commit means another replica changed the same
 * facts in between; four in a row only happen when every worker sits at its limit.
 */
const MAX_COMMITS = 4;

export class Gate {
  private setup: Setup;
  /** The last decisions, for the admin debug endpoint (hashes only, never prompts). */
  readonly decisions = new DecisionLog(DEFAULTS.decisionLogSize);
  /**
   * Each worker's last scrape and the health read from it (workers with metrics only). Keyed by
   * worker id, which the schema keeps unique across pools.
   */
  private signals = new Map<string, WorkerSignalsSeen>();
  private readonly problems = new LogThrottle(DEFAULTS.knobProblemLogIntervalMs);
  /** Prompt blocks of this gate's leases that their workers must still compute (the backlog scorer's input). */
  private readonly pending = new PendingPrefill();
  /** What session ids are hashed under: the key, and the previous one during a rotation (built once). */
  private readonly hashKeys: SessionHashKeys;
  /** Requests without a key routed so far: each one's tie-break seed, so that they spread over tied workers. */
  private keyless = 0;

  constructor(
    config: Config,
    readonly store: RoutingStore,
    private readonly logger: Logger,
    /**
     * A monotonic clock (ms; only differences matter): how long ago each worker's record was read,
     * so that figures keep ageing while the store cannot be read (`ageSignals`). Public: the
     * collector times this replica's own scrapes by it (signals/fleet.ts).
     */
    readonly clock: () => number = () => performance.now(),
    /**
     * The key session ids and stored response ids are hashed under (`--session-hash-key`); none:
     * plain SHA-256. Every replica sharing a store must have the same one, or their keys differ.
     */
    private readonly sessionHashKey?: Uint8Array,
    /**
     * The key before it, while a rotation keeps it (`--session-hash-key-previous`): a session (or
     * stored response) with nothing recorded under the current key is looked up under this one, and
     * placed again under the current key where it was found. One store read more for each such
     * request, so it is kept for one affinity TTL, not for good.
     */
    previousSessionHashKey?: Uint8Array,
  ) {
    this.hashKeys = sessionHashKey === undefined && previousSessionHashKey === undefined ? NO_HASH_KEYS : { current: sessionHashKey, previous: previousSessionHashKey };
    this.setup = { config, pools: new PoolTable(config) };
    // The store learns the config's pools from the start (readiness on a cluster checks each one).
    this.store.retainPools(this.setup.pools.all().map((p) => p.name));
  }

  get currentConfig(): Config {
    return this.setup.config;
  }

  get pools(): PoolTable {
    return this.setup.pools;
  }

  /** The default pool's name (the only pool of a single-pool config). */
  get pool(): string {
    return this.setup.pools.default.name;
  }

  /**
   * Switches to a new, already validated config at once. A decision in progress finishes on the
   * config it started with; leases taken before stay valid (a lease names its pool and worker).
   */
  reconfigure(config: Config): void {
    const before = this.setup;
    this.setup = { config, pools: new PoolTable(config) };
    this.store.retainPools(this.setup.pools.all().map((p) => p.name));
    this.keepVerdictsOfNewlyScraped(before.config, config);
    void this.carryOperatorStates(before.pools, this.setup.pools);
  }

  /**
   * A worker that served without metrics and gains a `metrics_url` by this reload keeps the
   * verdict it had (none from signals: healthy) until its first record is read, for at most
   * `signals.stale_after_ms`: judged on no data it was down at once, and a serving fleet answered
   * 503s and moved sessions until the first scrape came back. A worker new to the config has no
   * verdict to keep: it is down until its figures arrive, as at startup.
   */
  private keepVerdictsOfNewlyScraped(before: Config, after: Config): void {
    const now = this.clock();
    const until = now + after.signals.stale_after_ms;
    let next: Map<string, WorkerSignalsSeen> | undefined;
    for (const w of after.workers) {
      if (!w.metrics_url || this.signals.has(w.id)) continue;
      const was = before.workers.find((x) => x.id === w.id);
      if (!was || was.metrics_url) continue;
      (next ??= new Map(this.signals)).set(w.id, { record: undefined, verdict: WITHOUT_METRICS, readAt: now, keptUntil: until });
    }
    if (next) this.signals = next;
  }

  /**
   * A worker a reload moved to another pool (a pool renamed, a worker moved, `workers:` rewritten
   * as `pools:`) keeps the state an operator set: everything the store holds is per pool, so
   * without this a drained worker would come back healthy under its new pool and take traffic.
   * In-flight counts, sessions, prefix history and stored-response pins of the old pool are not
   * carried (on Redis they live in another hash slot); the log line says which workers moved.
   */
  private async carryOperatorStates(before: PoolTable, after: PoolTable): Promise<void> {
    const moved: Array<{ worker: string; from: string; to: string; state?: WorkerState }> = [];
    for (const pool of before.all()) {
      for (const id of pool.workerIds) {
        const to = after.poolOfWorker(id);
        if (to && to.name !== pool.name) moved.push({ worker: id, from: pool.name, to: to.name });
      }
    }
    if (moved.length === 0) return;
    try {
      for (const m of moved) {
        const snap = await this.store.snapshot({ pool: m.from, key: undefined, workers: [m.worker], blocks: [] });
        const state = snap.states.get(m.worker);
        if (state !== undefined && state !== 'healthy') {
          await this.store.setWorkerState(m.to, m.worker, state);
          m.state = state;
        }
      }
      this.logger.info({ moved }, 'workers moved to another pool by the reload: operator states carried over; in-flight counts, sessions and prefix history start afresh there');
    } catch (err) {
      this.logger.warn({ moved, err: (err as Error).message }, 'workers moved to another pool by the reload: their operator states could not be carried over (set them again)');
    }
  }

  /** Routes one request in its pool: the route's `pool` knob, else its model's pool, else the default pool. */
  async route(req: RequestInfo, opts: RouteOptions = {}): Promise<GateResult> {
    const knobs = opts.knobs ?? {};
    const scope = opts.scope;
    const setup = this.setup;
    const cfg = applyKnobs(setup.config, knobs);
    const answer = { shed_status: cfg.routing.shed_status, retry_after_s: cfg.routing.retry_after_s };
    let key: RoutingKey | undefined;
    let blocks: string[];
    let model: string | undefined;
    let storedResponse: string | undefined;
    let storedResponsePrevious: string | undefined;
    try {
      const u = understand(req, cfg, this.hashKeys);
      key = u.key;
      blocks = u.blocks;
      model = u.model;
      storedResponse = u.storedResponse;
      storedResponsePrevious = u.storedResponsePrevious;
      // Client mistakes are logged at info: they are worth seeing, not worth paging anyone.
      if (u.bodyProblem && u.bodyProblem !== 'empty') {
        requestLogger(this.logger, scope).info({ path: req.path, problem: u.bodyProblem }, 'request body unusable; routing without a body key');
      }
    } catch (err) {
      const error = KvgateError.from(err, 'bad_request');
      requestLogger(this.logger, scope).info({ path: req.path, code: error.code, err: error.message }, 'request rejected');
      return { kind: 'reject', error, key: undefined, routing: answer };
    }
    const pick = setup.pools.pick(knobs.pool, model);
    if (pick.unknownKnob !== undefined) this.unknownPool(pick.unknownKnob, setup.pools, scope);
    if (pick.kind === 'reject') {
      requestLogger(this.logger, scope).info({ path: req.path, code: pick.error.code, ...pick.error.details }, 'request rejected');
      return { kind: 'reject', error: pick.error, key, model, routing: answer };
    }
    const pool = pick.pool;
    // The prompt's size in blocks: exact below the hashing cap, past it estimated from the body, and
    // for a body that was not read (cut at Envoy's buffer) from its declared size.
    const bodyBytes = req.body?.length ?? req.unreadBodyBytes ?? 0;
    const promptBlocks =
      blocks.length < cfg.prefix.max_blocks && req.unreadBodyBytes === undefined ? blocks.length : Math.max(blocks.length, Math.floor(bodyBytes / cfg.prefix.block_chars));
    const cls = serviceClass(req.headers, cfg.classes, knobs.class, cfg.routing.protocol === 'endpoint_picker', DEFAULTS.objectiveHeader);
    if (cls.ignored) this.unknownClass(cls, cfg, scope);
    const session = key?.kind === 'session';
    const eligible = opts.eligible;
    if (eligible && !pool.workerIds.some((id) => eligible.has(id))) {
      return {
        kind: 'reject',
        error: new KvgateError('no_healthy_workers', `no worker of pool "${pool.name}" is in the request's endpoint subset`),
        pool: pool.name,
        key,
        model,
        views: [],
        routing: answer,
      };
    }
    // Only sessions have affinities in the store; prompts are matched through the prefix index.
    // A mode that ignores sessions (prefix, least_loaded) neither reads nor moves the affinity:
    // the policy does not rely on it, so it must not be a commit precondition either (otherwise a
    // session placed by a sticky route would fail every commit on a non-sticky one).
    const sticky = cfg.routing.policy === 'both' || cfg.routing.policy === 'session';
    const q: StateQuery = { pool: pool.name, key: sticky ? storeKeyOf(key) : undefined, workers: pool.workerIds, blocks };
    const promptTokens = promptBlocks > 0 ? Math.ceil(promptBlocks * tokensPerBlock(cfg)) : undefined;
    // A session of a long prompt (an agent's) is counted among its worker's live sessions by its
    // commit, and only for one does the sessions term read them (no map per request for the others).
    if (session && sticky && cfg.scoring.sessions_weight > 0 && (promptTokens ?? 0) >= cfg.scoring.sessions_min_tokens) {
      q.liveWindowMs = cfg.scoring.sessions_window_s * 1000;
    }
    // Time waiting on the store. (Timed inline, not through a helper: a closure and an async
    // wrapper per request showed in the profile; a rejected call ends the request anyway.)
    let storeMs = 0;
    let t0 = 0;

    // A continued stored response can only be served where it was stored: that worker alone.
    let pinned: string | undefined;
    let pinnedByPreviousKey = false;
    if (storedResponse !== undefined) {
      t0 = performance.now();
      pinned = await this.store.responseWorker(pool.name, storedResponse, scope);
      // Stored before a key rotation: recorded under the previous key's hash.
      if (pinned === undefined && storedResponsePrevious !== undefined) {
        pinned = await this.store.responseWorker(pool.name, storedResponsePrevious, scope);
        pinnedByPreviousKey = pinned !== undefined;
      }
      storeMs += performance.now() - t0;
    }
    if (pinned !== undefined) {
      debugLogger(this.logger, scope)?.debug({ pool: pool.name, worker: pinned, key_hash: key?.hash }, 'stored response: pinned to the worker that holds it');
      const unservable = pinnedProblem(pinned, pool, eligible);
      if (unservable) return { kind: 'reject', error: unservable, pool: pool.name, key, model, views: [], routing: answer };
    }

    // A request without a key breaks ties on a seed of its own (the policy stays a function of its input).
    const tieSeed = key === undefined ? `#${this.keyless++}` : undefined;
    let snap = this.store.cachedSnapshot(q);
    let fresh = this.store.backend === 'memory';
    // A session with no affinity in view, while a key rotation keeps the previous key: its affinity
    // recorded under that key's hash (before the rotation) is where it goes; the commit then
    // records it under the current key, so the next request finds it there.
    let previous: { worker: string; keyInflight: number } | undefined;
    if (snap.affinity === undefined && q.key !== undefined && key?.previousHash !== undefined) {
      t0 = performance.now();
      try {
        const old = await this.store.snapshot({ pool: q.pool, key: storeKeyOf({ ...key, hash: key.previousHash }), workers: q.workers, blocks: [] }, scope);
        if (old.affinity !== undefined) previous = { worker: old.affinity, keyInflight: old.keyInflight };
      } catch (err) {
        // Routed as a new session: a lookup that failed costs the session its cache, nothing else.
        requestLogger(this.logger, scope).warn({ err: (err as Error).message, key_hash: key.hash }, 'session lookup under the previous hash key failed');
      }
      storeMs += performance.now() - t0;
    }
    let views: WorkerView[] = [];
    for (let attempt = 1; attempt <= MAX_COMMITS; attempt++) {
      const all = this.views(snap, pool, knobs.max_inflight, cfg.limits.max_inflight);
      views = pinned !== undefined ? all.filter((w) => w.id === pinned) : eligible ? all.filter((w) => eligible.has(w.id)) : all;
      if (pinned !== undefined && (views[0]?.state === 'down' || views[0]?.state === 'draining')) {
        const error = new KvgateError('previous_response_unavailable', `the worker holding the previous response is ${views[0].state}`, { details: { worker: pinned } });
        return { kind: 'reject', error, pool: pool.name, key, model, views, routing: answer };
      }
      // Every field written, absent ones as undefined: conditional spreads (`...(c ? { x } : {})`)
      // copied through V8's generic path on every decision. The policy reads both as absent.
      // The previous key's affinity stands in while the current key has none.
      const fromPrevious = snap.affinity === undefined ? previous : undefined;
      const decided = decide({
        keyHash: key?.hash,
        tieSeed,
        session,
        affinity: fromPrevious?.worker ?? snap.affinity,
        keyInflight: fromPrevious?.keyInflight ?? snap.keyInflight,
        totalBlocks: blocks.length,
        promptBlocks,
        promptTokens,
        workers: pinned === undefined ? views : views.map(servingPin),
        mode: cfg.routing.policy,
        weights: scoreWeights(cfg.scoring),
        balanceFloor: cfg.scoring.balance_floor,
        sessionsFloor: cfg.scoring.sessions_floor,
        sessionsMinTokens: cfg.scoring.sessions_min_tokens,
        maxInflightPerSession: cfg.affinity.max_inflight_per_session,
        overflowFactor: cfg.limits.overflow_factor,
        classShare: cls.share < 1 ? cls.share : undefined,
        adapter: model !== undefined && isAdapter(model, pool, views) ? (cfg.scoring.adapter_filter ? { name: model } : { name: model, filter: false }) : undefined,
      });
      // A subset (the proxy's hint) needs nothing here: the policy's prefix bound names the workers it weighed.
      const decision = pinned === undefined ? decided : pinnedDecision(decided, pinned);
      if (decision.kind === 'shed') {
        // Never shed on a stale view: re-read once, then trust it.
        if (!fresh) {
          t0 = performance.now();
          snap = await this.store.snapshot(q, scope);
          storeMs += performance.now() - t0;
          fresh = true;
          attempt--;
          continue;
        }
        return this.shed(decision, key, model, pool, answer, views, cls, scope);
      }
      const preconditions = checkable(decision.preconditions, snap, all);
      t0 = performance.now();
      // Field by field, not `{ ...q, worker, ... }`: each property added after a spread went
      // through V8's slow path (a runtime call apiece, ~10% of Gate.route at 2 KB).
      const res = await this.store.commit({
        pool: q.pool,
        key: q.key,
        workers: q.workers,
        blocks: q.blocks,
        worker: decision.worker,
        // Found under the previous key: the current key has no affinity, which is what the commit checks.
        preconditions: fromPrevious ? withoutAffinity(preconditions) : preconditions,
        affinityTtlMs: cfg.affinity.ttl_s * 1000,
        prefixTtlMs: cfg.prefix.ttl_s * 1000,
        capacityBlocks: this.capacityBlocks(pool, decision.worker, cfg),
        // Counted among its worker's live sessions while its prompt is long enough (an agent's). A
        // chat turn's commit leaves them alone, so it costs Redis no key and no command; a session
        // whose history was cut short stays counted until its window lapses.
        live: q.liveWindowMs !== undefined ? true : undefined,
        // And the counts asked for again: on Redis the commit's reply brings them, for the next decision.
        liveWindowMs: q.liveWindowMs,
      }, scope);
      storeMs += performance.now() - t0;
      if (res.ok) {
        // Tallied while the backlog term is weighed (it is by default), and for a worker with engine
        // metrics whatever the weight: the one-off fit past KV pressure reads it there. A pool
        // without metrics at weight 0 does no backlog work on the request path.
        if (cfg.scoring.backlog_weight > 0 || pool.workers.get(decision.worker)?.metrics_url !== undefined) {
          this.pending.add(res.lease, promptBlocks - (views.find((w) => w.id === decision.worker)?.prefixBlocks ?? 0));
        }
        const routed = this.routed(decision, pool, res.lease, key, model, res.degraded, attempt, storeMs, cls, views, scope);
        if ((pinnedByPreviousKey || fromPrevious !== undefined) && routed.kind === 'route') routed.fromPreviousKey = true;
        return routed;
      }
      snap = res.snapshot;
      fresh = true;
    }
    const explanation: Explanation = { mode: cfg.routing.policy, totalBlocks: blocks.length, rule: 'shed', spilled: false, candidates: [] };
    return this.shed(
      { kind: 'shed', reason: 'overloaded', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, explanation },
      key,
      model,
      pool,
      answer,
      views,
      cls,
      scope,
    );
  }

  /**
   * Moves a session's affinity from `from` to `to`, unless it no longer points at `from` (another
   * request moved it meanwhile). Used when the proxy reports that another worker served a request:
   * that worker now holds its KV cache. Only within one pool (a session never crosses pools): `to`
   * must be in `from`'s pool. Never throws; true when the affinity moved. `scope`: the request
   * whose served endpoint moved it.
   */
  async reassign(key: RoutingKey, from: string, to: string, scope?: RequestScope): Promise<boolean> {
    const storeKey = storeKeyOf(key);
    const { config, pools } = this.setup;
    const pool = pools.poolOfWorker(to);
    if (storeKey === undefined || !pool || from === to || pools.poolOfWorker(from) !== pool) return false;
    try {
      // A commit whose only precondition is the affinity it replaces; its lease is returned at once.
      const res = await this.store.commit({
        pool: pool.name,
        key: storeKey,
        workers: pool.workerIds,
        blocks: [],
        worker: to,
        preconditions: { affinity: from, below: [], atOrAbove: [], states: [] },
        affinityTtlMs: config.affinity.ttl_s * 1000,
        prefixTtlMs: config.prefix.ttl_s * 1000,
        capacityBlocks: this.capacityBlocks(pool, to, config),
      }, scope);
      if (!res.ok) return false;
      await this.release(res.lease, scope);
      return true;
    } catch (err) {
      requestLogger(this.logger, scope).warn({ err: (err as Error).message, key_hash: key.hash }, 'affinity reassignment failed');
      return false;
    }
  }

  /**
   * Records that `worker` (of `pool`) produced the stored response `responseId` (read from its
   * response), so that a request continuing it reaches that worker. Never throws. `scope`: the
   * request whose response it is.
   */
  async recordResponse(pool: string, worker: string, responseId: string, scope?: RequestScope): Promise<void> {
    try {
      const hash = responseIdHash(responseId, this.sessionHashKey);
      await this.store.recordResponse(pool, hash, worker, this.setup.config.affinity.response_ttl_s * 1000, scope);
      debugLogger(this.logger, scope)?.debug({ pool, worker, response_hash: hash }, 'stored response learned');
    } catch (err) {
      requestLogger(this.logger, scope).warn({ err: (err as Error).message, worker }, 'recording a response id failed');
    }
  }

  /** Ends a routed request's in-flight count. Safe to call once per lease; never throws. `scope`: the request that held it. */
  release(lease: Lease, scope?: RequestScope): Promise<void> {
    this.pending.remove(lease);
    return this.store.release(lease).catch((err: unknown) => {
      requestLogger(this.logger, scope).warn({ err: (err as Error).message, worker: lease.worker }, 'lease release failed');
    });
  }

  /**
   * A pool's workers as the policy sees them: config limits joined with the store's counts,
   * operator states and prefix matches, and with the health and load each worker last reported.
   * `maxInflight` (a route's knob) replaces every worker's limit.
   */
  views(snap: Snapshot, pool: Pool = this.setup.pools.default, maxInflight?: number, defaultMaxInflight = this.setup.config.limits.max_inflight): WorkerView[] {
    return pool.workerIds.map((id) => {
      const w = pool.workers.get(id)!;
      const sig: Omit<WorkerSignalsSeen, 'readAt'> | undefined = w.metrics_url ? this.signals.get(id) ?? { record: undefined, verdict: assessHealth(undefined, this.thresholds(), false) } : undefined;
      const view: WorkerView = {
        id,
        state: effectiveState(snap.states.get(id), sig?.verdict),
        inflight: snap.inflight.get(id) ?? 0,
        maxInflight: maxInflight ?? w.max_inflight ?? pool.config.max_inflight ?? defaultMaxInflight,
        prefixBlocks: snap.prefix.get(id) ?? 0,
      };
      const live = snap.live?.get(id);
      if (live !== undefined) view.liveSessions = live;
      const pending = this.pending.of(id);
      if (pending > 0) view.pendingPrefill = pending;
      const s = sig?.record?.signals;
      if (s?.kvUsage !== undefined) view.kvUsage = s.kvUsage;
      if (s?.waiting !== undefined) view.waiting = s.waiting;
      if (s?.running !== undefined) view.running = s.running;
      const operator = snap.states.get(id);
      if (sig?.record && (operator === undefined || operator === 'healthy')) {
        view.engineRoom = hasEngineRoom(sig.verdict, s, w.memory_pressure_from_framebuffer);
        const room = w.memory_pressure_from_framebuffer ? undefined : kvRoomTokens(sig.verdict, s);
        // Less what this gate sent it that no scrape may have counted yet: its leases' prefill.
        if (room !== undefined) view.kvRoomTokens = Math.max(0, room - pending * tokensPerBlock(this.setup.config));
      }
      if (sig?.adapters !== undefined) view.adapters = sig.adapters;
      return view;
    });
  }

  /** Takes the latest scrapes of every pool's workers (from the store, shared by every replica). */
  setSignals(records: ReadonlyMap<string, SignalRecord>): Map<string, HealthVerdict> {
    return this.judge(this.clock(), (w) => {
      const record = records.get(w.id);
      return { record, adapters: adaptersOf(record) };
    });
  }

  /**
   * The store could not be read: each worker is judged on this replica's own latest scrape of it
   * (`own`, aged by this replica's clock) or on its last record from the store, aged by the time
   * since it was read as the store would have aged it, whichever is younger. Without this the
   * verdicts of the last read stood for the whole outage: a worker that died meanwhile kept its
   * traffic, and one that was down or pressured stayed so. The collector scrapes every worker
   * itself while the store is away, so figures stay fresh; a worker with none fresher than
   * `signals.stale_after_ms` is down ('stale'), as on figures the store reports stale. Returns
   * every verdict, as `setSignals` does.
   */
  ageSignals(own: ReadonlyMap<string, SignalRecord> = new Map()): Map<string, HealthVerdict> {
    const now = this.clock();
    return this.judge(now, (w) => {
      const seen = this.signals.get(w.id);
      // The record itself ages (what the admin API shows), and is read again as of now.
      const aged = seen?.record && { ...seen.record, ageMs: seen.record.ageMs + Math.max(0, now - seen.readAt) };
      const mine = own.get(w.id);
      const record = mine !== undefined && (aged === undefined || mine.ageMs <= aged.ageMs) ? mine : aged;
      return { record, adapters: record === mine ? adaptersOf(mine) : seen?.adapters };
    });
  }

  /**
   * Judges every worker with metrics on the record `recordOf` gives it, read at `readAt` (the
   * gate's clock), keeps what the views read, and returns the verdicts. A worker with no record keeps the verdict a reload kept
   * for it, while that lasts (`keepVerdictsOfNewlyScraped`).
   */
  private judge(readAt: number, recordOf: (w: WorkerConfig) => { record: SignalRecord | undefined; adapters: WorkerSignalsSeen['adapters'] }): Map<string, HealthVerdict> {
    const t = this.thresholds();
    const next = new Map<string, WorkerSignalsSeen>();
    const verdicts = new Map<string, HealthVerdict>();
    for (const w of this.setup.config.workers) {
      if (!w.metrics_url) continue;
      const { record, adapters } = recordOf(w);
      const kept = record === undefined ? this.keptVerdict(w.id, readAt) : undefined;
      const verdict = kept?.verdict ?? assessHealth(record, t, w.memory_pressure_from_framebuffer);
      next.set(w.id, kept ?? (adapters === undefined ? { record, verdict, readAt } : { record, verdict, readAt, adapters }));
      verdicts.set(w.id, verdict);
    }
    this.signals = next;
    return verdicts;
  }

  /** The verdict a reload kept for a worker with no record yet (`keepVerdictsOfNewlyScraped`), while it lasts. */
  private keptVerdict(worker: string, now: number): WorkerSignalsSeen | undefined {
    const seen = this.signals.get(worker);
    return seen?.keptUntil !== undefined && now < seen.keptUntil ? seen : undefined;
  }

  /** What the gate knows of a worker's reported signals (for the admin API). */
  signalsOf(worker: string): { record: SignalRecord | undefined; verdict: HealthVerdict } | undefined {
    return this.signals.get(worker);
  }

  thresholds(): HealthThresholds {
    const c = this.setup.config;
    return {
      kvPressure: c.thresholds.kv_pressure,
      memoryPressure: c.thresholds.memory_pressure,
      maxQueue: c.thresholds.max_queue,
      maxTempC: c.thresholds.max_temp_c,
      staleAfterMs: c.signals.stale_after_ms,
      failuresDown: c.signals.failures_down,
    };
  }

  /** How many prefix blocks a worker's KV cache holds: its capacity in tokens over tokens per block. */
  private capacityBlocks(pool: Pool, worker: string, cfg: Config): number {
    const tokens = pool.workers.get(worker)?.kv_capacity_tokens ?? DEFAULTS.kvCapacityTokens;
    return Math.max(1, Math.floor(tokens / tokensPerBlock(cfg)));
  }

  /** A knob or header named a class the config does not have: said once a minute per value; the next source classified the request. */
  private unknownClass(cls: ServiceClass, cfg: Config, scope: RequestScope | undefined): void {
    const ignored = cls.ignored!;
    const suppressed = this.problems.take(`class:${ignored.source}:${ignored.value}`);
    if (suppressed === undefined) return;
    requestLogger(this.logger, scope).warn(
      { source: ignored.source, value: ignored.value, classes: cfg.classes.levels.map((l) => l.name), class: cls.name, class_source: cls.source, repeats: suppressed },
      'unknown class of service ignored',
    );
  }

  /** A route named a pool the config does not have: said once a minute, and the request is placed as if it had not. */
  private unknownPool(name: string, pools: PoolTable, scope: RequestScope | undefined): void {
    const suppressed = this.problems.take(`pool:${name}`);
    if (suppressed === undefined) return;
    requestLogger(this.logger, scope).warn(
      { knob: 'pool', value: name, pools: pools.all().map((p) => p.name), repeats: suppressed },
      'knob rejected: no such pool; choosing the pool by model, else the default pool',
    );
  }

  private routed(
    decision: Extract<Decision, { kind: 'route' }>,
    pool: Pool,
    lease: Lease,
    key: RoutingKey | undefined,
    model: string | undefined,
    degraded: boolean,
    attempts: number,
    storeMs: number,
    cls: ServiceClass,
    views: readonly WorkerView[],
    scope: RequestScope | undefined,
  ): GateResult {
    // With and without `from` as two literals, not a conditional spread in the middle: every
    // property after a spread took V8's slow path, on every routed request.
    const from = decision.from;
    const atMs = Date.now();
    const explanation = decision.explanation;
    const record: DecisionEntry =
      from === undefined
        ? { atMs, pool: pool.name, key_kind: key?.kind, key_hash: key?.hash, outcome: decision.outcome, worker: decision.worker, attempts, degraded, class: cls.name, explanation }
        : { atMs, pool: pool.name, key_kind: key?.kind, key_hash: key?.hash, outcome: decision.outcome, worker: decision.worker, from, attempts, degraded, class: cls.name, explanation };
    this.decisions.push(record);
    // The fields are built only when they will be written (`?.` skips them with debug off; this
    // runs on every routed request).
    debugLogger(this.logger, scope)?.debug(
      {
        key_kind: key?.kind,
        key_source: key?.source,
        key_hash: key?.hash,
        pool: pool.name,
        outcome: decision.outcome,
        worker: decision.worker,
        from: decision.from,
        prefix_blocks: decision.explanation.candidates.find((c) => c.worker === decision.worker)?.prefixBlocks ?? 0,
        total_blocks: decision.explanation.totalBlocks,
        attempts,
        degraded,
      },
      'routed',
    );
    // Routing knows worker ids; the Envoy cluster that names one to the proxy is the gate's to add.
    const { cluster, address: endpoint } = pool.workers.get(decision.worker)!;
    return from === undefined
      ? { kind: 'route', pool: pool.name, worker: decision.worker, cluster, endpoint, outcome: decision.outcome, lease, key, degraded, attempts, explanation, storeMs, class: cls.name, model, views }
      : { kind: 'route', pool: pool.name, worker: decision.worker, cluster, endpoint, outcome: decision.outcome, from, lease, key, degraded, attempts, explanation, storeMs, class: cls.name, model, views };
  }

  private shed(
    decision: Extract<Decision, { kind: 'shed' }>,
    key: RoutingKey | undefined,
    model: string | undefined,
    pool: Pool,
    routing: NonNullable<Extract<GateResult, { kind: 'reject' }>['routing']>,
    views: readonly WorkerView[],
    cls: ServiceClass,
    scope: RequestScope | undefined,
  ): GateResult {
    const details = { class: cls.name };
    const error =
      decision.reason !== 'overloaded'
        ? new KvgateError('no_healthy_workers', 'no worker is healthy', { details })
        : new KvgateError('overloaded', overloadMessage(views, cls, (id) => this.signals.get(id)?.verdict.codes), { details });
    this.decisions.push({ atMs: Date.now(), pool: pool.name, key_kind: key?.kind, key_hash: key?.hash, outcome: 'shed', reason: decision.reason, class: cls.name, explanation: decision.explanation });
    debugLogger(this.logger, scope)?.debug({ key_kind: key?.kind, key_hash: key?.hash, pool: pool.name, outcome: 'shed', reason: decision.reason, class: cls.name }, 'shed');
    return { kind: 'reject', error, pool: pool.name, key, model, explanation: decision.explanation, views, routing, class: cls.name };
  }
}

/**
 * Why every eligible worker that is up refused the request, in words: at its in-flight limit (or
 * the share of it the request's class may use), or pressured, with the causes its signals gave
 * (KV, memory, heat, queue). A fleet under KV pressure was reported as one at its in-flight limit.
 */
function overloadMessage(views: readonly WorkerView[], cls: ServiceClass, causes: (worker: string) => readonly string[] | undefined): string {
  const share = cls.share < 1 ? cls.share : undefined;
  const limit = share === undefined ? 'its in-flight limit' : `the share of its in-flight limit that class "${cls.name}" may use (${Math.round(share * 1000) / 10}%)`;
  let full = 0;
  let pressured = 0;
  const why = new Set<string>();
  for (const v of views) {
    if (v.state !== 'healthy' && v.state !== 'pressured') continue;
    if (v.inflight >= classLimit(v.maxInflight, share)) full++;
    else if (v.state === 'pressured') {
      pressured++;
      for (const c of causes(v.id) ?? []) why.add(c);
    }
  }
  if (pressured === 0) return `every eligible worker is at ${limit}`;
  const p = `${pressured} pressured${why.size > 0 ? ` (${[...why].join(', ')})` : ''}`;
  return full === 0 ? `every eligible worker is pressured and takes no new work: ${p}` : `every eligible worker is pressured or at ${limit}: ${p}, ${full} at the limit`;
}

/**
 * Why a pinned worker (the one holding a continued response) cannot be asked at all: it left the
 * pool (its stored responses went with it), or the proxy's endpoint subset excludes it.
 */
function pinnedProblem(worker: string, pool: Pool, eligible: ReadonlySet<string> | undefined): KvgateError | undefined {
  if (!pool.workerIds.includes(worker)) {
    return new KvgateError('previous_response_not_found', 'the previous response was stored on a worker that is no longer in the pool', { details: { worker } });
  }
  if (eligible && !eligible.has(worker)) {
    return new KvgateError('previous_response_unavailable', "the worker holding the previous response is outside the request's endpoint subset", { details: { worker } });
  }
  return undefined;
}

/** A worker's last scrape as the gate keeps it: the record, the health read from it, and its adapters. */
interface WorkerSignalsSeen {
  record: SignalRecord | undefined;
  verdict: HealthVerdict;
  /** When the record was read (the gate's monotonic clock): its `ageMs` was its age then. */
  readAt: number;
  /**
   * Set for a worker a reload gave a `metrics_url` while it served: its verdict from before stands
   * (no record yet) until then (the gate's clock).
   */
  keptUntil?: number;
  /** Adapters it runs or queues, merged once per scrape (not once per worker view, request and attempt). */
  adapters?: NonNullable<WorkerView['adapters']>;
}

/** The verdict of a worker judged by no signals (it had no metrics_url): healthy, as `effectiveState` reads none. */
const WITHOUT_METRICS: HealthVerdict = { state: 'healthy', codes: [], reasons: [] };

function adaptersOf(record: SignalRecord | undefined): WorkerSignalsSeen['adapters'] {
  const lora = record?.signals.lora;
  if (!lora || !Array.isArray(lora.running) || !Array.isArray(lora.waiting) || !Number.isFinite(lora.maxLora)) return undefined;
  return { names: lora.waiting.length === 0 ? lora.running : [...new Set([...lora.running, ...lora.waiting])], max: lora.maxLora };
}

/**
 * A continued response is its conversation's next turn, and a pressured worker keeps serving its
 * conversations: the pinned worker is shown to the policy as able to take it (the policy lets
 * only healthy workers take keys they do not hold), and the commit checks the states that keep
 * conversations instead.
 */
function servingPin(w: WorkerView): WorkerView {
  return w.state === 'pressured' ? { ...w, state: 'healthy' } : w;
}

function pinnedDecision(d: Decision, pinned: string): Decision {
  if (d.kind !== 'route') return d;
  const states = [...d.preconditions.states.filter((x) => x.worker !== pinned), { worker: pinned, in: PIN_KEEPS }];
  // One candidate: no prefix match anywhere could change the choice, so there is no bound to check.
  const { prefix: _none, ...preconditions } = d.preconditions;
  return { ...d, preconditions: { ...preconditions, states } };
}

const PIN_KEEPS: readonly WorkerState[] = ['healthy', 'pressured'];

/**
 * A request's model is a LoRA adapter when its pool declares it, or when a worker of the pool
 * reports it among its adapters (vLLM names adapters by their served name, the request's `model`).
 */
function isAdapter(model: string, pool: Pool, views: readonly WorkerView[]): boolean {
  if (pool.adapters.has(model)) return true;
  if (pool.models?.has(model)) return false;
  return views.some((v) => v.adapters !== undefined && v.adapters.names.includes(model));
}

/**
 * The store can check only states it holds (an operator's). A state the decision read from
 * scraped signals is a local, delayed view the store cannot check, but the decision still relied
 * on the operator having set none (an operator's state overrides the signals: `effectiveState`):
 * the commit checks that the store still has none, or one the decision accepts. Dropping the check
 * instead let a worker pressured by its signals and drained by another replica (or by this one,
 * its view not yet refreshed) take the prompts it holds until the next refresh. `views` are the
 * pool's workers as the decision saw them (built from `snap`, so states agree).
 */
function checkable(p: Preconditions, snap: Snapshot, views: readonly WorkerView[]): Preconditions {
  // A check that already accepts 'healthy' (the usual lists do) or whose state the store recorded
  // itself holds as it is; only the rest are widened, and only then is anything copied.
  const holds = (s: Preconditions['states'][number]) =>
    s.in.includes('healthy') || (snap.states.get(s.worker) ?? 'healthy') === views.find((v) => v.id === s.worker)?.state;
  if (p.states.every(holds)) return p;
  // Otherwise the signals set the state the decision saw, which holds while the store records
  // none ('healthy'): that, or a recorded state the decision accepts as it is.
  const states = p.states.map((s) => (holds(s) ? s : { worker: s.worker, in: [...s.in, 'healthy'] as WorkerState[] }));
  // Field by field (not `{ ...p, states }`: a property after a spread takes V8's slow path, every decision).
  const { affinity, below, atOrAbove, prefix } = p;
  return prefix !== undefined ? { affinity, below, atOrAbove, states, prefix } : { affinity, below, atOrAbove, states };
}

/**
 * The preconditions with no affinity expected: a session found under the previous session hash key
 * has none under the current one, which is the key the commit checks and writes.
 */
function withoutAffinity(p: Preconditions): Preconditions {
  const { below, atOrAbove, states, prefix } = p;
  return prefix !== undefined ? { affinity: undefined, below, atOrAbove, states, prefix } : { affinity: undefined, below, atOrAbove, states };
}

/** Tokens in one prompt block, estimated from its characters (`prefix.chars_per_token`). */
function tokensPerBlock(cfg: Config): number {
  return cfg.prefix.block_chars / cfg.prefix.chars_per_token;
}

/** Only sessions have affinities in the store; prompts are matched through the prefix index. */
function storeKeyOf(key: RoutingKey | undefined): string | undefined {
  return key?.kind === 'session' ? `s:${key.hash}` : undefined;
}

const weightsOfScoring = new WeakMap<Config['scoring'], ScoreWeights>();

/**
 * The score weights of a config, by scorer name (`scoring.<name>_weight`), as one object per config:
 * the policy builds its profiles once per weights object.
 */
function scoreWeights(scoring: Config['scoring']): ScoreWeights {
  let w = weightsOfScoring.get(scoring);
  if (!w) {
    w = { prefix: scoring.prefix_weight, load: scoring.load_weight, kv: scoring.kv_weight, balance: scoring.balance_weight, ...weightsByName(scoring, SCORER_NAMES) };
    weightsOfScoring.set(scoring, w);
  }
  return w;
}
