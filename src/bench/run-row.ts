/**
 * One measured run of `kvgate bench`: what the runner (./run.ts) produces and the target checks
 * (./targets.ts) and reports read. Its own module so that neither of those imports the other.
 */
import type { TargetName, GateCounts } from './servers.js';
import type { BenchBodyMode } from './load-client.js';
import type { Percentiles } from './load-pool.js';

export interface RunRow {
  target: TargetName;
  /** The request body mode the load played; ratios compare with the no-op in the same mode. */
  body_mode: BenchBodyMode;
  size: string;
  body_bytes: number;
  load: 'saturation' | 'half';
  /** Saturation: streams in flight; half: the most outstanding before arrivals are dropped. */
  concurrency: number;
  /** Half: the arrival rate, half of the median saturation round. */
  rate_per_s: number | null;
  window_s: number;
  /**
   * Requests answered per second (for kvgate: routing decisions; for the no-op: CONTINUEs). At
   * saturation: the median round; `rounds_per_s` lists every round.
   */
  decisions_per_s: number;
  rounds_per_s: number[];
  /** Median over rounds of this server's decisions/s over the no-op's in the same round. */
  ratio_to_noop: number | null;
  /** Lowest and highest per-round ratio: how much the machine's noise moved it. */
  ratio_range: [number, number] | null;
  /** Main-thread busy time per answered request (event-loop utilization × window / answered). */
  server_busy_us: number;
  completed: number;
  routed: number;
  shed: number;
  errors: number;
  error_samples: string[];
  dropped: number;
  added: Percentiles;
  decision: Percentiles;
  schedule_lag: Percentiles | null;
  server_elu: number;
  client_elu: number;
  rss_peak_mb: number;
  heap_mb: number;
  gate: GateCounts | null;
}
