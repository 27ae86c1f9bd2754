/**
 * Preemptive migration: when a worker turns pressured, its least recently active sessions move to
 * healthy workers before anything runs out of memory, and each move is published as an offload
 * event (store.migrate) so a worker-side agent can move that session's KV cache to CPU RAM or NVMe.
 * A round moves the coldest `migration.fraction` of the worker's sessions (at most
 * `migration.max_sessions`), at once on the transition and then every `migration.interval_ms` while
 * the worker stays pressured. Run only by the replica that scrapes the worker, so sessions move once.
 *
 * Paced by `now` (the wall clock in production): the simulator hands it the simulated clock, so a
 * simulated fleet migrates at the points and pace a real gate would.
 */
import type { Logger } from 'pino';
import { planMigration } from '../routing/migration.js';
import type { RoutingStore } from '../state/store.js';
import type { Fleet, FleetPool } from './fleet.js';

export class Migrator<P extends FleetPool> {
  private readonly lastRound = new Map<string, number>();
  private readonly running = new Set<string>();
  private stopped = false;

  constructor(
    private readonly gate: Fleet<P>,
    private readonly store: RoutingStore,
    private readonly logger: Logger,
    /** Milliseconds; only the differences matter. */
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Called on every signals read while `worker` is pressured. Returns the round it started (it
   * never rejects), or undefined when none was due; the collector does not wait for it, the
   * simulator does, so simulated time stands still while a round runs.
   */
  pressured(worker: string, reason: string, justTurned: boolean): Promise<void> | undefined {
    const interval = this.gate.currentConfig.migration.interval_ms;
    const now = this.now();
    const last = this.lastRound.get(worker);
    if (this.stopped || this.running.has(worker) || (!justTurned && last !== undefined && now - last < interval)) return undefined;
    this.lastRound.set(worker, now);
    this.running.add(worker);
    return this.round(worker, reason)
      .catch((err: unknown) => this.logger.warn({ worker, err: (err as Error).message }, 'preemptive migration failed'))
      .finally(() => this.running.delete(worker));
  }

  stop(): void {
    this.stopped = true;
  }

  private async round(worker: string, reason: string): Promise<void> {
    const cfg = this.gate.currentConfig;
    // A session never crosses pools: its moves stay in the pressured worker's pool.
    const p = this.gate.pools.poolOfWorker(worker);
    if (!p) return;
    const pool = p.name;
    // Ownership of a worker can overlap for a heartbeat while replicas come and go: one round per
    // interval per worker, whoever gets there first.
    if (!(await this.store.tryLock(pool, `migrate:${worker}`, Math.max(500, cfg.migration.interval_ms - 100)))) return;
    const listed = await this.store.coldSessions(pool, worker, cfg.migration.max_sessions);
    const count = Math.min(listed.keys.length, cfg.migration.max_sessions, Math.ceil(listed.total * cfg.migration.fraction));
    if (count === 0) return;
    const snap = await this.store.snapshot({ pool, key: undefined, workers: p.workerIds, blocks: [] });
    const moves = planMigration(listed.keys.slice(0, count), worker, this.gate.views(snap, p));
    if (moves.length === 0) {
      this.logger.warn({ worker, sessions: count }, 'worker is pressured but no healthy worker can take its sessions');
      return;
    }
    const events = await this.store.migrate(pool, worker, moves, reason, {
      affinityTtlMs: cfg.affinity.ttl_s * 1000,
      streamMaxLen: cfg.migration.stream_maxlen,
    });
    this.logger.info({ worker, reason, moved: events.length, of: listed.total }, 'moved cold sessions off a pressured worker');
  }
}
