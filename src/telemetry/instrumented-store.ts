/**
 * A RoutingStore that times every call of the store it wraps, counts its failures, and adds both
 * to the usage of the request the call is made for (the `scope` the caller passes), so a request's
 * span says how long it waited on the store and whether the store failed it. It changes no result.
 * The scope is passed on to the wrapped store (whose log lines about the call carry the request's
 * trace ids). A release has no scope: it comes after the request's span has ended.
 *
 * "Failed" means the call threw, or a commit came back `degraded` (the Redis store could not reach
 * Redis and routed on local state: it swallows the error itself, so this is how we see it).
 */
import type { CommitRequest, CommitResult, Lease, OffloadEvent, RoutingStore, Snapshot, StateQuery } from '../state/store.js';
import type { SignalRecord } from '../routing/health.js';
import type { WorkerState } from '../routing/types.js';
import type { WorkerSignals } from '../routing/health.js';
import type { RequestScope } from '../util/request-scope.js';
import { Metrics, type StoreOperation } from './metrics.js';

export class InstrumentedStore implements RoutingStore {
  constructor(
    private readonly inner: RoutingStore,
    private readonly metrics: Metrics,
  ) {}

  get backend(): RoutingStore['backend'] {
    return this.inner.backend;
  }

  /** The wrapped store (for code that needs backend-specific calls). */
  get wrapped(): RoutingStore {
    return this.inner;
  }

  cachedSnapshot(q: StateQuery): Snapshot {
    return this.inner.cachedSnapshot(q);
  }

  snapshot(q: StateQuery, scope?: RequestScope): Promise<Snapshot> {
    return this.time('snapshot', scope, () => this.inner.snapshot(q, scope));
  }

  commit(req: CommitRequest, scope?: RequestScope): Promise<CommitResult> {
    return this.time('commit', scope, () => this.inner.commit(req, scope), degradedCommit);
  }

  /** Timed, but in no request's usage: the request's decision, and its span, are over by then. */
  release(lease: Lease): Promise<void> {
    return this.time('release', undefined, () => this.inner.release(lease));
  }

  setWorkerState(pool: string, worker: string, state: WorkerState | undefined): Promise<void> {
    return this.time('set_state', undefined, () => this.inner.setWorkerState(pool, worker, state));
  }

  recordResponse(pool: string, responseHash: string, worker: string, ttlMs: number, scope?: RequestScope): Promise<void> {
    return this.time('record_response', scope, () => this.inner.recordResponse(pool, responseHash, worker, ttlMs, scope));
  }

  responseWorker(pool: string, responseHash: string, scope?: RequestScope): Promise<string | undefined> {
    return this.time('response_worker', scope, () => this.inner.responseWorker(pool, responseHash, scope));
  }

  // Background work (the collector and the migrator), not on a request's path: passed through
  // untimed, so store metrics describe what requests wait for.
  publishSignals(pool: string, worker: string, update: { signals: WorkerSignals } | { error: string }): Promise<void> {
    return this.inner.publishSignals(pool, worker, update);
  }

  readSignals(pool: string): Promise<Map<string, SignalRecord>> {
    return this.inner.readSignals(pool);
  }

  heartbeat(pool: string, gateId: string, ttlMs: number): Promise<string[]> {
    return this.inner.heartbeat(pool, gateId, ttlMs);
  }

  coldSessions(pool: string, worker: string, limit: number): Promise<{ keys: string[]; total: number }> {
    return this.inner.coldSessions(pool, worker, limit);
  }

  migrate(pool: string, from: string, moves: ReadonlyArray<{ key: string; to: string }>, reason: string, opts: { affinityTtlMs: number; streamMaxLen: number }): Promise<OffloadEvent[]> {
    return this.inner.migrate(pool, from, moves, reason, opts);
  }

  tryLock(pool: string, name: string, ttlMs: number): Promise<boolean> {
    return this.inner.tryLock(pool, name, ttlMs);
  }

  onOffload(listener: (e: OffloadEvent) => void): () => void {
    return this.inner.onOffload(listener);
  }

  ping(): Promise<void> {
    return this.time('ping', undefined, () => this.inner.ping());
  }

  retainPools(pools: readonly string[]): void {
    this.inner.retainPools(pools);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  /**
   * The call, timed. Not async, and timed with `performance.now()`: an async wrapper and two
   * BigInt clock reads were a promise and three objects more per store call, two calls a request.
   */
  private time<T>(operation: StoreOperation, scope: RequestScope | undefined, call: () => Promise<T>, failureOf?: (result: T) => string | undefined): Promise<T> {
    const start = performance.now();
    let pending: Promise<T>;
    try {
      pending = call();
    } catch (err) {
      this.account(operation, scope, start, err instanceof Error ? err.message : String(err));
      return Promise.reject(err as Error);
    }
    return pending.then(
      (result) => {
        this.account(operation, scope, start, failureOf?.(result));
        return result;
      },
      (err: unknown) => {
        this.account(operation, scope, start, err instanceof Error ? err.message : String(err));
        throw err;
      },
    );
  }

  /** One call's time and failure, into the metrics and the request's usage. Never throws. */
  private account(operation: StoreOperation, scope: RequestScope | undefined, start: number, failure: string | undefined): void {
    // Inline rather than through Metrics.safely: this runs on every store call of every request.
    try {
      const seconds = (performance.now() - start) / 1000;
      this.metrics.storeSeconds.observe(LABELS[operation], seconds);
      if (failure !== undefined) this.metrics.storeErrors.inc(LABELS[operation]);
      const usage = scope?.storeUsage;
      if (usage) {
        usage.seconds += seconds;
        usage.calls++;
        if (failure !== undefined) usage.errors.push({ operation, message: failure });
      }
    } catch {
      // Metrics are best effort by design.
    }
  }
}

function degradedCommit(r: CommitResult): string | undefined {
  return r.ok && r.degraded ? 'shared store unreachable; committed on local state' : undefined;
}

/** One label set per operation, made once (prom-client reads labels, never keeps or changes them). */
const LABELS: Readonly<Record<StoreOperation, { operation: StoreOperation }>> = {
  commit: { operation: 'commit' },
  snapshot: { operation: 'snapshot' },
  release: { operation: 'release' },
  set_state: { operation: 'set_state' },
  ping: { operation: 'ping' },
  record_response: { operation: 'record_response' },
  response_worker: { operation: 'response_worker' },
};
