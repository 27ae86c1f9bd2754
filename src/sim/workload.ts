/**
 * What the simulator replays: requests in arrival order, each with the facts a KV cache and a
 * router need. Trace parsers (workloads/*.ts) and the synthetic generators all produce this.
 */
import type { BlockId } from './blocks.js';

export interface SimRequest {
  /** Position in arrival order, 0-based. */
  readonly index: number;
  /** Arrival time in seconds from the start of the run. */
  readonly arrivalS: number;
  readonly promptTokens: number;
  /** Tokens generated, the first of them by the prefill. At least 1. */
  readonly outputTokens: number;
  /**
   * Chained ids of the prompt's whole KV blocks (`Workload.blockTokens` tokens each): equal id at
   * position i ⇔ equal first i+1 blocks. Dense small integers once the workload is finished.
   */
  readonly blocks: readonly BlockId[];
  /** The client's conversation id, only where the workload really has one. */
  readonly sessionId: string | undefined;
  /** The prompt text as a router sees it; built on demand (Mooncake prompts are synthesized). */
  text(): string;
}

export interface Workload {
  /** e.g. `mooncake:conversation_trace.jsonl`, `synthetic:chat`. */
  readonly name: string;
  readonly description: string;
  /** Tokens per KV block for this workload's block ids. */
  readonly blockTokens: number;
  readonly requests: readonly SimRequest[];
  /** Distinct block ids; ids are 0..blockCount-1. */
  readonly blockCount: number;
}

/**
 * Sorts by arrival (stably), applies rate scaling and the request cap, renumbers, and interns
 * block ids into dense small integers (0, 1, 2, … in order of first appearance), which the caches
 * index arrays with. Interning keeps equality, so it keeps every prefix relation.
 */
export function finishWorkload(
  name: string,
  description: string,
  blockTokens: number,
  raw: ReadonlyArray<Omit<SimRequest, 'index'>>,
  opts: { rateScale?: number; maxRequests?: number } = {},
): Workload {
  const scale = opts.rateScale ?? 1;
  if (!(scale > 0)) throw new Error('rate scale must be positive');
  const sorted = raw
    .map((r, i) => ({ r, i }))
    .sort((a, b) => a.r.arrivalS - b.r.arrivalS || a.i - b.i)
    .slice(0, opts.maxRequests ?? Infinity);
  const t0 = sorted[0]?.r.arrivalS ?? 0;
  const dense = new Map<BlockId, number>();
  const intern = (b: BlockId): number => {
    let d = dense.get(b);
    if (d === undefined) dense.set(b, (d = dense.size));
    return d;
  };
  const requests = sorted.map(({ r }, index): SimRequest => ({
    index,
    arrivalS: (r.arrivalS - t0) / scale,
    promptTokens: r.promptTokens,
    outputTokens: Math.max(1, r.outputTokens),
    blocks: r.blocks.map(intern),
    sessionId: r.sessionId,
    text: r.text,
  }));
  return { name, description, blockTokens, requests, blockCount: dense.size };
}

/**
 * For each request, the earlier request whose whole prompt it extends (its last whole block
 * appears in this prompt at depth ≥ 2), or -1: a conversation's previous turn. Depth ≥ 2 keeps a
 * bare shared first block (a system prompt) from making every request a continuation. This is
 * the README's pseudo-session rule, applied to every workload, so "migration" means the same
 * thing for every policy: a continuation served away from the worker that served its parent.
 */
export function continuationParents(w: Workload): Int32Array {
  const parents = new Int32Array(w.requests.length).fill(-1);
  const endedAt = new Map<BlockId, number>();
  for (const r of w.requests) {
    for (let d = r.blocks.length - 1; d >= 1; d--) {
      const p = endedAt.get(r.blocks[d]!);
      if (p !== undefined) {
        parents[r.index] = p;
        break;
      }
    }
    const last = r.blocks[r.blocks.length - 1];
    if (last !== undefined && r.blocks.length >= 2) endedAt.set(last, r.index);
  }
  return parents;
}
