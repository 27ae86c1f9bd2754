/**
 * The highest score wins. Ties go to the lower in-flight count, then by rendezvous hashing on the
 * request's key, so every gate replica picks the same worker from the same view and unkeyed ties
 * spread over workers. Among equals the first candidate stays.
 */
import type { Picker } from '../plugins.js';
import { rendezvousScore } from '../rendezvous.js';
import type { WorkerView } from '../types.js';

export const maxScorePicker: Picker = {
  name: 'max-score',
  pick(candidates, scores, input) {
    const key = input.keyHash ?? '';
    let best = -1;
    for (let i = 0; i < candidates.length; i++) {
      if (best < 0 || scores[i]! > scores[best]! || (scores[i] === scores[best] && breaksTie(candidates[i]!, candidates[best]!, key))) best = i;
    }
    return best;
  },
};

function breaksTie(w: WorkerView, best: WorkerView, key: string): boolean {
  if (w.inflight !== best.inflight) return w.inflight < best.inflight;
  return rendezvousScore(key, w.id) > rendezvousScore(key, best.id);
}
