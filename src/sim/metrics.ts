/**
 * Per-policy metrics, the same definitions for every policy:
 *  - hit_rate: prompt tokens served from cache (GPU or CPU tier) / prompt tokens, over served requests;
 *  - TTFT: first token − arrival (queueing + prefill); e2e: last token − arrival; nearest-rank percentiles;
 *  - throughput: prompt + output tokens of served requests / (last finish − first arrival);
 *  - imbalance: max / mean over workers of work done (prompt tokens computed + tokens generated);
 *  - migrations: requests that continue an earlier request (workload.ts `continuationParents`)
 *    but ran on a different worker than it;
 *  - session_moves: sessions the router moved between workers by itself, between requests
 *    (kvgate's preemptive migration), over the whole run;
 *  - shed: requests the policy refused.
 */
import type { BoundResult } from './pooled-bound.js';
import type { PolicyRun } from './simulator.js';
import type { Workload } from './workload.js';

export interface ResultRow {
  policy: string;
  requests: number;
  served: number;
  shed: number;
  hit_rate: number;
  offload_hit_rate: number;
  /** hit_rate / the pooled-cache bound's. */
  bound_fraction: number | null;
  ttft_p50_s: number | null;
  ttft_p90_s: number | null;
  ttft_p99_s: number | null;
  ttft_mean_s: number | null;
  e2e_p50_s: number | null;
  e2e_p90_s: number | null;
  e2e_p99_s: number | null;
  throughput_tok_s: number | null;
  output_tok_s: number | null;
  imbalance: number | null;
  migrations: number;
  /** Requests that continue an earlier one (the denominator migrations are out of). */
  continuations: number;
  /** Sessions the router moved off a worker between their requests (preemptive migration). */
  session_moves: number;
  makespan_s: number | null;
  sim_wall_s: number | null;
}

/** Nearest-rank percentile of an ascending array; null when empty. */
export function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

function mean(xs: readonly number[]): number | null {
  return xs.length === 0 ? null : xs.reduce((a, b) => a + b, 0) / xs.length;
}

export function summarize(run: PolicyRun, workload: Workload, parents: Int32Array, bound: BoundResult | undefined): ResultRow {
  const ttft: number[] = [];
  const e2e: number[] = [];
  let prompt = 0;
  let cached = 0;
  let offload = 0;
  let output = 0;
  let served = 0;
  let shed = 0;
  let migrations = 0;
  let continuations = 0;
  let firstArrival = Infinity;
  let lastFinish = -Infinity;
  for (const req of workload.requests) {
    const o = run.outcomes[req.index]!;
    if (o.worker < 0) {
      shed++;
      continue;
    }
    served++;
    ttft.push(o.firstTokenS - o.arrivalS);
    e2e.push(o.finishS - o.arrivalS);
    prompt += req.promptTokens;
    output += req.outputTokens;
    cached += o.cachedTokens;
    offload += o.offloadTokens;
    firstArrival = Math.min(firstArrival, o.arrivalS);
    lastFinish = Math.max(lastFinish, o.finishS);
    const p = parents[req.index]!;
    if (p >= 0 && run.outcomes[p]!.worker >= 0) {
      continuations++;
      if (run.outcomes[p]!.worker !== o.worker) migrations++;
    }
  }
  ttft.sort((a, b) => a - b);
  e2e.sort((a, b) => a - b);
  const makespan = served > 0 ? lastFinish - firstArrival : null;
  const hitRate = prompt > 0 ? cached / prompt : 0;
  const workMean = mean(run.workerWork);
  return {
    policy: run.policy,
    requests: workload.requests.length,
    served,
    shed,
    hit_rate: hitRate,
    offload_hit_rate: prompt > 0 ? offload / prompt : 0,
    bound_fraction: bound && bound.hitRate > 0 ? hitRate / bound.hitRate : null,
    ttft_p50_s: percentile(ttft, 0.5),
    ttft_p90_s: percentile(ttft, 0.9),
    ttft_p99_s: percentile(ttft, 0.99),
    ttft_mean_s: mean(ttft),
    e2e_p50_s: percentile(e2e, 0.5),
    e2e_p90_s: percentile(e2e, 0.9),
    e2e_p99_s: percentile(e2e, 0.99),
    throughput_tok_s: makespan ? (prompt + output) / makespan : null,
    output_tok_s: makespan ? output / makespan : null,
    imbalance: workMean ? Math.max(...run.workerWork) / workMean : null,
    migrations,
    continuations,
    session_moves: run.sessionMoves.length,
    makespan_s: makespan,
    sim_wall_s: run.wallS,
  };
}

/** The bound as a row of the same table: only the hit rate means anything. */
export function boundRow(bound: BoundResult, workload: Workload): ResultRow {
  return {
    policy: 'pooled-bound',
    requests: workload.requests.length,
    served: workload.requests.length,
    shed: 0,
    hit_rate: bound.hitRate,
    offload_hit_rate: bound.offloadHitRate,
    bound_fraction: 1,
    ttft_p50_s: null,
    ttft_p90_s: null,
    ttft_p99_s: null,
    ttft_mean_s: null,
    e2e_p50_s: null,
    e2e_p90_s: null,
    e2e_p99_s: null,
    throughput_tok_s: null,
    output_tok_s: null,
    imbalance: null,
    migrations: 0,
    continuations: 0,
    session_moves: 0,
    makespan_s: null,
    sim_wall_s: null,
  };
}
