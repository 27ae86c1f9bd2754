/**
 * Classes of service, as one rule of the decision: a request of a class may be placed on a worker
 * only while the worker's in-flight count is below that class's share of its limit. Every class
 * counts against the same in-flight figure, so when the fleet fills, the lowest class reaches its
 * bound first and is shed while higher classes still find room; the top class's share is 1 (the
 * schema insists), so it is shed only when no worker could take anything.
 *
 * The bound replaces the limit wherever the policy compares a worker with it: the filter below
 * (who may take new work), and `admitLimit` for the rest (who may keep a session, the `below`
 * precondition the store checks at commit), so a lower class never slips in on a race either.
 * The score is untouched: the load term still reads the worker's whole limit, and with no class
 * share decisions are exactly as before.
 */
import type { Filter } from '../plugins.js';
import type { WorkerView } from '../types.js';

/** The in-flight count a class with `share` may fill a worker to: a share of its limit, at least one place. */
export function classLimit(maxInflight: number, share: number | undefined): number {
  if (share === undefined || !(share < 1) || !(share > 0)) return maxInflight;
  // The epsilon keeps 0.875 × 16 at 14 despite binary fractions.
  return Math.max(1, Math.min(maxInflight, Math.floor(maxInflight * share + 1e-9)));
}

/** The bound a worker is held to for this request's class (its own limit without one). */
export function admitLimit(w: WorkerView, share: number | undefined): number {
  return classLimit(w.maxInflight, share);
}

/** The filter: a worker below the request's class's share of its limit (the top class passes everywhere). */
export const classShare: Filter = {
  name: 'class-share',
  filter(workers, { input, home }) {
    const share = input.classShare;
    if (share === undefined || !(share < 1)) return workers;
    return workers.filter((w) => w === home || w.inflight < admitLimit(w, share));
  },
};
