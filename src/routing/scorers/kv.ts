/** KV-cache use as last reported: steers new work away from workers whose cache is close to evicting. */
import type { Scorer } from '../plugins.js';

export const kvScorer: Scorer = {
  name: 'kv',
  score(w) {
    return -(w.kvUsage === undefined || !Number.isFinite(w.kvUsage) ? 0 : Math.min(1, Math.max(0, w.kvUsage)));
  },
};
