/**
 * The gate's own in-flight count against the limit: "best" in the modes that ignore prompts
 * (`session`, `least_loaded`) and for requests with no prompt to match. Weight 1, not a knob.
 */
import type { Scorer } from '../plugins.js';

export const inflightScorer: Scorer = {
  name: 'inflight',
  score(candidates) {
    const out = new Array<number>(candidates.length);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      out[i] = -(w.inflight / w.maxInflight);
    }
    return out;
  },
};
