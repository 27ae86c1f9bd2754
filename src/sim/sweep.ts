/**
 * `kvgate sim --sweep`: every policy at offered loads from light to past saturation (scale.ts
 * defines capacity and how a workload reaches a load), the rows of run.ts plus the load, and per
 * policy its goodput at an SLO: the highest load up to which p99 TTFT stays within the SLO.
 *
 * Shed requests count against the SLO: the p99 that decides is over every offered request, a
 * shed one counting as infinitely late, so a policy cannot meet the SLO by refusing work.
 */
import { DEFAULT_COST_MODEL, DEFAULT_FLEET, type CostModel, type FleetOptions } from './cost-model.js';
import { percentile, summarize, type ResultRow } from './metrics.js';
import { POOLED_BOUND } from './policies/registry.js';
import { runSimulation, type SimConfig } from './run.js';
import { atRate, measureCapacity, type Capacity } from './scale.js';
import { continuationParents, type Workload } from './workload.js';

export const DEFAULT_LOADS: readonly number[] = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2];
/** The SLO users compare with: 2 s to first token at p99. */
export const DEFAULT_SLO_TTFT_S = 2;

export interface SweepConfig extends SimConfig {
  loads?: readonly number[];
  sloTtftS?: number;
  /** Requests measured at each load (first arrivals, after a session replay's warm-up). */
  requests: number;
  /** Replicate sessions (traces with few sessions) rather than squeeze their turns. */
  copySessions: boolean;
}

export interface SweepRow extends ResultRow {
  /** Offered load: arrival rate / capacity (scale.ts). */
  load: number;
  offered_rps: number;
  capacity_rps: number;
  /** Time-shifted copies of a session trace replayed at this load (1: none). */
  copies: number;
  /** Arrivals before this were warm-up, not measured (session replays). */
  warmup_s: number;
  /** p99 TTFT over every offered request, a shed one counting as a miss; null when over 1% were shed. */
  ttft_p99_offered_s: number | null;
  meets_slo: boolean;
}

export interface Goodput {
  policy: string;
  /** Highest load up to which every load met the SLO; 0 when the lightest did not. */
  load: number;
  rps: number;
}

export interface SweepReport {
  workload: { name: string; description: string; requests: number; blockTokens: number };
  fleet: FleetOptions;
  cost: CostModel;
  capacity: Capacity;
  sloTtftS: number;
  loads: readonly number[];
  rows: SweepRow[];
  goodput: Goodput[];
}

export type SweepProgress = (load: number, policy: string, routed: number, total: number) => void;

export async function runSweep(base: Workload, cfg: SweepConfig, progress?: SweepProgress): Promise<SweepReport> {
  const fleet: FleetOptions = { ...DEFAULT_FLEET, ...cfg.fleet };
  const cost: CostModel = { ...DEFAULT_COST_MODEL, ...cfg.cost };
  const loads = cfg.loads ?? DEFAULT_LOADS;
  const slo = cfg.sloTtftS ?? DEFAULT_SLO_TTFT_S;
  const policies = cfg.policies.filter((p) => p !== POOLED_BOUND);
  const capacity = measureCapacity(base, fleet, cost);
  if (!(capacity.capacityRps > 0 && capacity.naturalRps > 0)) throw new Error(`${base.name}: cannot measure capacity (needs two or more requests over a positive span)`);
  const rows: SweepRow[] = [];
  for (const load of loads) {
    const factor = (load * capacity.capacityRps) / capacity.naturalRps;
    const { workload, copies, warmupS } = atRate(base, factor, { copySessions: cfg.copySessions, requests: cfg.requests });
    const report = await runSimulation(workload, { ...cfg, policies }, progress ? (p, n, t) => progress(load, p, n, t) : undefined);
    // After a warm-up only the steady state is measured (imbalance still covers the whole run).
    const measured = warmupS > 0 ? { ...workload, requests: workload.requests.filter((r) => r.arrivalS >= warmupS) } : undefined;
    const parents = measured ? continuationParents(workload) : undefined;
    for (const [i, whole] of report.rows.entries()) {
      const run = report.runs[i]!;
      const row = measured ? summarize(run, measured, parents!, undefined) : whole;
      const ttft = (measured ?? workload).requests
        .map((r) => run.outcomes[r.index]!)
        .map((o) => (o.worker < 0 ? Infinity : o.firstTokenS - o.arrivalS))
        .sort((a, b) => a - b);
      const p99 = percentile(ttft, 0.99);
      const offered = p99 !== null && Number.isFinite(p99) ? p99 : null;
      rows.push({
        ...row,
        load,
        offered_rps: capacity.naturalRps * factor,
        capacity_rps: capacity.capacityRps,
        copies,
        warmup_s: warmupS,
        ttft_p99_offered_s: offered,
        meets_slo: offered !== null && offered <= slo,
      });
    }
  }
  return {
    workload: { name: base.name, description: base.description, requests: base.requests.length, blockTokens: base.blockTokens },
    fleet,
    cost,
    capacity,
    sloTtftS: slo,
    loads,
    rows,
    goodput: goodputs(rows, policies, capacity.capacityRps),
  };
}

/** Per policy: the highest load up to which every swept load met the SLO. */
export function goodputs(rows: readonly SweepRow[], policies: readonly string[], capacityRps: number): Goodput[] {
  return policies.map((policy) => {
    let load = 0;
    for (const r of rows.filter((x) => x.policy === policy).sort((a, b) => a.load - b.load)) {
      if (!r.meets_slo) break;
      load = r.load;
    }
    return { policy, load, rps: load * capacityRps };
  });
}
