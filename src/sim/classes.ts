/**
 * Classes of service under overload, simulated: the same workload, each request given a class by a
 * seeded mix (a conversation keeps one class, as an application sends all its turns with one), run
 * through the real gate with its classes config, and reported per class: how many were shed and
 * how long the served ones waited for their first token. The policy is kvgate's own (Gate.route
 * with a MemoryStore, `KvgatePolicy.create`) plus the class header; nothing of the decision is
 * copied.
 */
import type { CostModel, FleetOptions } from './cost-model.js';
import { percentile } from './metrics.js';
import { KvgatePolicy, type DecorateRequest } from './policies/kvgate.js';
import type { PolicyContext } from './policies/policy.js';
import { hashString32, Rng } from './rng.js';
import { simulate } from './simulator.js';
import { markdown, ms, pct, type Column } from './table.js';
import type { Workload } from './workload.js';

/** Class name → weight in the mix. */
export type ClassMix = Readonly<Record<string, number>>;

/** A fifth critical, half standard, the rest sheddable: an interactive product with batch work beside it. */
export const DEFAULT_CLASS_MIX: ClassMix = { critical: 0.2, standard: 0.5, sheddable: 0.3 };

/**
 * The classes the simulated gate runs with: the defaults but standard at 0.875, so that critical
 * has headroom over standard too and the run shows all three bands apart.
 */
export const SIM_CLASSES = {
  levels: [
    { name: 'critical', share: 1 },
    { name: 'standard', share: 0.875 },
    { name: 'sheddable', share: 0.5 },
  ],
};

/** Each request's class: by its conversation where it has one (all turns alike), else by its index. */
export function assignClasses(workload: Workload, mix: ClassMix, seed: number): string[] {
  const names = Object.keys(mix);
  const total = names.reduce((s, n) => s + Math.max(0, mix[n]!), 0);
  if (names.length === 0 || !(total > 0)) throw new Error('a class mix needs at least one positive weight');
  const pick = (u: number): string => {
    let acc = 0;
    for (const n of names) {
      acc += Math.max(0, mix[n]!) / total;
      if (u < acc) return n;
    }
    return names[names.length - 1]!;
  };
  const rng = new Rng(seed);
  return workload.requests.map((r) => (r.sessionId !== undefined ? pick(new Rng(hashString32(r.sessionId) ^ seed).next()) : pick(rng.next())));
}

/** Each request's class in the class header. */
function withClass(classOf: readonly string[]): DecorateRequest {
  return (info, req, config) => {
    const headers = new Map(info.headers);
    headers.set(config.classes.header, classOf[req.index]!);
    return { ...info, headers };
  };
}

export interface ClassRow {
  class: string;
  requests: number;
  shed: number;
  /** shed / requests. */
  shedRate: number;
  /** Seconds from arrival to first token of served requests. */
  ttftP50: number | null;
  ttftP95: number | null;
}

export interface ClassMixOptions {
  fleet: FleetOptions;
  cost: CostModel;
  maxInflight: number;
  mix?: ClassMix;
  seed: number;
  /** The gate's `classes` config; default SIM_CLASSES. */
  classes?: Record<string, unknown>;
}

/** Runs the workload through the gate with classes and reports each class (highest first, as configured). */
export async function runClassMix(workload: Workload, opts: ClassMixOptions): Promise<ClassRow[]> {
  const classOf = assignClasses(workload, opts.mix ?? DEFAULT_CLASS_MIX, opts.seed);
  const ctx: PolicyContext = {
    workers: opts.fleet.workers,
    blockTokens: workload.blockTokens,
    seed: opts.seed,
    maxInflight: opts.maxInflight,
    cacheTokens: opts.fleet.cacheTokens,
    gateConfig: { classes: opts.classes ?? SIM_CLASSES },
  };
  const policy = await KvgatePolicy.create(ctx, { name: 'kvgate (classes)', decorate: withClass(classOf) });
  const config = policy.gate.currentConfig;
  try {
    const run = await simulate(workload, policy, { fleet: opts.fleet, cost: opts.cost });
    return config.classes.levels
      .map(({ name }) => {
        const mine = run.outcomes.filter((_, i) => classOf[i] === name);
        const served = mine.filter((o) => o.worker >= 0).map((o) => o.firstTokenS - o.arrivalS).sort((a, b) => a - b);
        const shed = mine.length - served.length;
        return { class: name, requests: mine.length, shed, shedRate: mine.length > 0 ? shed / mine.length : 0, ttftP50: percentile(served, 0.5), ttftP95: percentile(served, 0.95) };
      })
      .filter((r) => r.requests > 0);
  } finally {
    await policy.close();
  }
}

const CLASS_COLUMNS: ReadonlyArray<Column<ClassRow>> = [
  { head: 'class', cell: (r) => r.class },
  { head: 'requests', cell: (r) => String(r.requests) },
  { head: 'shed', cell: (r) => String(r.shed) },
  { head: 'shed rate', cell: (r) => pct(r.shedRate) },
  { head: 'TTFT p50', cell: (r) => ms(r.ttftP50) },
  { head: 'TTFT p95', cell: (r) => ms(r.ttftP95) },
];

/** The per-class table, as `kvgate sim --classes` prints it. */
export function classTable(rows: readonly ClassRow[]): string {
  return markdown(CLASS_COLUMNS, rows);
}
