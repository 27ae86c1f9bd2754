/**
 * A whole comparison: every chosen policy over the same workload and fleet, plus the pooled-cache
 * bound, in the order given. This is what `kvgate sim`, its report and the tests call.
 */
import { DEFAULT_COST_MODEL, DEFAULT_FLEET, type CostModel, type FleetOptions } from './cost-model.js';
import { boundRow, summarize, type ResultRow } from './metrics.js';
import { KvgatePolicy } from './policies/kvgate.js';
import type { RouterPolicy } from './policies/policy.js';
import { checkPolicyNames, POLICY_FACTORIES, POOLED_BOUND } from './policies/registry.js';
import { pooledBound } from './pooled-bound.js';
import { simulate, type PolicyRun } from './simulator.js';
import { continuationParents, type Workload } from './workload.js';
import { DEFAULTS } from '../config/defaults.js';

export interface SimConfig {
  policies: readonly string[];
  fleet?: Partial<FleetOptions>;
  cost?: Partial<CostModel>;
  seed?: number;
  /** kvgate's `limits.max_inflight` for the simulated gate. */
  maxInflight?: number;
  sampleIntervalS?: number;
  /** kvgate config for the simulated gate (`--gate-config`). */
  gateConfig?: Record<string, unknown>;
}

export interface SimReport {
  workload: { name: string; description: string; requests: number; blockTokens: number; promptTokens: number; spanS: number };
  fleet: FleetOptions;
  cost: CostModel;
  seed: number;
  maxInflight: number;
  rows: ResultRow[];
  runs: PolicyRun[];
  /** How kvgate's gate decided (affinity_hit, new, migrated, unkeyed, shed), when kvgate ran. */
  kvgateOutcomes?: Record<string, number>;
}

export type Progress = (policy: string, routed: number, total: number) => void;

export async function runSimulation(workload: Workload, cfg: SimConfig, progress?: Progress): Promise<SimReport> {
  checkPolicyNames(cfg.policies);
  const fleet: FleetOptions = { ...DEFAULT_FLEET, ...cfg.fleet };
  const cost: CostModel = { ...DEFAULT_COST_MODEL, ...cfg.cost };
  const seed = cfg.seed ?? 1;
  const maxInflight = cfg.maxInflight ?? DEFAULTS.maxInflight;
  const parents = continuationParents(workload);
  const bound = pooledBound(workload, fleet);
  const rows: ResultRow[] = [];
  const runs: PolicyRun[] = [];
  let kvgateOutcomes: Record<string, number> | undefined;
  for (const name of cfg.policies) {
    if (name === POOLED_BOUND) {
      rows.push(boundRow(bound, workload));
      continue;
    }
    const policy: RouterPolicy = await POLICY_FACTORIES[name]!.create({
      workers: fleet.workers,
      blockTokens: workload.blockTokens,
      seed,
      maxInflight,
      cacheTokens: fleet.cacheTokens,
      ...(cfg.gateConfig ? { gateConfig: cfg.gateConfig } : {}),
    });
    try {
      const run = await simulate(workload, policy, {
        fleet,
        cost,
        ...(cfg.sampleIntervalS !== undefined ? { sampleIntervalS: cfg.sampleIntervalS } : {}),
        ...(progress ? { onProgress: (n: number) => progress(name, n, workload.requests.length) } : {}),
      });
      runs.push(run);
      rows.push(summarize(run, workload, parents, bound));
      if (policy instanceof KvgatePolicy) kvgateOutcomes = Object.fromEntries(policy.outcomes);
    } finally {
      await policy.close?.();
    }
  }
  const reqs = workload.requests;
  return {
    workload: {
      name: workload.name,
      description: workload.description,
      requests: reqs.length,
      blockTokens: workload.blockTokens,
      promptTokens: reqs.reduce((n, r) => n + r.promptTokens, 0),
      spanS: reqs.length > 0 ? reqs[reqs.length - 1]!.arrivalS : 0,
    },
    fleet,
    cost,
    seed,
    maxInflight,
    rows,
    runs,
    ...(kvgateOutcomes ? { kvgateOutcomes } : {}),
  };
}
