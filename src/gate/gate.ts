/**
 * The gate: from an understood request to a committed routing decision. It joins the three rooms
 * behind the transport: request understanding (keys, prompt blocks), the pure policy, and the
 * store. It knows no protocol; the ext_proc transport, the simulator and the benchmarks all call
 * `route()`.
 */
import type { Logger } from 'pino';
import type { Config, WorkerConfig } from '../config/schema.js';
import { DEFAULTS } from '../config/defaults.js';
import { KvgateError } from '../errors.js';
import { understand, type RoutingKey } from '../request/keys.js';
import type { RequestInfo } from '../request/request.js';
import { decide } from '../routing/policy.js';
import type { Decision, Explanation, RouteOutcome, WorkerView } from '../routing/types.js';
import type { Lease, RoutingStore, Snapshot, StateQuery } from '../state/store.js';
import { DecisionLog, type DecisionRecord } from './decision-log.js';

export type GateResult =
  | {
      kind: 'route';
      worker: string;
      cluster: string;
      outcome: RouteOutcome;
      from?: string;
      lease: Lease;
      key: RoutingKey | undefined;
      /** Routed on local state because the shared store was unreachable. */
      degraded: boolean;
      /** Store commits it took (1 unless another replica raced this one). */
      attempts: number;
      /** Why: every candidate with its load, prefix match and score. */
      explanation: Explanation;
      /** Time spent waiting on the store for this decision. */
      storeMs: number;
    }
  | { kind: 'reject'; error: KvgateError; key: RoutingKey | undefined; explanation?: Explanation };

/**
 * Commits tried before giving up. Each failed commit means another replica changed the same
 * facts in between; four in a row only happen when every worker sits at its limit.
 */
const MAX_COMMITS = 4;

export class Gate {
  private workerIds: readonly string[];
  private workersById: ReadonlyMap<string, WorkerConfig>;
  /** The last decisions, for the admin debug endpoint (hashes only, never prompts). */
  readonly decisions = new DecisionLog(100);

  constructor(
    private config: Config,
    readonly store: RoutingStore,
    private readonly logger: Logger,
  ) {
    this.workerIds = config.workers.map((w) => w.id);
    this.workersById = new Map(config.workers.map((w) => [w.id, w]));
  }

  get currentConfig(): Config {
    return this.config;
  }

  /** The pool every worker is in until pools are configured. */
  readonly pool = DEFAULTS.pool;

