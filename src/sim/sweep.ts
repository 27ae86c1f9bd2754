/**
 * `kvgate sim --sweep`: every policy at offered loads from light to past saturation (scale.ts
 * defines capacity and how a workload reaches a load), the rows of run.ts plus the load, and per
 * policy its goodput at an SLO: the highest load up to which p99 TTFT stays within the SLO.
 *
 * Shed requests count against the SLO: the p99 that decides is over every offered request, a
 * shed one counting as infinitely late, so a policy cannot meet the SLO by refusing work.
 *
 * Goodput is searched for, not read off the grid of loads: a grid step of 0.2 makes every ratio
 * of two goodputs one of a few fractions (1.4 / 1.2 = 1.17, 1.6 / 1.2 = 1.33), and a policy that
 * meets the SLO at the grid's top load has no goodput at all, only a lower bound. So after the
 * grid, each policy runs alone at more loads: upwards from the top (× 1.25 a step, up to
 * `goodputMaxLoad`) while it still meets the SLO, then halving the gap between the highest load it
 * met and the first it missed until that gap is at most `goodputResolution`. One that missed the
 * SLO at the lightest load swept keeps goodput 0. Every policy gets the
 * same search, and each run is the one the grid would have made at that load (a policy's run does
 * not depend on the others').
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
/**
 * Goodput is searched until the highest load met and the first missed are this close: a twentieth
 * of capacity tells a 1.3x ratio from a 1.2x one at goodputs past 0.5, for two more runs of a
 * policy where the grid brackets it (0.2 wide), and a few more where it must go past the top.
 */
export const DEFAULT_GOODPUT_RESOLUTION = 0.05;
/**
 * The search upwards stops here: a policy still within the SLO at four times the fleet's capacity
 * is reported as "at least" that (capacity assumes the pooled cache's hit rate, so real fleets
 * rarely go far past 1; the synthetic chat goes past 2).
 */
export const DEFAULT_GOODPUT_MAX_LOAD = 4;
/** Each step of the search upwards multiplies the load by this. */
const GOODPUT_STEP_UP = 1.25;

export interface SweepConfig extends SimConfig {
  loads?: readonly number[];
  sloTtftS?: number;
  /** Requests measured at each load (first arrivals, after a session replay's warm-up). */
  requests: number;
  /** Replicate sessions (traces with few sessions) rather than squeeze their turns. */
  copySessions: boolean;
  /** Search goodput until the bracket is this narrow (a share of capacity); 0: read it off the grid. */
  goodputResolution?: number;
  /** Search goodput upwards no further than this load. */
  goodputMaxLoad?: number;
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
  /** Highest load up to which every load run met the SLO; 0 when the lightest did not. */
  load: number;
  rps: number;
  /** The lowest load run that missed the SLO, above `load`; null when none did (goodput is at least `load`). */
  missedAt: number | null;
  /** The search's runs beyond the grid, in order: load and p99 TTFT over offered requests (null: over 1% shed). */
  probes: Array<{ load: number; ttftP99OfferedS: number | null; meetsSlo: boolean }>;
}

/** A row as `kvgate sim --sweep --json` prints it: its policy's searched goodput on every row. */
export type SweepJsonRow = SweepRow & {
  goodput_load: number;
  goodput_missed_at: number | null;
  goodput_probes: Goodput['probes'];
};

