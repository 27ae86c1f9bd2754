/**
 * llm-d's endpoint picker (the EPP of llm-d-router, formerly the Gateway API Inference Extension's)
 * with the scheduling profile it ships by default, re-implemented from its source
 * (llm-d/llm-d-router, read for facts only):
 *  - `pkg/epp/config/loader/defaults.go`: one profile of `queue-scorer` weight 2,
 *    `kv-cache-utilization-scorer` weight 2, `prefix-cache-scorer` weight 3, and the
 *    `max-score-picker` added when no picker is named; a scorer named without a weight gets 1.
 *  - `.../scheduling/scorer/queuedepth/queue.go`: (maxQ − q) / (maxQ − minQ) over the candidates'
 *    engine-reported waiting queues; all equal → 1.
 *  - `.../scheduling/scorer/kvcacheutilization/kvcache_utilization.go`: 1 − KV-cache usage.
 *  - `.../scheduling/scorer/prefix/plugin.go`: matchBlocks / totalBlocks (its length term is off by
 *    default: `prefixLengthWeight` 0).
 *  - `.../requestcontrol/dataproducer/approximateprefix/{plugin,indexer}.go`: the approximate
 *    index. The prompt is cut into blocks of at least 64 tokens (`minBlockSizeTokens`; vLLM's 16
 *    is clamped up), at most 131072 tokens are hashed (`maxPrefixTokensToMatch`); a hash maps to
 *    the pods it was routed to, each pod keeps an LRU of as many hashes as the engine has GPU
 *    blocks (`autoTune`: vLLM's `num_gpu_blocks`, 16-token blocks); the chosen pod's hashes are
 *    added after each decision (`PreRequest`). The match walks the hashes in order, stops at the
 *    first that no pod holds, and credits every pod holding each hash on the way
 *    (`matchLongestPrefix`).
 *  - `.../scheduling/picker/maxscore`: the highest total wins; ties break at random.
 *  - Second row, `llm-d-session`: `.../scorer/sessionaffinity/session_affinity.go` added at the
 *    default weight 1: 1 for the pod named by the session token the last response returned
 *    (written at end of stream, echoed by the client), 0 elsewhere.
 * Engine metrics (queue, KV use) arrive at the same scrape cadence and age as kvgate's
 * (simulator.ts). Not modelled: the flow-control layer and saturation detector (admission
 * queueing in the EPP), and the token estimator (the simulator's token counts are used as is).
 */
import { Rng } from '../rng.js';
import type { SimRequest } from '../workload.js';
import { DEFAULT_FLEET, ENGINE_BLOCK_TOKENS } from '../cost-model.js';
import type { PolicyContext, RouteChoice, RouterPolicy, WorkerObservation } from './policy.js';

export interface LlmdParams {
  queueWeight: number;
  kvWeight: number;
  prefixWeight: number;
  /** The session-affinity scorer's weight; 0 leaves it out of the profile (the default profile). */
  sessionWeight: number;
  /** `minBlockSizeTokens`: the floor on the index's block size. */
  blockTokens: number;
  /** `maxPrefixTokensToMatch`. */
  maxPrefixTokens: number;
  /** vLLM's block size, whose `num_gpu_blocks` sizes each pod's LRU (`autoTune`). */
  engineBlockTokens: number;
}

export const LLMD_DEFAULTS: Readonly<LlmdParams> = Object.freeze({
  queueWeight: 2,
  kvWeight: 2,
  prefixWeight: 3,
  sessionWeight: 0,
  blockTokens: 64,
  maxPrefixTokens: 131_072,
  engineBlockTokens: ENGINE_BLOCK_TOKENS,
});

/** `DefaultScorerWeight`: what a scorer named in a profile without a weight gets. */
export const LLMD_SESSION_WEIGHT = 1;

/** The approximate prefix index: hash → pods it was routed to, with a per-pod LRU of hashes. */
export class ApproxPrefixIndex {
  private readonly hashToPods = new Map<number, Set<number>>();
  private readonly lru: Array<Map<number, true>>;

  constructor(
    pods: number,
    private readonly capacity: number,
  ) {
    this.lru = Array.from({ length: pods }, () => new Map());
  }

  add(hashes: readonly number[], pod: number): void {
    const lru = this.lru[pod]!;
    for (const h of hashes) {
      lru.delete(h);
      lru.set(h, true);
      let pods = this.hashToPods.get(h);
      if (!pods) this.hashToPods.set(h, (pods = new Set()));
      pods.add(pod);
      while (lru.size > this.capacity) {
        const old = lru.keys().next().value!;
        lru.delete(old);
        const set = this.hashToPods.get(old);
        set?.delete(pod);
        if (set && set.size === 0) this.hashToPods.delete(old);
      }
    }
  }

