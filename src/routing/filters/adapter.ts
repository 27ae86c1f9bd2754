/**
 * LoRA adapter affinity, as a filter (here) and a scorer of the decision. A request whose `model` is an
 * adapter runs fastest on a worker that has the adapter in its batch already (or queued: the
 * engine is loading it), next on one with a free adapter slot (it loads the adapter, a few tens of
 * milliseconds from host memory), and worst on one whose slots are all taken by other adapters:
 * vLLM then holds the request back until a running adapter's requests drain (`--max-loras` bounds
 * the adapters of one batch), so the request waits behind work it has nothing to do with.
 *
 *  - filter: a worker with no slot and without the adapter is not a candidate while any other
 *    worker that can take the request has the adapter, a free slot, or reports nothing (no
 *    metrics: unknown is not full). With no such worker, every worker stays a candidate, and
 *    the request queues where the score sends it rather than being shed for want of an adapter.
 *  - scorer (../scorers/adapter.ts): `weights.adapter` (`scoring.adapter_weight`) for a worker
 *    that has the adapter (running or waiting), 0 otherwise; added to the score, so the adapter is
 *    one more term traded against load and prefix overlap.
 *
 * The same rule as the Gateway API Inference Extension's LoRA affinity (loaded, then free slot),
 * on vLLM's `vllm:lora_requests_info`.
 */
import type { Filter } from '../plugins.js';
import type { WorkerView } from '../types.js';
import { takesNewSessions } from './takes-new-work.js';

/** What a worker offers an adapter: it has it, it has room for it, it has no room, or it says nothing. */
export type AdapterFit = 'has' | 'slot' | 'full' | 'unknown';

export function adapterFit(w: WorkerView, adapter: string): AdapterFit {
  const a = w.adapters;
  if (!a) return 'unknown';
  if (a.names.includes(adapter)) return 'has';
  return a.names.length < a.max ? 'slot' : 'full';
}

/**
 * The workers the adapter rule excludes for this request: those with no room for the adapter, when
 * some other worker that `takes` the request has it, has room, or is unknown. Empty when nothing
 * is excluded (the common case allocates nothing).
 */
export function excludedForAdapter(workers: readonly WorkerView[], adapter: string, takes: (w: WorkerView) => boolean): ReadonlySet<string> {
  let full: string[] | undefined;
  let fits = false;
  for (const w of workers) {
    if (adapterFit(w, adapter) === 'full') (full ??= []).push(w.id);
    else if (!fits && takes(w)) fits = true;
  }
  return full && fits ? new Set(full) : NO_EXCLUSION;
}


const NO_EXCLUSION: ReadonlySet<string> = new Set();

/** The filter: who may serve this adapter request (everyone, for a request that names no adapter). */
export const adapterSlots: Filter = {
  name: 'adapter-slots',
  filter(workers, { input }) {
    const adapter = input.adapter;
    // `scoring.adapter_filter: false` leaves only the score term.
    if (!adapter || adapter.filter === false) return workers;
    const excluded = excludedForAdapter(workers, adapter.name, (w) => takesNewSessions(w, input.classShare));
    return excluded.size > 0 ? workers.filter((w) => !excluded.has(w.id)) : workers;
  },
};
