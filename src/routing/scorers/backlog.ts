/**
 * The prefill queued ahead of this request on the worker, in units of this request's own prompt:
 * −min(BACKLOG_CAP, pending_prefill / prompt_blocks).
 *
 * With the prefix term (the share of the prompt the worker holds) at the same weight, the sum is
 * one minus what the request would wait for and compute there, over its prompt: Dynamo's cost
 * (prefill tokens queued plus those left uncached), in shares. A worker holding the whole prompt
 * keeps it until the work queued on it is as large as the prompt more than elsewhere: the queue
 * it would wait behind against the prefill a move recomputes. The in-flight count cannot say
 * this (16 queued chat turns are a fraction of a second, 16 long documents many seconds).
 *
 * Sessions only, where their mode follows them (0 for every worker otherwise): where a session is
 * placed or moved, its later turns follow it, and a worker with long prefills queued holds them
 * all back; any other request is a one-off, placed best by what holds its prompt (weighing queued
 * prefill for those cost the Mooncake synthetic trace 3-4 points of hit rate; docs/DESIGN.md
 * "Queued prefill"). That includes a session's request in `prefix` mode, which never follows
 * sessions, and a session's spill-over (too many of its requests in flight at home), which is
 * scored as a one-off though the session follows it where it lands (../policy.ts says why and what
 * weighing the backlog there cost). The decision says which (`placing`).
 */
import type { Scorer } from '../plugins.js';
import { finite } from '../score.js';

/** Past this many prompts of queued work a worker is as bad as it gets (terms stay bounded). */
export const BACKLOG_CAP = 4;

export const backlogScorer: Scorer = {
  name: 'backlog',
  score(candidates, { input, placing }) {
    const out = new Array<number>(candidates.length);
    if (placing !== true) return out.fill(0);
    const prompt = Math.max(1, input.promptBlocks ?? input.totalBlocks);
    for (let i = 0; i < candidates.length; i++) {
      out[i] = -Math.min(BACKLOG_CAP, finite(candidates[i]!.pendingPrefill) / prompt);
    }
    return out;
  },
};
