/**
 * The highest score wins. Ties go to the lower load (in-flight or the engine's queue, whichever is
 * larger, as the load term counts it), then the lower in-flight count, then by rendezvous hashing
 * on the request's key, or for a request without one on the tie seed the gate draws for it: every
 * gate replica picks the same worker from the same view for a key, and requests without one
 * spread over tied workers instead of all going to the worker that wins the empty key's hash.
 * Among equals the first candidate stays.
 */
import type { Picker } from '../plugins.js';
import { rendezvousScore } from '../rendezvous.js';
import { busy } from '../score.js';
import type { WorkerView } from '../types.js';

export const maxScorePicker: Picker = {
  name: 'max-score',
  pick(candidates, scores, input) {
    const key = input.keyHash ?? input.tieSeed ?? '';
    let best = -1;
    for (let i = 0; i < candidates.length; i++) {
      if (best < 0 || scores[i]! > scores[best]! || (scores[i] === scores[best] && breaksTie(candidates[i]!, candidates[best]!, key))) best = i;
    }
    return best;
  },
};

function breaksTie(w: WorkerView, best: WorkerView, key: string): boolean {
  const load = busy(w);
  const bestLoad = busy(best);
  if (load !== bestLoad) return load < bestLoad;
  if (w.inflight !== best.inflight) return w.inflight < best.inflight;
  return rendezvousScore(key, w.id) > rendezvousScore(key, best.id);
}
