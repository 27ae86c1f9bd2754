/** KV-cache use as last reported: steers new work away from workers whose cache is close to evicting. */
import type { Scorer } from '../plugins.js';

export const kvScorer: Scorer = {
  name: 'kv',
  score(candidates) {
    const out = new Array<number>(candidates.length);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      out[i] = -(w.kvUsage === undefined || !Number.isFinite(w.kvUsage) ? 0 : Math.min(1, Math.max(0, w.kvUsage)));
    }
    return out;
  },
};
