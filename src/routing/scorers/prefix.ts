/** The share of the prompt's leading blocks the worker probably holds: the prefill it saves. */
import type { Scorer } from '../plugins.js';

export const prefixScorer: Scorer = {
  name: 'prefix',
  score(w, { input }) {
    return input.totalBlocks > 0 ? Math.min(1, w.prefixBlocks / input.totalBlocks) : 0;
  },
};
