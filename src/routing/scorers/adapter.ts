/**
 * LoRA adapter affinity (../filters/adapter.ts): 1 for a worker that has the request's adapter in
 * its batch or queue, 0 otherwise (and for a request that names no adapter).
 */
import { adapterFit } from '../filters/adapter.js';
import type { Scorer } from '../plugins.js';

export const adapterScorer: Scorer = {
  name: 'adapter',
  score(w, { input }) {
    return input.adapter !== undefined && adapterFit(w, input.adapter.name) === 'has' ? 1 : 0;
  },
};
