/**
 * The reference the issue names: the hit rate of ONE LRU cache holding the fleet's total KV
 * capacity, fed every request in arrival order with no pinning and no timing, as if the whole
 * fleet were one worker. No router can place a prefix on more memory than that. It is a bound in
 * that sense, not a mathematical one: LRU is not optimal, so a partitioned cache can occasionally
 * beat it by a little.
 */
import type { FleetOptions } from './cost-model.js';
import { KvCache } from './kv-cache.js';
import type { Workload } from './workload.js';

export interface BoundResult {
  hitRate: number;
  offloadHitRate: number;
}

export function pooledBound(workload: Workload, fleet: Pick<FleetOptions, 'workers' | 'cacheTokens' | 'offloadTokens'>): BoundResult {
  const bt = workload.blockTokens;
  const cache = new KvCache(
    fleet.workers * Math.max(1, Math.floor(fleet.cacheTokens / bt)),
    fleet.workers * Math.floor(fleet.offloadTokens / bt),
  );
  let prompt = 0;
  let cached = 0;
  let offload = 0;
  for (const r of workload.requests) {
    const m = cache.touch(r.blocks);
    // Same accounting as a worker: whole blocks, and the last prompt token is always computed.
    const c = Math.min((m.gpu + m.offload) * bt, r.promptTokens - 1);
    prompt += r.promptTokens;
    cached += c;
    offload += Math.min(m.offload * bt, c);
  }
  return { hitRate: prompt > 0 ? cached / prompt : 0, offloadHitRate: prompt > 0 ? offload / prompt : 0 };
}
