/**
 * The routing policy: a pure function from what is known to a decision. No I/O, no clock.
 *
 * 1. Sticky sessions (modes `both` and `session`): a session's worker takes its request while it
 *    can (healthy or pressured, below its in-flight limit) and the session has fewer than
 *    `maxInflightPerSession` requests running there. That worker holds the conversation's KV cache.
 * 2. Otherwise the request is placed on the best worker that takes new work (healthy, below its
 *    limit; or pressured, below it, holding most of the prompt: filters/takes-new-work.ts). In
 *    `both` and `prefix` modes "best" is the highest score (./score.ts): the share of the prompt's
 *    leading blocks the worker probably holds, minus its load and KV pressure. So a
 *    session whose worker is full follows its prefix (e.g. a shared system prompt) rather than
 *    landing anywhere, and a hot prefix spreads to a second worker once its first is loaded.
 *    In `session` and `least_loaded` modes, and for a request with no prompt, "best" is the
 *    least loaded: the fewest in flight, ties to the shorter reported queue.
 * 3. Past the limits (./overflow.ts), workers whose engines report room still take work: in
 *    `both` mode a session's worker at its limit is scored with the others, its load counted
 *    past the limit, so it keeps the session while its queue costs less than the prefill a move
 *    recomputes (in `session` mode, which weighs no prompts, the session moves at once to a
 *    worker below its limit); and when no worker takes the request in step 2 (every one at its
 *    limit, or pressured, or both), work queues on the session's worker (under the same
 *    per-session cap as below the limit), else the best score among the workers with room, a
 *    worker pressured by its queue alone included. The limit spreads work; the engines say when
 *    the fleet is full.
 * 4. Otherwise shed at once: 'overloaded' when some worker is up but all are full,
 *    'no_healthy_workers' when none can take anything. Queueing behind a full worker only grows
 *    latency.
 *
 * Ties go to the lower load, then the lower in-flight count, then by rendezvous hashing on the
 * key (for a request without one, on the per-request tie seed the gate supplies), so every gate
 * replica picks the same worker for a key from the same view and unkeyed ties spread over workers.
 *
 * Steps 2 and 3 run profiles of filters, weighted scorers and a picker (./profiles.ts, one file per
 * plugin under ./filters, ./scorers, ./pickers); steps 1 and 3's own-worker rule and the
 * preconditions the store checks stay here (docs/DESIGN.md "The decision as filters, scorers and a
 * picker" says why).
 */
import { admitLimit } from './filters/class-share.js';
import { adapterFit } from './filters/adapter.js';
import { KEEPS, TAKES, keepsSessions } from './filters/takes-new-work.js';
import { keepsOverLimit, mayOverflow, overflowLimitOf, queueCredit } from './overflow.js';
import { runFilters, runProfile, type FilterContext } from './plugins.js';
import { profilesFor, VISIBLE } from './profiles.js';
import { fleetLoad, work } from './score.js';
import type { CandidateExplanation, Decision, DecisionInput, Explanation, Preconditions, RouteOutcome, WorkerView } from './types.js';

export { keepsSessions, takesNewSessions } from './filters/takes-new-work.js';

