/**
 * Where a pressured worker's cold sessions go. Pure. Sessions are spread over the workers that take
 * new work, each to the one with the lowest projected load share (in-flight plus sessions already
 * assigned in this round, over its limit), so one round never dumps a worker's sessions onto a
 * single neighbour and tips it into pressure too.
 */
import { takesNewSessions } from './policy.js';
import type { WorkerView } from './types.js';

export function planMigration(keys: readonly string[], from: string, workers: readonly WorkerView[]): Array<{ key: string; to: string }> {
  const targets = workers.filter((w) => w.id !== from && takesNewSessions(w));
  if (targets.length === 0) return [];
  const assigned = new Map<string, number>();
  return keys.map((key) => {
    let best = targets[0]!;
    let bestShare = Infinity;
    for (const w of targets) {
      const share = (w.inflight + (assigned.get(w.id) ?? 0)) / w.maxInflight;
      if (share < bestShare) {
        best = w;
        bestShare = share;
      }
    }
    assigned.set(best.id, (assigned.get(best.id) ?? 0) + 1);
    return { key, to: best.id };
  });
}
