/**
 * Offered load, and how a workload is brought to it.
 *
 * Capacity. A worker's compute goes to prompt tokens it must compute and to the tokens it
 * generates (with chunked prefill every decode token rides in a step that also carries prompt
 * chunks, so under load each costs about a prompt token's compute), plus a fixed overhead per
 * request. The fewest prompt tokens any router can leave to compute is set by the pooled-cache
 * bound (pooled-bound.ts: one LRU cache as large as the whole fleet's). So the fleet's capacity
 * for a workload is
 *
 *   capacity_rps = workers / (overhead + (prompt × (1 − pooled_hit) + output) / prefill_tok_s)
 *
 * with prompt and output the workload's mean tokens per request: the request rate that would keep
 * every worker's compute busy if every request hit the cache as well as in the pooled bound. It is
 * measured on the workload as replayed at its natural rate (the bound is an LRU over arrival
 * order, so it does not depend on the rate). Offered load L then means arrivals at
 * L × capacity_rps: at L = 1 even a router that reached the bound would be saturated; a router
 * that hits less saturates earlier.
 *
 * Reaching a load. Synthetic workloads and session-less traces are re-timed (every arrival time
 * divided by the rate factor). A trace with sessions (agent traces have a few dozen) would have
 * its sessions' turns squeezed together, faster than any model answers; instead it is replayed as
 * `copies = ceil(factor)` time-shifted copies under new session ids, each slowed by
 * factor / copies ≤ 1. Copy j starts j/copies of the mean gap between session starts after the
 * original, so copies interleave. Each copy's private content is re-salted so that copies share
 * only what the original sessions shared: a block that two or more original sessions contain
 * (an agent's instructions, a shared system prompt) stays common to every copy; from a request's
 * first block that fewer than two sessions contain, its text is overwritten in place with a tag
 * naming the copy (same length), so every later block hash differs per copy while a session's
 * turns, salted at the same place, still extend one another.
 */
import { CHARS_PER_TOKEN, textBlockIds, type BlockId } from './blocks.js';
import type { CostModel, FleetOptions } from './cost-model.js';
import { pooledBound } from './pooled-bound.js';
import { finishWorkload, type SimRequest, type Workload } from './workload.js';

export interface Capacity {
  /** Requests/s that keep the fleet's compute busy at the pooled-cache hit rate. */
  capacityRps: number;
  /** The workload's own arrival rate: requests / arrival span. */
  naturalRps: number;
  pooledHitRate: number;
  /** Mean seconds of a worker's compute per request at that hit rate. */
  meanServiceS: number;
}

export function measureCapacity(w: Workload, fleet: FleetOptions, cost: CostModel): Capacity {
  const reqs = w.requests;
  const n = reqs.length;
  const bound = pooledBound(w, fleet);
  let prompt = 0;
  let output = 0;
  for (const r of reqs) {
    prompt += r.promptTokens;
    output += r.outputTokens;
  }
  const meanServiceS = n > 0 ? cost.prefillOverheadS + (prompt * (1 - bound.hitRate) + output) / n / cost.prefillTokensPerS : 0;
  const span = n > 1 ? reqs[n - 1]!.arrivalS - reqs[0]!.arrivalS : 0;
  return {
    capacityRps: meanServiceS > 0 ? fleet.workers / meanServiceS : 0,
    naturalRps: span > 0 ? (n - 1) / span : 0,
    pooledHitRate: bound.hitRate,
    meanServiceS,
  };
}

/** True when the workload's requests carry session ids (then a trace is scaled up by copies). */
export function hasSessions(w: Workload): boolean {
  return w.requests.some((r) => r.sessionId !== undefined);
}

/** Arrivals `factor` times as dense: every arrival time divided by it. */
export function retime(w: Workload, factor: number, maxRequests?: number): Workload {
  return finishWorkload(w.name, w.description, w.blockTokens, w.requests, { rateScale: factor, ...(maxRequests !== undefined ? { maxRequests } : {}) });
}