  /** Per pod, how many of the hashes it holds, walking until a hash no pod holds. */
  match(hashes: readonly number[], pods: number): number[] {
    const out = new Array<number>(pods).fill(0);
    for (const h of hashes) {
      const holders = this.hashToPods.get(h);
      if (!holders || holders.size === 0) break;
      for (const p of holders) out[p]!++;
    }
    return out;
  }

  size(pod: number): number {
    return this.lru[pod]!.size;
  }
}

/** The three default scorers and the session scorer, each in [0, 1], as the plugins compute them. */
export function queueScores(waiting: readonly number[]): number[] {
  const min = Math.min(...waiting);
  const max = Math.max(...waiting);
  return waiting.map((q) => (max === min ? 1 : (max - q) / (max - min)));
}

export function kvScores(kvUsage: readonly number[]): number[] {
  return kvUsage.map((k) => 1 - k);
}

export function prefixScores(matched: readonly number[], totalBlocks: number): number[] {
  return matched.map((m) => (totalBlocks > 0 ? m / totalBlocks : 0));
}

export class LlmdPolicy implements RouterPolicy {
  readonly name: string;
  readonly index: ApproxPrefixIndex;
  /** How many of the workload's blocks make one index block (≥ 1), and its tokens. */
  private readonly group: number;
  private readonly maxKeys: number;
  private metrics: WorkerObservation[] | undefined;
  /** Session → the pod its last finished response named (the echoed `x-session-token`). */
  readonly sessionToken = new Map<string, number>();
  private readonly rng: Rng;

  constructor(
    private readonly ctx: PolicyContext,
    private readonly params: Readonly<LlmdParams> = LLMD_DEFAULTS,
    name = 'llm-d',
  ) {
    this.name = name;
    // Index blocks are `params.blockTokens` long; a workload with finer blocks is grouped (its
    // chained id at the end of each group names the whole prefix up to there), a coarser one
    // (Mooncake's 512) counts each of its blocks as one key: matched / total is the same ratio.
    this.group = Math.max(1, Math.round(params.blockTokens / ctx.blockTokens));
    const keyTokens = this.group * ctx.blockTokens;
    this.maxKeys = Math.floor(params.maxPrefixTokens / keyTokens);
    const cacheTokens = ctx.cacheTokens ?? DEFAULT_FLEET.cacheTokens;
    // LRU entries = the engine's GPU blocks (autoTune), each entry one index block of ≥ 64 tokens;
    // a workload key of 512 tokens stands for 8 of them.
    const entries = Math.floor(cacheTokens / params.engineBlockTokens);
    this.index = new ApproxPrefixIndex(ctx.workers, Math.max(1, Math.floor(entries / Math.max(1, keyTokens / params.blockTokens))));
    this.rng = new Rng(ctx.seed ^ 0x6c6c6d64);
  }

  /** The request's index keys: one per index block, chained. */
  keys(req: SimRequest): number[] {
    const out: number[] = [];
    for (let i = this.group - 1; i < req.blocks.length && out.length < this.maxKeys; i += this.group) out.push(req.blocks[i]!);
    return out;
  }

  observe(workers: readonly WorkerObservation[]): void {
    this.metrics = workers.slice();
  }

  /** Each worker's weighted total, for tests and for the picker. */
  scores(req: SimRequest): number[] {
    const n = this.ctx.workers;
    const p = this.params;
    const keys = this.keys(req);
    const prefix = prefixScores(this.index.match(keys, n), keys.length);
    const total = prefix.map((s) => p.prefixWeight * s);
    if (this.metrics) {
      const q = queueScores(this.metrics.map((m) => m.waiting));
      const kv = kvScores(this.metrics.map((m) => m.kvUsage));
      for (let w = 0; w < n; w++) total[w]! += p.queueWeight * q[w]! + p.kvWeight * kv[w]!;
    }
    const pinned = req.sessionId === undefined ? undefined : this.sessionToken.get(req.sessionId);
    if (p.sessionWeight > 0 && pinned !== undefined) total[pinned]! += p.sessionWeight;
    return total;
  }

  route(req: SimRequest): RouteChoice {
    const s = this.scores(req);
    const best = Math.max(...s);
    const ties: number[] = [];
    s.forEach((v, w) => {
      if (v === best) ties.push(w);
    });
    const worker = ties.length === 1 ? ties[0]! : this.rng.pick(ties);
    this.index.add(this.keys(req), worker);
    return { worker };
  }

  completed(req: SimRequest, worker: number): void {
    if (req.sessionId !== undefined && this.params.sessionWeight > 0) this.sessionToken.set(req.sessionId, worker);
  }
}
