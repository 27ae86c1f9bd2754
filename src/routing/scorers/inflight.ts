/**
 * The gate's own in-flight count against the limit: "best" in the modes that ignore prompts
 * (`session`, `least_loaded`) and for requests with no prompt to match. Weight 1, not a knob.
 *
 * Not the load term (./load.ts, the larger of in-flight and the engine's reported queue): that
 * was measured here and lost on the held-out Mooncake synthetic trace past capacity (load 1.2:
 * tokens/s 207k with this scorer against 189k, hit rate 6.2% against 5.4%, imbalance 1.03 against
 * 1.13): the count is instant where the queue is a scrape old, and placing by load alone acts on
 * each request's arrival. The engine's queue still decides between workers this count ties
 * (pickers/max-score.ts), so a worker reporting a queue loses to an idle one.
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
