/**
 * The worker's load against its limit: the gate's own in-flight count (instant) or the queue the
 * engine last reported (delayed, but it sees traffic that bypassed this fleet of gates), whichever
 * is worse. Capped at the limit, except when every candidate is past it (../overflow.ts): then the
 * shortest queue still tells.
 */
import type { Scorer } from '../plugins.js';
import { busy } from '../score.js';

export const loadScorer: Scorer = {
  name: 'load',
  score(candidates, { overLimit, staying }) {
    const out = new Array<number>(candidates.length);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      const b = busy(w);
      const past = overLimit || w === staying;
      out[i] = -(w.maxInflight > 0 ? (past ? b / w.maxInflight : Math.min(1, b / w.maxInflight)) : 1);
    }
    return out;
  },
};
