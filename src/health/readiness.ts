/**
 * Readiness: whether this gate should get traffic. Ready means the config is loaded (a gate
 * exists only once it is) and the store answers, or the store does not answer and the operator
 * chose to route on local state anyway (`store.ready_when_unreachable: true`, "deliberately
 * degraded"). A stopping gate is never ready again.
 *
 * One state feeds both views of it: grpc.health.v1 (Envoy's health checks, Kubernetes' grpc
 * probes) and the admin API's `/readyz`. The store is pinged every `intervalMs` and on each
 * `/readyz`, so both stay fresh without a probe having to wait on Redis.
 */
import type { Logger } from 'pino';
import type { RoutingStore } from '../state/store.js';

export type ReadinessStatus = 'starting' | 'ready' | 'degraded' | 'not_ready' | 'draining';

export interface ReadinessReport {
  ready: boolean;
  /**
   * starting: not checked yet; ready: store answers; degraded: store unreachable, ready by choice;
   * not_ready: store unreachable; draining: shutting down.
   */
  status: ReadinessStatus;
  store: 'reachable' | 'unreachable' | 'unknown';
  ready_when_unreachable: boolean;
  /** Why it is not plainly ready, and what changes it (absent when ready). */
  reason?: string;
  /** The store's last error, when unreachable. */
  store_error?: string;
}

/** The words for an unreachable store: what kvgate does meanwhile, and the setting that decides readiness. */
export function unreachableReason(readyWhenUnreachable: boolean): string {
  return readyWhenUnreachable
    ? 'the store does not answer; routing on local state and staying ready because store.ready_when_unreachable is true'
    : 'the store does not answer; routing on local state but not ready, so Envoy and Kubernetes prefer replicas that see the shared placements (set store.ready_when_unreachable: true to stay ready meanwhile)';
}

export interface ReadinessOptions {
  store: RoutingStore;
  readyWhenUnreachable: boolean;
  intervalMs: number;
  logger: Logger;
  /** Called with every change of the ready bit (drives grpc.health.v1). */
  onChange(ready: boolean): void;
}

export class Readiness {
  private current: ReadinessReport;
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<ReadinessReport> | undefined;

  constructor(private readonly opts: ReadinessOptions) {
    this.current = { ready: false, status: 'starting', store: 'unknown', ready_when_unreachable: opts.readyWhenUnreachable, reason: 'the first store check has not finished' };
  }

  get report(): ReadinessReport {
    return this.current;
  }

  /** First check now, then every `intervalMs`. */
  async start(): Promise<ReadinessReport> {
    const first = await this.check();
    this.timer = setInterval(() => void this.check(), this.opts.intervalMs).unref();
    return first;
  }

  /** Pings the store and updates the state; concurrent callers share one ping. Never rejects. */
  check(): Promise<ReadinessReport> {
    this.checking ??= this.ping().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }

  /** Shutting down: not ready from now on, whatever the store says. */
  drain(): void {
    this.stop();
    this.set({ ...this.current, ready: false, status: 'draining', reason: 'shutting down: taking streams only until proxies have moved away, then letting open ones finish' });
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private async ping(): Promise<ReadinessReport> {
    let reachable: boolean;
    let error: string | undefined;
    try {
      await this.opts.store.ping();
      reachable = true;
    } catch (err) {
      reachable = false;
      error = err instanceof Error ? err.message : String(err);
    }
    if (this.current.status === 'draining') return this.current;
    const allowed = this.opts.readyWhenUnreachable;
    const next: ReadinessReport = reachable
      ? { ready: true, status: 'ready', store: 'reachable', ready_when_unreachable: allowed }
      : {
          ready: allowed,
          status: allowed ? 'degraded' : 'not_ready',
          store: 'unreachable',
          ready_when_unreachable: allowed,
          reason: unreachableReason(allowed),
          ...(error !== undefined ? { store_error: error } : {}),
        };
    // One line per change (not per ping): the store's own failures are rate-limited where they happen.
    if (next.store !== this.current.store && this.current.store !== 'unknown') {
      if (reachable) this.opts.logger.info({ status: next.status }, 'store reachable again');
      else this.opts.logger.warn({ status: next.status, err: error }, `store unreachable: ${unreachableReason(allowed)}`);
    }
    this.set(next);
    return next;
  }

  private set(next: ReadinessReport): void {
    const changed = next.ready !== this.current.ready;
    this.current = next;
    if (changed) this.opts.onChange(next.ready);
  }
}
