/**
 * What happens when every healthy worker is at its in-flight limit: queue at an engine that says
 * it has room, instead of refusing.
 *
 * The in-flight limit counts requests between routing and first token. It is the right signal for
 * spreading (below it, policy.ts scores and spills as before) but a poor definition of "full": 16
 * queued requests of 175 tokens are 0.3 s of prefill, 16 of 8k tokens are five seconds. Refusing
 * at a request count shed work the engines could have served within any latency target
 * (`kvgate sim --sweep`, agent-session traces: 330 of 2,000 requests shed at 1.4 of capacity while
 * every engine's queue was a fraction of a second long), and every shed session lost its cache.
 *
 * So past the limit the engine's own word decides. A worker keeps taking work while its last
 * scrape says it has the memory for it (health.ts `hasEngineRoom`: KV use below
 * `thresholds.kv_pressure`, memory and temperature below theirs). A queue past
 * `thresholds.max_queue` still stops new sessions below the limit, but past it a queue is
 * latency, which the score weighs, not a lack of room: counted in requests, it cannot tell 32
 * chat turns (half a second) from 32 long documents. Shedding stays for a fleet that is truly
 * full: every worker out of memory, down or draining, or past `overflowLimit` in flight from
 * this fleet of gates (the bound that holds while a scrape is on its way; while every engine has
 * room, it does not count again the queue every engine has already reported: `queueCredit`).
 * "Out of memory" is for the request at hand: a one-off that fits in the KV a pressured engine
 * reports free still runs there (`fitsOneOff`).
 *
 * A worker with no engine metrics has only the gate's count to go by: for it the limit stays a
 * hard one, as before. So does one whose page has no memory figure (no KV use, and no GPU memory
 * where that is read; e.g. a Triton page with only scheduled and waiting counts): unknown is not
 * room (health.ts `hasEngineRoom`).
 *
 * Where the work goes: in `both` mode a session whose worker is at its limit is not moved at
 * once; that worker competes with the others (policy.ts), scored with its load counted past the limit (scorers/load.ts
 * `overLimit`), so holding the whole conversation it keeps the session until its queue is about
 * one limit deeper than the best alternative's: the queue it would skip against the prefill a
 * move recomputes. (Keeping every session home while its engine had room, the first try, held
 * sessions behind deep queues while other workers idled: it lost goodput on held-out chat and
 * agent sweeps.) `session` mode weighs no prompts, so it has no such contest: a session whose
 * worker is at its limit moves to a worker below its limit at once. When no worker takes the
 * request below the limits (every one at its limit, or pressured, or both), a session queues on
 * its own worker if that one has room, anything else on the best score with the load counted
 * past the limit, in every mode. So a worker pressured by its queue alone (KV room left) takes
 * new sessions when no worker takes them otherwise: its queue is latency, not a lack of memory.
 */
import { DEFAULTS } from '../config/defaults.js';
import { KEEPS } from './filters/takes-new-work.js';
import { finite } from './score.js';
import type { DecisionInput, WorkerState, WorkerView } from './types.js';

/** Can take a request past its in-flight limit: its engine reports room, and the hard bound holds. */
export function takesOverflow(w: WorkerView, overflowLimit: number): boolean {
  return (w.state === 'healthy' || w.state === 'pressured') && w.engineRoom === true && w.inflight < overflowLimit;
}

/**
 * A worker past KV pressure has room for this one request: the request has no session (it places
 * nothing that would come back: a pressured worker takes no new sessions), its size is known, the
 * engine reported no queue (a queue there waits for memory, and this request would wait behind
 * it: vLLM's scheduler admits in order), and the KV it reported free, less what this gate sent it
 * since, holds `oneOffKvMargin` times the prompt.
 *
 * Without it a fleet whose every worker was past pressure shed every request, however small,
 * while each engine had KV free for it: on long-prompt traces, where one 100k-token prompt holds
 * a quarter of a worker's KV, every worker crosses 85% again and again under load, and kvgate
 * shed short requests the engines would have started at once (`kvgate sim --sweep`, the Mooncake
 * traces; docs/BENCHMARKS.md). The engine's own queue is the check that it really has the room:
 * a worker whose memory is truly short queues, and then gets nothing.
 */