  async route(req: RequestInfo): Promise<GateResult> {
    let key: RoutingKey | undefined;
    let blocks: string[];
    try {
      const u = understand(req, this.config);
      key = u.key;
      blocks = u.blocks;
      // Client mistakes are logged at info: they are worth seeing, not worth paging anyone.
      if (u.bodyProblem && u.bodyProblem !== 'empty') {
        this.logger.info({ path: req.path, problem: u.bodyProblem }, 'request body unusable; routing without a body key');
      }
    } catch (err) {
      const error = KvgateError.from(err, 'bad_request');
      this.logger.info({ path: req.path, code: error.code, err: error.message }, 'request rejected');
      return { kind: 'reject', error, key: undefined };
    }
    const session = key?.kind === 'session';
    // Only sessions have affinities in the store; prompts are matched through the prefix index.
    const q: StateQuery = { pool: this.pool, key: session ? `s:${key!.hash}` : undefined, workers: this.workerIds, blocks };
    const cfg = this.config;
    let storeMs = 0;
    const timed = async <T>(p: Promise<T>): Promise<T> => {
      const t0 = performance.now();
      try {
        return await p;
      } finally {
        storeMs += performance.now() - t0;
      }
    };

    let snap = this.store.cachedSnapshot(q);
    let fresh = this.store.backend === 'memory';
    for (let attempt = 1; attempt <= MAX_COMMITS; attempt++) {
      const decision = decide({
        keyHash: key?.hash,
        session,
        affinity: snap.affinity,
        keyInflight: snap.keyInflight,
        totalBlocks: blocks.length,
        workers: this.views(snap),
        mode: cfg.routing.policy,
        weights: { prefix: cfg.scoring.prefix_weight, load: cfg.scoring.load_weight, kv: cfg.scoring.kv_weight },
        maxInflightPerSession: cfg.affinity.max_inflight_per_session,
      });
      if (decision.kind === 'shed') {
        // Never shed on a stale view: re-read once, then trust it.
        if (!fresh) {
          snap = await timed(this.store.snapshot(q));
          fresh = true;
          attempt--;
          continue;
        }
        return this.shed(decision, key);
      }
      const res = await timed(
        this.store.commit({
          ...q,
          worker: decision.worker,
          preconditions: decision.preconditions,
          affinityTtlMs: cfg.affinity.ttl_s * 1000,
          prefixTtlMs: cfg.prefix.ttl_s * 1000,
          capacityBlocks: this.capacityBlocks(decision.worker),
        }),
      );
      if (res.ok) return this.routed(decision, res.lease, key, res.degraded, attempt, storeMs);
      snap = res.snapshot;
      fresh = true;
    }
    const explanation: Explanation = { mode: cfg.routing.policy, totalBlocks: blocks.length, rule: 'shed', spilled: false, candidates: [] };
    return this.shed({ kind: 'shed', reason: 'overloaded', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] }, explanation }, key);
  }

  /** Ends a routed request's in-flight count. Safe to call once per lease; never throws. */
  release(lease: Lease): Promise<void> {
    return this.store.release(lease).catch((err: unknown) => {
      this.logger.warn({ err: (err as Error).message, worker: lease.worker }, 'lease release failed');
    });
  }

  /** Workers as the policy sees them: config limits joined with the store's counts, states and prefix matches. */
  views(snap: Snapshot): WorkerView[] {
    return this.workerIds.map((id) => {
      const w = this.workersById.get(id)!;
      return {
        id,
        cluster: w.cluster,
        state: snap.states.get(id) ?? 'healthy',
        inflight: snap.inflight.get(id) ?? 0,
        maxInflight: w.max_inflight ?? this.config.limits.max_inflight,
        prefixBlocks: snap.prefix.get(id) ?? 0,
      };
    });
  }

  /** How many prefix blocks a worker's KV cache holds: its capacity in tokens over tokens per block. */
  private capacityBlocks(worker: string): number {
    const tokens = this.workersById.get(worker)?.kv_capacity_tokens ?? DEFAULTS.kvCapacityTokens;
    const tokensPerBlock = this.config.prefix.block_chars / this.config.prefix.chars_per_token;
    return Math.max(1, Math.floor(tokens / tokensPerBlock));
  }

  private routed(
    decision: Extract<Decision, { kind: 'route' }>,
    lease: Lease,
    key: RoutingKey | undefined,
    degraded: boolean,
    attempts: number,
    storeMs: number,
  ): GateResult {
    const record: DecisionRecord = {
      at: new Date().toISOString(),
      key_kind: key?.kind,
      key_hash: key?.hash,
      outcome: decision.outcome,
      worker: decision.worker,
      ...(decision.from !== undefined ? { from: decision.from } : {}),
      attempts,
      degraded,
      explanation: decision.explanation,
    };
    this.decisions.push(record);
    this.logger.debug(
      {
        key_kind: key?.kind,
        key_source: key?.source,
        key_hash: key?.hash,
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
    return {
      kind: 'route',
      worker: decision.worker,
      cluster: decision.cluster,
      outcome: decision.outcome,
      ...(decision.from !== undefined ? { from: decision.from } : {}),
      lease,
      key,
      degraded,
      attempts,
      explanation: decision.explanation,
      storeMs,
    };
  }

  private shed(decision: Extract<Decision, { kind: 'shed' }>, key: RoutingKey | undefined): GateResult {
    const error =
      decision.reason === 'overloaded'
        ? new KvgateError('overloaded', 'every eligible worker is at its in-flight limit')
        : new KvgateError('no_healthy_workers', 'no worker is healthy');
    this.decisions.push({ at: new Date().toISOString(), key_kind: key?.kind, key_hash: key?.hash, outcome: 'shed', reason: decision.reason, explanation: decision.explanation });
    this.logger.debug({ key_kind: key?.kind, key_hash: key?.hash, outcome: 'shed', reason: decision.reason }, 'shed');
    return { kind: 'reject', error, key, explanation: decision.explanation };
  }
}
