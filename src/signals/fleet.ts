/**
 * What the signal loops need from the gate above them. app.ts hands them the gate, which has this
 * shape; signals/ never imports gate/: signals feed the gate (`setSignals`), they do not drive it.
 */
import type { Config } from '../config/schema.js';
import type { HealthVerdict, SignalRecord } from '../routing/health.js';
import type { WorkerView } from '../routing/types.js';
import type { Snapshot } from '../state/store.js';

/** A pool as the loops see it: its name and its workers, in config order. */
export interface FleetPool {
  readonly name: string;
  readonly workerIds: readonly string[];
}

/** `P`: the gate's own pool type, handed back to it as it came (`views`). */
export interface Fleet<P extends FleetPool = FleetPool> {
  /** The running config (a reload swaps it). */
  readonly currentConfig: Config;
  /** The default pool's name. */
  readonly pool: string;
  readonly pools: {
    poolOfWorker(worker: string): P | undefined;
    all(): readonly P[];
  };
  /** Takes the latest scrape of every worker; returns each worker's health as judged from it. */
  setSignals(records: ReadonlyMap<string, SignalRecord>): Map<string, HealthVerdict>;
  /**
   * The store could not be read: judges each worker on this replica's own scrape (`own`) or on its
   * last record aged by the time since it was read, whichever is younger.
   */
  ageSignals(own?: ReadonlyMap<string, SignalRecord>): Map<string, HealthVerdict>;
  /** A pool's workers as the policy sees them, from a snapshot. */
  views(snap: Snapshot, pool: P): WorkerView[];
  /**
   * The gate's monotonic clock (ms; only differences matter). The collector times its own scrapes
   * by it, so that their ages and those of the records the gate ages (`ageSignals`) compare.
   */
  readonly clock: () => number;
}
