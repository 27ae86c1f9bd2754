/**
 * The score of one candidate worker for one request (higher is better), as the scorers of
 * ./scorers/ add it up (each term one file there, weighed by its `scoring.<name>_weight`):
 *
 *   score = prefix_weight  · matched_blocks / total_blocks
 *         − load_weight    · max(inflight, engine_queue) / max_inflight
 *         − kv_weight      · kv_usage
 *         − balance_weight · min(1, max(0, work − fleet_mean_work) / max(fleet_mean_work, balance_floor))
 *
 * The load is the gate's own in-flight count (instant) or the queue the engine last reported
 * (delayed, but it sees traffic that bypassed this fleet of gates), whichever is worse.
 *
 * The balance term, for new sessions only, is the worker's excess over its fair share of the
 * fleet's work, where work is what the engine runs and queues (or the gate's in-flight count, if
 * larger or the only figure). The load term cannot see decode: kvgate releases a request at its
 * first token, so a worker decoding for forty sticky conversations looks as idle as one decoding
 * for four. Without this term every new session that shares a system prompt follows it to the
 * one worker holding it, and a four-app chat fleet ends up with four busy workers and four idle
 * ones (imbalance 2.2 in `kvgate sim --workload chat`; 1.2 with it). With it, a worker's prefix
 * advantage fades as it pulls ahead of the fleet (at the default weight of 3 it is gone a third
 * above the mean); below the floor the excess is divided by the floor instead of the mean, which
 * bounds what one request over the mean costs on a lightly loaded fleet at weight / floor (1 at
 * the defaults: still the whole prefix term, so a shared prompt gets copied to a second worker
 * there; docs/benchmarks/policy-rounds.md, eighteenth round).
 *
 * Each term is in [0, 1], so a weight reads as "how much of the whole range this signal may
 * swing the choice". With the defaults (src/config/defaults.ts): a worker holding the whole
 * prompt stays preferred over an idle one until it is nearly full or well past its fair share;
 * a worker holding half of it wins against one that is more than half a limit less loaded; KV
 * pressure breaks near-ties and steers new work away from workers whose cache is close to
 * evicting. This is the additive shape of llm-d's weighted scorers and Dynamo's cost (prefill
 * saved vs queueing), in shares rather than tokens so the weights do not depend on prompt length.
 */
import type { WorkerView } from './types.js';

/** The fleet's figures a score compares a worker with. */
export interface FleetLoad {
  /** Mean `work()` over the workers doing work (healthy or pressured). */
  meanWork: number;
  /** Work below which no worker counts as ahead of its share (src/config/defaults.ts `balanceFloor`). */
  floor: number;
  /** Mean `liveSessions` over the same workers. */
  meanSessions: number;
  /** Live sessions below which no worker counts as ahead of its share of them. */
  sessionsFloor: number;
}

/** What a worker is busy with: the engine's running and queued requests, or the gate's count if larger. */
/**
 * How busy a worker is against its in-flight limit: the gate's own in-flight count (instant) or
 * the queue its engine last reported (a scrape old), whichever is larger.
 */
export function busy(w: WorkerView): number {
  return Math.max(w.inflight, finite(w.waiting));
}

export function work(w: WorkerView): number {
  const engine = finite(w.running) + finite(w.waiting);
  return Math.max(w.inflight, engine);
}

/** The mean work of the workers serving anything (healthy or pressured): each one's fair share. */
export function fleetLoad(workers: readonly WorkerView[], floor: number, sessionsFloor = 1): FleetLoad {
  let total = 0;
  let sessions = 0;
  let n = 0;
  for (const w of workers) {
    if (w.state !== 'healthy' && w.state !== 'pressured') continue;
    total += work(w);
    sessions += finite(w.liveSessions);
    n++;
  }
  return { meanWork: n > 0 ? total / n : 0, floor, meanSessions: n > 0 ? sessions / n : 0, sessionsFloor };
}

/** A reported figure, or 0 when absent, negative or not a number. */
export function finite(v: number | undefined): number {
  return v !== undefined && Number.isFinite(v) ? Math.max(0, v) : 0;
}
