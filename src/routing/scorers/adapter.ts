/**
 * LoRA adapter affinity (../filters/adapter.ts): 1 for a worker that has the request's adapter in
 * its batch or queue, 0 otherwise (and for a request that names no adapter).
 */
import { adapterFit } from '../filters/adapter.js';
import type { Scorer } from '../plugins.js';

export const adapterScorer: Scorer = {
  name: 'adapter',
  score(candidates, { input }) {
    const adapter = input.adapter;
    const out = new Array<number>(candidates.length);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      out[i] = (adapter !== undefined && adapterFit(w, adapter.name) === 'has' ? 1 : 0);
    }
    return out;
  },
};
