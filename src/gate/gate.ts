/**
 * The gate: from an understood request to a committed routing decision. It joins the three rooms
 * behind the transport: request understanding (keys), the pure policy, and the store. It knows no
 * protocol; the ext_proc transport, the simulator and the benchmarks all call `route()`.
 */
import type { Logger } from 'pino';
import type { Config, WorkerConfig } from '../config/schema.js';
import { DEFAULTS } from '../config/defaults.js';
import { KvgateError } from '../errors.js';
import { understand, type RoutingKey } from '../request/keys.js';
import type { RequestInfo } from '../request/request.js';
import { decide } from '../routing/policy.js';
import type { Decision, RouteOutcome, WorkerView } from '../routing/types.js';
import type { Lease, RoutingStore, Snapshot } from '../state/store.js';

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
      /** The candidates as the deciding snapshot showed them (for traces). */
      views?: readonly WorkerView[];
    }
  | { kind: 'reject'; error: KvgateError; key: RoutingKey | undefined; views?: readonly WorkerView[] };

export interface RouteOptions {
  /**
   * Only these worker ids may take the request (e.g. the proxy's endpoint subset hint). Others
   * are invisible to the policy; an affinity to one of them moves. An empty set sheds with 503.
   */
  eligible?: ReadonlySet<string>;
}

/**
 * Commits tried before giving up. Each failed commit means another replica changed the same
 * facts in between; four in a row only happen when every worker sits at its limit.
 */
const MAX_COMMITS = 4;

export class Gate {
  private workerIds: readonly string[];
  private workersById: ReadonlyMap<string, WorkerConfig>;

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

  async route(req: RequestInfo, opts: RouteOptions = {}): Promise<GateResult> {
    let key: RoutingKey | undefined;
    try {
      const u = understand(req, this.config);
      key = u.key;
      // Client mistakes are logged at info: they are worth seeing, not worth paging anyone.
      if (u.bodyProblem && u.bodyProblem !== 'empty') {
        this.logger.info({ path: req.path, problem: u.bodyProblem }, 'request body unusable; routing without a body key');
      }
    } catch (err) {
      const error = KvgateError.from(err, 'bad_request');
      this.logger.info({ path: req.path, code: error.code, err: error.message }, 'request rejected');
      return { kind: 'reject', error, key: undefined };
    }
    const storeKey = storeKeyOf(key);
    const eligible = opts.eligible;
    if (eligible && !this.workerIds.some((id) => eligible.has(id))) {
      return { kind: 'reject', error: new KvgateError('no_healthy_workers', 'no configured worker is in the request\'s endpoint subset'), key, views: [] };
    }
    let snap = this.store.cachedSnapshot(this.pool, storeKey, this.workerIds);
    let fresh = this.store.backend === 'memory';
    let views: WorkerView[] = [];
    for (let attempt = 1; attempt <= MAX_COMMITS; attempt++) {
      views = eligible ? this.views(snap).filter((w) => eligible.has(w.id)) : this.views(snap);
      const decision = decide({ keyHash: key?.hash, affinity: snap.affinity, workers: views });
      if (decision.kind === 'shed') {
        // Never shed on a stale view: re-read once, then trust it.
        if (!fresh) {
          snap = await this.store.snapshot(this.pool, storeKey, this.workerIds);
          fresh = true;
          attempt--;
          continue;
        }
        return this.shed(decision, key, views);
      }
      const res = await this.store.commit({
        pool: this.pool,
        key: storeKey,
        workers: this.workerIds,
        worker: decision.worker,
        preconditions: decision.preconditions,
        affinityTtlMs: this.config.affinity.ttl_s * 1000,
      });
      if (res.ok) {
        const result: GateResult = {
          kind: 'route',
          worker: decision.worker,
          cluster: decision.cluster,
          outcome: decision.outcome,
          ...(decision.from !== undefined ? { from: decision.from } : {}),
          lease: res.lease,
          key,
          degraded: res.degraded,
          attempts: attempt,
          views,
        };
        this.logger.debug(
          {
            key_kind: key?.kind,
            key_source: key?.source,
            key_hash: key?.hash,
            outcome: decision.outcome,
            worker: decision.worker,
            from: decision.from,
            attempts: attempt,
            degraded: res.degraded,
          },
          'routed',
        );
        return result;
      }
      snap = res.snapshot;
      fresh = true;
    }
    return this.shed({ kind: 'shed', reason: 'overloaded', preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] } }, key, views);
  }

  /**
   * Moves a key's affinity from `from` to `to`, unless it no longer points at `from` (another
   * request moved it meanwhile). Used when the proxy reports that another worker served a request:
   * that worker now holds its KV cache. Never throws; true when the affinity moved.
   */
  async reassign(key: RoutingKey, from: string, to: string): Promise<boolean> {
    if (!this.workersById.has(to) || from === to) return false;
    try {
      // A commit whose only precondition is the affinity it replaces; its lease is returned at once.
      const res = await this.store.commit({
        pool: this.pool,
        key: storeKeyOf(key),
        workers: this.workerIds,
        worker: to,
        preconditions: { affinity: from, below: [], atOrAbove: [], states: [] },
        affinityTtlMs: this.config.affinity.ttl_s * 1000,
      });
      if (!res.ok) return false;
      await this.release(res.lease);
      return true;
    } catch (err) {
      this.logger.warn({ err: (err as Error).message, key_hash: key.hash }, 'affinity reassignment failed');
      return false;
    }
  }

  /** Ends a routed request's in-flight count. Safe to call once per lease; never throws. */
  release(lease: Lease): Promise<void> {
    return this.store.release(lease).catch((err: unknown) => {
      this.logger.warn({ err: (err as Error).message, worker: lease.worker }, 'lease release failed');
    });
  }

  /** Workers as the policy sees them: config limits joined with the store's counts and states. */
  views(snap: Snapshot): WorkerView[] {
    return this.workerIds.map((id) => {
      const w = this.workersById.get(id)!;
      return {
        id,
        cluster: w.cluster,
        state: snap.states.get(id) ?? 'healthy',
        inflight: snap.inflight.get(id) ?? 0,
        maxInflight: w.max_inflight ?? this.config.limits.max_inflight,
      };
    });
  }

  private shed(decision: Extract<Decision, { kind: 'shed' }>, key: RoutingKey | undefined, views: readonly WorkerView[]): GateResult {
    const error =
      decision.reason === 'overloaded'
        ? new KvgateError('overloaded', 'every eligible worker is at its in-flight limit')
        : new KvgateError('no_healthy_workers', 'no worker is healthy');
    this.logger.debug({ key_kind: key?.kind, key_hash: key?.hash, outcome: 'shed', reason: decision.reason }, 'shed');
    return { kind: 'reject', error, key, views };
  }
}

/** The store key of a routing key: kind-prefixed hash, so session and prefix keys never collide. */
function storeKeyOf(key: RoutingKey | undefined): string | undefined {
  return key === undefined ? undefined : `${key.kind === 'session' ? 's' : 'p'}:${key.hash}`;
}
