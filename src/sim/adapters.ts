/**
 * LoRA adapters, simulated: the same workload with each conversation's requests naming one of N
 * adapters (a Zipf mix: a few adapters are hot, most are cold), served by engines with `max_loras`
 * adapter slots and a cost to load an adapter that is not resident (lora-slots.ts). kvgate runs
 * through the real gate (Gate.route with a MemoryStore, `KvgatePolicy.create`) with the adapter in
 * the request's `model`, and reads each worker's `vllm:lora_requests_info` at the same scrape
 * cadence and age as its other engine metrics (simulator.ts `SignalCadence`).
 * It runs twice: with adapter affinity (the defaults) and without it (a gate config of
 * `scoring.adapter_weight: 0, adapter_filter: false`). Round robin and least loaded read no
 * engine metrics, as their real systems, so they see no adapters either.
 */
import type { CostModel, FleetOptions } from './cost-model.js';
import type { LoraOptions } from './lora-slots.js';
import { percentile } from './metrics.js';
import { KvgatePolicy, type DecorateRequest } from './policies/kvgate.js';
import { LeastLoadedPolicy } from './policies/least-loaded.js';
import type { PolicyContext, RouterPolicy } from './policies/policy.js';
import { RoundRobinPolicy } from './policies/round-robin.js';
import { hashString32, Rng, Zipf } from './rng.js';
import { simulate } from './simulator.js';
import { markdown, ms, pct, type Column } from './table.js';
import type { Workload } from './workload.js';

export interface AdapterMix {
  /** Distinct adapters. */
  adapters: number;
  /** Zipf exponent of their popularity (1: the hottest gets about twice the second's requests). */
  zipfS: number;
  /** Share of conversations that use the base model (no adapter). */
  baseShare: number;
}

export const DEFAULT_ADAPTER_MIX: AdapterMix = { adapters: 16, zipfS: 1, baseShare: 0 };

export function adapterName(rank: number): string {
  return `lora-${rank}`;
}

/**
 * Each request's adapter (undefined: the base model): by its conversation where it has one (an
 * application sends all its turns with one adapter), else drawn per request; seeded.
 */
export function assignAdapters(workload: Workload, mix: AdapterMix, seed: number): (string | undefined)[] {
  if (!(Number.isInteger(mix.adapters) && mix.adapters >= 1)) throw new Error('an adapter mix needs at least one adapter');
  const draw = (rng: Rng): string | undefined => (rng.next() < mix.baseShare ? undefined : adapterName(new Zipf(mix.adapters, mix.zipfS, rng).sample()));
  const rng = new Rng(seed);
  return workload.requests.map((r) => draw(r.sessionId !== undefined ? new Rng(hashString32(r.sessionId) ^ seed) : rng));
}

/** Each request's adapter in its body's `model` (KvgatePolicy reads the adapter gauge with the rest). */
function withAdapter(adapterOf: readonly (string | undefined)[]): DecorateRequest {
  return (info, req) => {
    const adapter = adapterOf[req.index];
    if (adapter === undefined) return info;
    return { ...info, body: Buffer.from(JSON.stringify({ ...(JSON.parse(info.body!.toString()) as object), model: adapter })) };
  };
}

export interface AdapterRow {
  policy: string;
  requests: number;
  routed: number;
  shed: number;
  /** Seconds from arrival to first token of served requests. */
  ttftP50: number | null;
  ttftP99: number | null;
  /** Adapter loads per routed adapter request. */
  loadsPerRequest: number;
  /** Share of routed adapter requests that found their adapter resident. */
  hitRate: number;
  evictions: number;
  /** Prompt tokens served from the KV cache over all prompt tokens of served requests. */
  kvHitRate: number;
}

export interface AdapterRunOptions {
  fleet: FleetOptions;
  cost: CostModel;
  maxInflight: number;
  seed: number;
  mix?: AdapterMix;
  /** Adapter slots per worker (vLLM `--max-loras`). */
  maxLoras: number;
  /** Seconds to load an adapter that is not resident. */
  loadS: number;
  /** Which policies to run; default all four. */
  policies?: readonly AdapterPolicyName[];
}

export const ADAPTER_POLICIES = ['kvgate', 'kvgate (adapter affinity off)', 'round-robin', 'least-loaded'] as const;
export type AdapterPolicyName = (typeof ADAPTER_POLICIES)[number];