/** The rows `--json` prints, each carrying its policy's goodput. */
export function sweepJsonRows(report: Pick<SweepReport, 'rows' | 'goodput'>): SweepJsonRow[] {
  const good = new Map(report.goodput.map((g) => [g.policy, g]));
  return report.rows.map((r) => {
    const g = good.get(r.policy);
    return { ...r, goodput_load: g?.load ?? 0, goodput_missed_at: g?.missedAt ?? null, goodput_probes: g?.probes ?? [] };
  });
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

/** `search`: a run of the goodput search, beyond the grid's loads × policies. */
export type SweepProgress = (load: number, policy: string, routed: number, total: number, search: boolean) => void;

export async function runSweep(base: Workload, cfg: SweepConfig, progress?: SweepProgress): Promise<SweepReport> {
  const fleet: FleetOptions = { ...DEFAULT_FLEET, ...cfg.fleet };
  const cost: CostModel = { ...DEFAULT_COST_MODEL, ...cfg.cost };
  const loads = cfg.loads ?? DEFAULT_LOADS;
  const slo = cfg.sloTtftS ?? DEFAULT_SLO_TTFT_S;
  const policies = cfg.policies.filter((p) => p !== POOLED_BOUND);
  const capacity = measureCapacity(base, fleet, cost);
  if (!(capacity.capacityRps > 0 && capacity.naturalRps > 0)) throw new Error(`${base.name}: cannot measure capacity (needs two or more requests over a positive span)`);
  // Every policy at one load: the grid's rows, or one policy's run for the goodput search.
  const runAt = async (load: number, which: readonly string[], search: boolean): Promise<SweepRow[]> => {
    const out: SweepRow[] = [];
    const factor = (load * capacity.capacityRps) / capacity.naturalRps;
    const { workload, copies, warmupS } = atRate(base, factor, { copySessions: cfg.copySessions, requests: cfg.requests });
    const report = await runSimulation(workload, { ...cfg, policies: [...which] }, progress ? (p, n, t) => progress(load, p, n, t, search) : undefined);
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
      out.push({
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
    return out;
  };
  const rows: SweepRow[] = [];
  for (const load of loads) rows.push(...(await runAt(load, policies, false)));
  const resolution = cfg.goodputResolution ?? DEFAULT_GOODPUT_RESOLUTION;
  const maxLoad = cfg.goodputMaxLoad ?? DEFAULT_GOODPUT_MAX_LOAD;
  const goodput: Goodput[] = [];
  for (const g of goodputs(rows, policies, capacity.capacityRps)) {
    await searchGoodput(g, resolution, maxLoad, async (load) => (await runAt(load, [g.policy], true))[0]!);
    g.rps = g.load * capacity.capacityRps;
    goodput.push(g);
  }
  return {
    workload: { name: base.name, description: base.description, requests: base.requests.length, blockTokens: base.blockTokens },
    fleet,
    cost,
    capacity,
    sloTtftS: slo,
    loads,
    rows,
    goodput,
  };
}

/**
 * Narrows `g` (read off the grid) by running its policy at more loads (`run`): upwards while it
 * meets the SLO, then bisecting between the highest load met and the lowest missed.
 */
export async function searchGoodput(g: Goodput, resolution: number, maxLoad: number, run: (load: number) => Promise<SweepRow>): Promise<void> {
  if (!(resolution > 0)) return;
  const probe = async (load: number): Promise<boolean> => {
    const row = await run(load);
    g.probes.push({ load, ttftP99OfferedS: row.ttft_p99_offered_s, meetsSlo: row.meets_slo });
    return row.meets_slo;
  };
  // Loads are rounded to a thousandth, so a probe's load reads as it was run.
  const round = (x: number) => Math.round(x * 1000) / 1000;
  while (g.missedAt === null && g.load > 0 && g.load < maxLoad) {
    const next = round(Math.min(maxLoad, g.load * GOODPUT_STEP_UP));
    if (next <= g.load) break;
    if (await probe(next)) g.load = next;
    else g.missedAt = next;
  }
  // A policy that missed the SLO at the lightest load swept keeps goodput 0: runs at loads that
  // light last hours of simulated time (engines are scraped every 50 ms of it) and tell nobody much.
  while (g.missedAt !== null && g.load > 0 && round(g.missedAt - g.load) > resolution) {
    const mid = round((g.load + g.missedAt) / 2);
    if (mid <= g.load || mid >= g.missedAt) break; // a thousandth apart: as close as loads are written
    if (await probe(mid)) g.load = mid;
    else g.missedAt = mid;
  }
}

/** Per policy, read off the grid: the highest load up to which every swept load met the SLO. */
export function goodputs(rows: readonly SweepRow[], policies: readonly string[], capacityRps: number): Goodput[] {
  return policies.map((policy) => {
    let load = 0;
    let missedAt: number | null = null;
    for (const r of rows.filter((x) => x.policy === policy).sort((a, b) => a.load - b.load)) {
      if (!r.meets_slo) {
        missedAt = r.load;
        break;
      }
      load = r.load;
    }
    return { policy, load, rps: load * capacityRps, missedAt, probes: [] };
  });
}
