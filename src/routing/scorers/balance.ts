/**
 * The worker's excess over its fair share of the fleet's work, for a session being placed (the
 * context carries the fleet's figures only then; ../score.ts says why the term exists):
 * min(1, max(0, work − fleet_mean_work) / max(fleet_mean_work, balance_floor)).
 */
import type { Scorer } from '../plugins.js';
import { work } from '../score.js';

export const balanceScorer: Scorer = {
  name: 'balance',
  score(candidates, { fleet, staying }) {
    // Staying on its own worker is no new placement: no fair-share term there.
    const out = new Array<number>(candidates.length);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      out[i] = -(fleet && w !== staying ? Math.min(1, Math.max(0, work(w) - fleet.meanWork) / Math.max(fleet.meanWork, fleet.floor, 1e-9)) : 0);
    }
    return out;
  },
};