/** Blocks that requests of two or more distinct sessions contain. */
export function sharedBlocks(w: Workload): Set<BlockId> {
  const owner = new Map<BlockId, string | null>();
  for (const r of w.requests) {
    const s = r.sessionId ?? `#${r.index}`;
    for (const b of r.blocks) {
      const o = owner.get(b);
      if (o === undefined) owner.set(b, s);
      else if (o !== null && o !== s) owner.set(b, null);
    }
  }
  const out = new Set<BlockId>();
  for (const [b, o] of owner) if (o === null) out.add(b);
  return out;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * `text` with the bytes from `at` overwritten by an ASCII tag naming copy `copy`, keeping the
 * length in bytes and every byte before `at` (the overwrite starts and ends on character bounds).
 */
export function saltText(text: string, at: number, copy: number): string {
  const bytes = encoder.encode(text);
  let start = at;
  while (start < bytes.length && (bytes[start]! & 0xc0) === 0x80) start++;
  if (start >= bytes.length) return text;
  const tag = encoder.encode(`~copy${copy}~`);
  let end = Math.min(bytes.length, start + tag.length);
  while (end < bytes.length && (bytes[end]! & 0xc0) === 0x80) end++;
  const out = bytes.slice();
  for (let i = start; i < end; i++) out[i] = i - start < tag.length ? tag[i - start]! : 0x2e; // '.'
  return decoder.decode(out);
}

/**
 * `copies` time-shifted copies of a session trace (copy 0 is the original), re-salted as the file
 * comment says, arrivals slowed by `slowdown` (≥ 1 keeps every copy's turns no faster than
 * recorded), the first `maxRequests` by arrival kept.
 */
export function replicateSessions(w: Workload, copies: number, slowdown: number, maxRequests?: number): Workload {
  const reqs = w.requests;
  const starts = new Map<string, number>();
  for (const r of reqs) if (r.sessionId !== undefined && !starts.has(r.sessionId)) starts.set(r.sessionId, r.arrivalS);
  const span = reqs.length > 1 ? reqs[reqs.length - 1]!.arrivalS - reqs[0]!.arrivalS : 0;
  const gap = span / Math.max(1, starts.size);
  const picks: Array<{ r: SimRequest; copy: number; at: number }> = [];
  for (let c = 0; c < copies; c++) for (const r of reqs) picks.push({ r, copy: c, at: (r.arrivalS + (c * gap) / copies) * slowdown });
  picks.sort((a, b) => a.at - b.at || a.copy - b.copy || a.r.index - b.r.index);
  const kept = picks.slice(0, maxRequests ?? picks.length);

  const shared = sharedBlocks(w);
  const blockBytes = w.blockTokens * CHARS_PER_TOKEN;
  // Salted blocks get ids of their own, above every id the original uses.
  const fresh = new Map<number, number>();
  const freshId = (h: number): number => {
    let id = fresh.get(h);
    if (id === undefined) fresh.set(h, (id = w.blockCount + fresh.size));
    return id;
  };
  const raw = kept.map(({ r, copy, at }): Omit<SimRequest, 'index'> => {
    if (copy === 0 || r.sessionId === undefined) return { ...r, arrivalS: at };
    let k = 0;
    while (k < r.blocks.length && shared.has(r.blocks[k]!)) k++;
    const salted = saltText(r.text(), k * blockBytes, copy);
    const tail = textBlockIds(salted, w.blockTokens).slice(k).map(freshId);
    return {
      arrivalS: at,
      promptTokens: r.promptTokens,
      outputTokens: r.outputTokens,
      blocks: [...r.blocks.slice(0, k), ...tail],
      sessionId: `${r.sessionId}#copy${copy}`,
      text: () => salted,
    };
  });
  return finishWorkload(w.name, `${w.description}; ${copies} time-shifted, re-salted copies`, w.blockTokens, raw);
}

/**
 * The workload at `factor` times its natural arrival rate: re-timed, or (a trace with sessions,
 * factor > 1) replicated into copies. `maxRequests` caps what is replayed, first arrivals first.
 */
export function atRate(w: Workload, factor: number, opts: { copySessions: boolean; maxRequests?: number }): { workload: Workload; copies: number } {
  if (opts.copySessions && factor > 1 && hasSessions(w)) {
    const copies = Math.ceil(factor);
    return { workload: replicateSessions(w, copies, copies / factor, opts.maxRequests), copies };
  }
  return { workload: retime(w, factor, opts.maxRequests), copies: 1 };
}