/** The gate config that turns adapter affinity off: no score term and no exclusion. */
export const AFFINITY_OFF = { scoring: { adapter_weight: 0, adapter_filter: false } };

async function makePolicy(name: AdapterPolicyName, ctx: PolicyContext, adapters: readonly string[], adapterOf: readonly (string | undefined)[], maxLoras: number): Promise<RouterPolicy> {
  if (name === 'round-robin') return new RoundRobinPolicy(ctx);
  if (name === 'least-loaded') return new LeastLoadedPolicy(ctx);
  // The adapters are declared, as the README advises, so a request for one nobody runs yet is known as an adapter.
  const gateConfig = { adapters: [...adapters], ...(name === 'kvgate' ? {} : AFFINITY_OFF) };
  // As `kvgate serve` reads every worker once before serving: an idle fleet with empty slots.
  const idle = { running: 0, waiting: 0, kvUsage: 0, lora: { running: [], waiting: [], maxLora: maxLoras } };
  return KvgatePolicy.create({ ...ctx, gateConfig }, { name, decorate: withAdapter(adapterOf), idle });
}

/** Runs the workload with adapters under each policy and reports TTFT, adapter loads and hit rate. */
export async function runAdapterComparison(workload: Workload, opts: AdapterRunOptions): Promise<AdapterRow[]> {
  const mix = opts.mix ?? DEFAULT_ADAPTER_MIX;
  const adapterOf = assignAdapters(workload, mix, opts.seed);
  const adapters = Array.from({ length: mix.adapters }, (_, i) => adapterName(i));
  const lora: LoraOptions = { maxLoras: opts.maxLoras, loadS: opts.loadS, adapterOf: (i) => adapterOf[i] };
  const rows: AdapterRow[] = [];
  for (const name of opts.policies ?? ADAPTER_POLICIES) {
    const ctx: PolicyContext = { workers: opts.fleet.workers, blockTokens: workload.blockTokens, seed: opts.seed, maxInflight: opts.maxInflight, cacheTokens: opts.fleet.cacheTokens };
    const policy = await makePolicy(name, ctx, adapters, adapterOf, opts.maxLoras);
    try {
      const run = await simulate(workload, policy, { fleet: opts.fleet, cost: opts.cost, lora });
      const served = run.outcomes.filter((o) => o.worker >= 0);
      const ttft = served.map((o) => o.firstTokenS - o.arrivalS).sort((a, b) => a - b);
      const routedAdapterRequests = run.outcomes.filter((o, i) => o.worker >= 0 && adapterOf[i] !== undefined).length;
      const sum = (xs: readonly number[]) => xs.reduce((s, x) => s + x, 0);
      const loads = sum(run.lora!.loads);
      const hits = sum(run.lora!.hits);
      rows.push({
        policy: name,
        requests: run.outcomes.length,
        routed: served.length,
        shed: run.outcomes.length - served.length,
        ttftP50: percentile(ttft, 0.5),
        ttftP99: percentile(ttft, 0.99),
        loadsPerRequest: routedAdapterRequests > 0 ? loads / routedAdapterRequests : 0,
        hitRate: hits + loads > 0 ? hits / (hits + loads) : 0,
        evictions: sum(run.lora!.evictions),
        kvHitRate: sum(served.map((o) => o.cachedTokens)) / Math.max(1, sum(served.map((o) => o.cachedTokens + o.computedTokens))),
      });
    } finally {
      await policy.close?.();
    }
  }
  return rows;
}

const ADAPTER_COLUMNS: ReadonlyArray<Column<AdapterRow>> = [
  { head: 'policy', cell: (r) => r.policy },
  { head: 'routed', cell: (r) => String(r.routed), right: true },
  { head: 'shed', cell: (r) => String(r.shed), right: true },
  { head: 'TTFT p50', cell: (r) => ms(r.ttftP50), right: true },
  { head: 'TTFT p99', cell: (r) => ms(r.ttftP99), right: true },
  { head: 'adapter loads / request', cell: (r) => r.loadsPerRequest.toFixed(3), right: true },
  { head: 'adapter hit rate', cell: (r) => pct(r.hitRate), right: true },
  { head: 'evictions', cell: (r) => String(r.evictions), right: true },
  { head: 'KV hit rate', cell: (r) => pct(r.kvHitRate), right: true },
];

/** The comparison table, as `kvgate sim --adapters` prints it. */
export function adapterTable(rows: readonly AdapterRow[]): string {
  return markdown(ADAPTER_COLUMNS, rows);
}
