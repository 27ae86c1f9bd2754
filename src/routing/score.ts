/**
 * The score of one candidate worker for one request (higher is better):
 *
 *   score = prefix_weight · matched_blocks / total_blocks
 *         − load_weight   · max(inflight, engine_queue) / max_inflight
 *         − kv_weight     · kv_usage
 *
 * The load is the gate's own in-flight count (instant) or the queue the engine last reported
 * (delayed, but it sees traffic that bypassed this fleet of gates), whichever is worse.
 *
 * Each term is in [0, 1], so a weight reads as "how much of the whole range this signal may
 * swing the choice". With the defaults (1, 1, 0.5; src/config/defaults.ts): a worker holding the
 * whole prompt stays preferred over an idle one until it is nearly full; a worker holding half of
 * it wins against one that is more than half a limit less loaded; KV pressure breaks near-ties
 * and steers new work away from workers whose cache is close to evicting. This is the additive
 * shape of llm-d's weighted scorers and Dynamo's cost (prefill saved vs queueing), in shares
 * rather than tokens so the weights do not depend on prompt length.
 */
import type { ScoreWeights, WorkerView } from './types.js';

export function score(w: WorkerView, totalBlocks: number, weights: ScoreWeights): number {
  const prefix = totalBlocks > 0 ? Math.min(1, w.prefixBlocks / totalBlocks) : 0;
  const busy = Math.max(w.inflight, w.waiting !== undefined && Number.isFinite(w.waiting) ? w.waiting : 0);
  const load = w.maxInflight > 0 ? Math.min(1, busy / w.maxInflight) : 1;
  const kv = w.kvUsage === undefined || !Number.isFinite(w.kvUsage) ? 0 : Math.min(1, Math.max(0, w.kvUsage));
  return weights.prefix * prefix - weights.load * load - weights.kv * kv;
}
