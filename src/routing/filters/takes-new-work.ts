/**
 * Who may take work it holds no session for: a healthy worker below its in-flight limit (a class's
 * share of that limit is the next filter's: ./class-share.ts). Two exceptions:
 *  - the session's own worker past its limit while its engine reports room (../overflow.ts
 *    `keepsOverLimit`): it stays a candidate, to be weighed against moving;
 *  - for a request without a sticky session (in the prompt-aware modes), a pressured worker
 *    below its limit that holds most of the request's prompt (`holdsPrompt`). A pressured worker
 *    keeps the sessions it holds, and a request whose prompt it holds is the same thing without
 *    a session id: a conversation continued by prefix, a RAG question on a document it has. (A
 *    session being placed is new work: it would commit its later turns there.) Sending it
 *    elsewhere recomputes the whole prompt there, which costs the KV the rule protects on a
 *    second worker and spreads the pressure: on held-out RAG sweeps at 0.8 of capacity every
 *    worker ended up pressured, and kvgate shed 370-412 of 2,000 requests with its hit rate down
 *    from 78% to 60%; keeping holders took that to 95-137 shed and 75% (docs/DESIGN.md
 *    "Pressured workers keep what they hold").
 */
import { DEFAULTS } from '../../config/defaults.js';
import { admitLimit } from './class-share.js';
import type { Filter } from '../plugins.js';
import type { WorkerState, WorkerView } from '../types.js';

export const KEEPS: readonly WorkerState[] = ['healthy', 'pressured'];
export const TAKES: readonly WorkerState[] = ['healthy'];

/** Can keep serving the keys it already holds (below its limit, or its class's share of it). */
export function keepsSessions(w: WorkerView, classShare?: number): boolean {
  return KEEPS.includes(w.state) && w.inflight < admitLimit(w, classShare);
}

/** Can take a key it does not hold (below its limit, or its class's share of it). */
export function takesNewSessions(w: WorkerView, classShare?: number): boolean {
  return w.state === 'healthy' && w.inflight < admitLimit(w, classShare);
}

/** Holds at least `DEFAULTS.pressuredHoldsShare` of a prompt of `totalBlocks` blocks (none for an empty prompt). */
export function holdsPrompt(w: WorkerView, totalBlocks: number): boolean {
  return totalBlocks > 0 && w.prefixBlocks >= DEFAULTS.pressuredHoldsShare * totalBlocks;
}

export const takesNewWork: Filter = {
  name: 'takes-new-work',
  filter(workers, { input, home }) {
    // Not for a session being placed (mode `both`): that would commit its later turns to a pressured worker.
    const byPrompt = input.mode === 'prefix' || (input.mode === 'both' && !input.session);
    return workers.filter((w) => w === home || takesNewSessions(w) || (byPrompt && w.state === 'pressured' && keepsSessions(w) && holdsPrompt(w, input.totalBlocks)));
  },
};
