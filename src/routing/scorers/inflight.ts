/**
 * The gate's own in-flight count against the limit: "best" in the modes that ignore prompts
 * (`session`, `least_loaded`) and for requests with no prompt to match. Weight 1, not a knob.
 */
import type { Scorer } from '../plugins.js';

export const inflightScorer: Scorer = {
  name: 'inflight',
  score(w) {
    return -(w.inflight / w.maxInflight);
  },
};