export function decide(input: DecisionInput): Decision {
  const { mode, classShare } = input;
  const all = profilesFor(input.weights);
  const profiles = input.adapter ? all.adapter : all;
  // Filters that hide a worker from the whole decision (a session's home included).
  const workers = runFilters(VISIBLE, input.workers, { input });
  const sticky = input.session && (mode === 'both' || mode === 'session');
  const affinity = sticky ? input.affinity : undefined;
  const affine = affinity === undefined ? undefined : workers.find((w) => w.id === affinity);
  const spilled = affine !== undefined && keepsSessions(affine, classShare) && input.keyInflight >= input.maxInflightPerSession;
  const usePrefix = (mode === 'both' || mode === 'prefix') && input.totalBlocks > 0;

  // Stickiness is a step of its own, not a filter: it ends the decision without weighing anyone.
  if (affine && keepsSessions(affine, classShare) && !spilled) {
    return {
      kind: 'route',
      worker: affine.id,
      outcome: 'affinity_hit',
      preconditions: {
        affinity,
        below: [{ worker: affine.id, limit: admitLimit(affine, classShare) }],
        atOrAbove: [],
        states: [{ worker: affine.id, in: KEEPS }],
      },
      explanation: explain(input, 'sticky', false, new Map()),
    };
  }
  // Past its limit, a session's worker whose engine reports room competes to keep it: its queue
  // against the prefill a move would recompute (overflow.ts).
  // One rule (the per-session cap, the hard bound, engine room) for both places it applies: the
  // contest below (prefix modes) and queueing when every worker is full.
  // The fleet's queue credit (overflow.ts), a pass over every worker: computed at most once a
  // decision, and only where a step may go past a limit (without that, every step ignores it).
  const overflows = mayOverflow(input);
  let credit: number | undefined;
  const ownOverLimit = affine && !spilled && overflows ? keepsOverLimit(affine, input, (credit = queueCredit(input.workers))) : undefined;
  const home = usePrefix ? ownOverLimit : undefined;

  // Fair share is weighed only where a session is placed (new, or moving off a full or dead
  // worker): that commits its future turns to the worker, as they are sticky. A sessionless
  // request costs only its own wait, which the load term sees; spreading one-off requests of a
  // hot prefix by fair share re-computed the prefix for nothing (`kvgate sim --workload
  // system-prompt`: 1% of hit rate lost, no balance gained). A session's spill-over is scored the
  // same way, as a one-off: by what holds its prompt and the load, without fair share or backlog.
  // Where it lands, though, the session follows it (the commit moves the affinity: outcome
  // `migrated`, below). Committing a spill without moving the session was measured and lost:
  // held-out agent seed 101 went from 1.35 to 1.275 of capacity in goodput (p99 TTFT at 1.35:
  // 1.73 to 2.06 s), the mix kept its goodput and lost up to 0.1 point of hit rate. The spill
  // carries the session's newest turn, so its worker holds the longest cached history for the
  // next one. Weighing the backlog on spills too (scorers/backlog.ts) cost agent seed 101 the
  // same 1.35 to 1.2, and the mix at 0.8 of capacity 3 points of hit rate and 65 more shed.
  const placing = sticky && !spilled;
  const fleet = usePrefix && placing ? fleetLoad(input.workers, input.balanceFloor, input.sessionsFloor) : undefined;
  const profile = usePrefix ? profiles.prefix : profiles.load;
  // The session's worker past its limit is scored as staying: no fair-share term, and the load counts past the limit.
  const staying = home !== undefined ? affine : undefined;
  const fctx: FilterContext = { input, home: staying };
  const placed = runProfile(profile.place, workers, fctx, { input, fleet, placing, overLimit: false, staying });
  const scores = placed.scores;
  let best: WorkerView | undefined = placed.best;
  // The deepest match among the workers weighed here: a replica that knows of a deeper one on one
  // of them must re-decide. Exactly these workers, so the store checks what the policy saw.
  const prefix = usePrefix ? { atMost: deepestMatch(workers), over: workers.map((w) => w.id) } : undefined;

  // Every healthy worker at its limit: queue where an engine reports room (overflow.ts). An explicit
  // step too: a session whose own worker has room queues there without a contest, unless it
  // already has maxInflightPerSession requests running there (fan-out spreads, as below the limit).
  let rule: Explanation['rule'] = 'scored';
  let limit = best ? admitLimit(best, classShare) : 0;
  // A pressured worker is chosen below its limit only for what it holds (takes-new-work.ts): it must still keep work.
  let keptIn = best?.state === 'pressured' ? KEEPS : TAKES;
  if (best !== undefined && home !== undefined && best === affine) {
    limit = home.limit;
    keptIn = home.in;
    rule = 'overflow';
  }
  if (!best && overflows) {
    credit ??= queueCredit(input.workers);
    let over: WorkerView | undefined;
    if (ownOverLimit) over = affine;
    else {
      const queued = runProfile(profile.overflow, workers, { input, queueCredit: credit }, { input, fleet, placing, overLimit: true });
      over = queued.best;
      if (over) for (const [id, s] of queued.scores) scores.set(id, s);
    }
    if (over) {
      best = over;
      limit = overflowLimitOf(over, input.overflowFactor ?? 0, credit);
      keptIn = KEEPS;
      rule = 'overflow';
    }
  }

  if (!best) {
    const anyUp = input.workers.some((w) => KEEPS.includes(w.state));
    return {
      kind: 'shed',
      reason: anyUp ? 'overloaded' : 'no_healthy_workers',
      preconditions: {
        affinity,
        below: [],
        atOrAbove: input.workers.filter((w) => w.state === 'healthy').map((w) => ({ worker: w.id, limit: admitLimit(w, classShare) })),
        states: [],
      },
      explanation: explain(input, 'shed', spilled, scores),
    };
  }

  const below = [{ worker: best.id, limit }];
  // A move away from a live, merely full worker is only right while it is still full.
  const atOrAbove = affine && KEEPS.includes(affine.state) && affine.inflight >= admitLimit(affine, classShare) ? [{ worker: affine.id, limit: admitLimit(affine, classShare) }] : [];
  const states: Preconditions['states'] =
    // Leaving a dead or drained worker is only right while it still is.
    affine && !KEEPS.includes(affine.state) ? [{ worker: best.id, in: keptIn }, { worker: affine.id, in: [affine.state] }] : [{ worker: best.id, in: keptIn }];
  // Literals with and without `prefix` rather than a conditional spread (V8's generic copy, every decision).
  const preconditions: Preconditions = prefix !== undefined ? { affinity, below, atOrAbove, states, prefix } : { affinity, below, atOrAbove, states };
  // An affinity whose worker is gone from the config moves too: that is still a migration. So is a
  // spill-over placed elsewhere: the session follows it (above says why).
  const moved = affinity !== undefined && affinity !== best.id;
  const outcome: RouteOutcome = sticky
    ? moved
      ? 'migrated'
      : affinity === best.id
        ? 'affinity_hit'
        : 'new'
    : usePrefix && best.prefixBlocks > 0
      ? 'prefix_hit'
      : 'unkeyed';
  const explanation = explain(input, rule, spilled, scores);
  return moved
    ? { kind: 'route', worker: best.id, outcome, from: affinity, preconditions, explanation }
    : { kind: 'route', worker: best.id, outcome, preconditions, explanation };
}

