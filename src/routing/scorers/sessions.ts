/**
 * The worker's excess over its fair share of the fleet's live sessions, for a session being placed
 * (the context carries the fleet's figures only then):
 * min(1, max(0, live − fleet_mean_live) / max(fleet_mean_live, sessions_floor)).
 *
 * The balance term reads what the engines run and queue, and an agent loop spends most of its
 * time in tool calls between steps: a worker holding many live agent sessions can report an
 * empty queue and keep drawing new ones, whose later steps then pile up there. This term counts
 * the sessions themselves (the store's live sessions, as their commits marked them).
 */
import type { Scorer } from '../plugins.js';
import { finite } from '../score.js';

export const sessionsScorer: Scorer = {
  name: 'sessions',
  score(candidates, { input, fleet, staying }) {
    const out = new Array<number>(candidates.length);
    // No session placed (no fleet figures), or one of a short prompt (a chat turn): no term.
    if (fleet === undefined || (input.promptTokens ?? 0) < (input.sessionsMinTokens ?? 0)) return out.fill(0);
    const share = Math.max(fleet.meanSessions, fleet.sessionsFloor, 1e-9);
    for (let i = 0; i < candidates.length; i++) {
      const w = candidates[i]!;
      // Staying on its own worker is no new placement: no fair-share term there.
      out[i] = w === staying ? 0 : -Math.min(1, Math.max(0, finite(w.liveSessions) - fleet.meanSessions) / share);
    }
    return out;
  },
};
