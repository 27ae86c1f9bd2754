/**
 * Who may take work it holds no session for: a healthy worker below its in-flight limit (a class's
 * share of that limit is the next filter's: ./class-share.ts). The one exception is the session's own worker past its
 * limit while its engine reports room (../overflow.ts `keepsOverLimit`): it stays a candidate, to
 * be weighed against moving.
 */
import { admitLimit } from '../class-share.js';
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

export const takesNewWork: Filter = {
  name: 'takes-new-work',
  filter(workers, { home }) {
    return workers.filter((w) => w === home || takesNewSessions(w));
  },
};