/** `Math.max(0, ...workers.map((w) => w.prefixBlocks))` without the array and the spread (every prefix decision). */
function deepestMatch(workers: readonly WorkerView[]): number {
  let m = 0;
  for (let i = 0; i < workers.length; i++) m = Math.max(m, workers[i]!.prefixBlocks);
  return m;
}

function explain(input: DecisionInput, rule: Explanation['rule'], spilled: boolean, scores: ReadonlyMap<string, number>): Explanation {
  return {
    mode: input.mode,
    totalBlocks: input.totalBlocks,
    rule,
    spilled,
    candidates: input.workers.map((w): CandidateExplanation => {
      const c: CandidateExplanation = { worker: w.id, state: w.state, inflight: w.inflight, maxInflight: w.maxInflight, prefixBlocks: w.prefixBlocks };
      if (w.kvUsage !== undefined) c.kvUsage = w.kvUsage;
      const limit = admitLimit(w, input.classShare);
      if (limit !== w.maxInflight) c.classLimit = limit;
      if (input.adapter) c.adapter = adapterFit(w, input.adapter.name);
      if (w.running !== undefined || w.waiting !== undefined) c.work = work(w);
      if (w.kvRoomTokens !== undefined) c.kvRoomTokens = w.kvRoomTokens;
      if (w.liveSessions !== undefined) c.liveSessions = w.liveSessions;
      const s = scores.get(w.id);
      if (s !== undefined) c.score = Math.round(s * 1e6) / 1e6;
      return c;
    }),
  };
}
