/** The share of the prompt's leading blocks the worker probably holds: the prefill it saves. */
import type { Scorer } from '../plugins.js';

export const prefixScorer: Scorer = {
  name: 'prefix',
  score(candidates, { input }) {
    const total = input.totalBlocks;
    const out = new Array<number>(candidates.length);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      out[i] = (total > 0 ? Math.min(1, w.prefixBlocks / total) : 0);
    }
    return out;
  },
};