export function fitsOneOff(w: WorkerView, input: DecisionInput): boolean {
  if (w.state !== 'pressured' || w.kvRoomTokens === undefined || input.session === true) return false;
  const tokens = input.promptTokens;
  if (tokens === undefined || !(tokens > 0)) return false;
  return finite(w.waiting) === 0 && w.kvRoomTokens >= DEFAULTS.oneOffKvMargin * tokens;
}

/**
 * The hard in-flight bound of one worker: `overflowFactor` × its limit, plus the fleet's queue
 * credit (`queueCredit`) (0 or 1: no overflow, the limit alone).
 */
export function overflowLimitOf(w: WorkerView, factor: number, credit: number): number {
  return factor > 1 ? Math.floor(w.maxInflight * factor) + credit : w.maxInflight;
}

/**
 * Requests every serving engine has reported queued while reporting the memory for more: the
 * shallowest reported queue of the workers serving (healthy or pressured), 0 when any of them is
 * out of room (KV, memory or heat) or has no engine metrics.
 *
 * The hard bound is there for what the engines have not told us yet: requests sent since the last
 * scrape, 100-150 ms ago. When every engine says it has the memory and is queueing deep, the fleet
 * is full by request count, not by memory, and counting the queues the engines reported shed
 * work each of them would have queued: on the held-out Mooncake synthetic trace at 1.4 of
 * capacity every one of the 121 requests kvgate shed met the bound at workers with KV at about
 * 45% and 63 queued, and kvgate delivered 0.971x round robin's tokens/s. So the bound rises with
 * the shallowest queue: no worker runs more than `overflowFactor` limits past it, which keeps work
 * spread. Two other credits were measured and dropped: each worker's own queue let a worker with
 * room absorb the work of workers out of KV (held-out agent seed 102 at 1.6: imbalance 1.34 to
 * 2.06, tokens/s 0.93x round robin's); the shallowest queue counting workers out of room too
 * piled Zipf-hot documents onto their holders (held-out RAG at 1.2-1.6: imbalance up to 1.51).
 * So while any worker is out of room, the memory decides and the bound stays the count alone.
 */
export function queueCredit(workers: readonly WorkerView[]): number {
  let min = Infinity;
  for (let i = 0; i < workers.length; i++) {
    const w = workers[i]!;
    if (w.state !== 'healthy' && w.state !== 'pressured') continue;
    min = Math.min(min, w.engineRoom === true ? finite(w.waiting) : 0);
  }
  return Number.isFinite(min) ? Math.floor(min) : 0;
}

/**
 * Whether this request may go past any worker's in-flight limit at all: an overflow factor above 1,
 * and the top class of service. Without it no step weighs the queue credit.
 */
export function mayOverflow(input: DecisionInput): boolean {
  return (input.overflowFactor ?? 0) > 1 && topClass(input);
}

/**
 * A session's own worker, at or past its in-flight limit, keeps the session while its engine
 * reports room: moving would recompute the conversation's prompt elsewhere to skip a queue the
 * engine itself says is short. The session must not have `maxInflightPerSession` requests
 * running there (fan-out spreads, as below the limit). Undefined: it does not. `credit` is
 * `queueCredit(input.workers)`, which the decision computes once for all its steps. It decides
 * even at a limit of 0: the bound is then the credit alone, so nothing is decided before it.
 */
export function keepsOverLimit(affine: WorkerView, input: DecisionInput, credit: number): { limit: number; in: readonly WorkerState[] } | undefined {
  const limit = overflowLimitOf(affine, input.overflowFactor ?? 0, credit);
  if (limit <= affine.maxInflight || !topClass(input) || input.keyInflight >= input.maxInflightPerSession) return undefined;
  return takesOverflow(affine, limit) ? { limit, in: KEEPS } : undefined;
}


/**
 * Only the top class of service goes past the limit: a lower class is held to a share of it
 * (./filters/class-share.ts) to keep room for the top one, and overflow would undo that.
 */
function topClass(input: DecisionInput): boolean {
  return (input.classShare ?? 1) >= 1;
}
