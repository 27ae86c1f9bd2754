/**
 * NVIDIA Dynamo's KV router, re-implemented from its published description (ai-dynamo/dynamo
 * `docs/components/router/*`, `lib/kv-router/src/scheduling/` `DefaultWorkerSelector`), in the
 * mode a router without engine KV events runs (`--no-router-kv-events`):
 *  - an approximate indexer: each routed request's blocks are recorded under its worker for
 *    `router_ttl_secs` = 120 s; past `router_max_tree_size` = 2^20 blocks the oldest go, down to
 *    `router_prune_target_ratio` = 0.8 of it;
 *  - router-local load: active blocks per worker (added at routing, freed at completion; shared
 *    blocks counted once) and active prefill tokens (added at routing, cleared at the first token);
 *  - cost(w) = overlap_score_weight × prefill_blocks(w) + decode_blocks(w), lowest wins, with
 *    prefill_blocks = (w's active prefill tokens + this request's uncached tokens on w) / block size
 *    and decode_blocks = w's active blocks + this request's blocks not already active there;
 *  - temperature 0: argmin; ties go to a (seeded) uniformly random pick among the cheapest
 *    (`minimum_cost_index` in `lib/kv-router/src/scheduling/selector/default.rs`: reservoir
 *    sampling over equal costs, no other tie-break);
 *  - no request rejection: Dynamo's busy thresholds (`--active-decode-blocks-threshold` and the
 *    others) are each off until set (Dynamo docs, user-guides/fault-tolerance/request-rejection,
 *    v1.3.0: "Each busy threshold is disabled by default"), so as shipped it never refuses a
 *    request and reads no engine metric: its load view is router-local (active blocks and prefill
 *    tokens, above). `busyKvThreshold` turns the decode-blocks threshold on (0.85 is the docs'
 *    example): a worker whose published KV use passes it is busy and gets no new request, and when
 *    every worker is busy the request is refused. Only then does the policy read engine metrics,
 *    at the same scrape cadence and age as every other policy (simulator.ts).
 */
import type { BlockId } from '../blocks.js';
import { Rng } from '../rng.js';
import type { SimRequest } from '../workload.js';
import type { PolicyContext, RouteChoice, RouterPolicy, WorkerObservation } from './policy.js';

export interface DynamoParams {
  overlapScoreWeight: number;
  ttlS: number;
  maxTreeBlocks: number;
  pruneTargetRatio: number;
  /** `--active-decode-blocks-threshold`: KV blocks in use over total past which a worker is busy; undefined: off (Dynamo's default). */
  busyKvThreshold: number | undefined;
}

export const DYNAMO_DEFAULTS: Readonly<DynamoParams> = Object.freeze({
  overlapScoreWeight: 1.0,
  ttlS: 120,
  maxTreeBlocks: 1_048_576,
  pruneTargetRatio: 0.8,
  busyKvThreshold: undefined,
});

/** Per worker, the blocks routed there and when each expires; insertion order is expiry order. */
export class ApproxKvIndexer {
  private readonly byWorker: Array<Map<BlockId, number>>;
  private total = 0;

  constructor(
    workers: number,
    private readonly ttlS: number,
    private readonly maxBlocks: number,
    private readonly pruneRatio: number,
  ) {
    this.byWorker = Array.from({ length: workers }, () => new Map());
  }

  expire(now: number): void {
    for (const m of this.byWorker) {
      for (const [b, until] of m) {
        if (until > now) break;
        m.delete(b);
        this.total--;
      }
    }
  }

  /** Leading blocks of `blocks` recorded (and unexpired) under `worker`. */
  overlap(blocks: readonly BlockId[], worker: number): number {
    const m = this.byWorker[worker]!;
    let n = 0;
    while (n < blocks.length && m.has(blocks[n]!)) n++;
    return n;
  }

  insert(blocks: readonly BlockId[], worker: number, now: number): void {
    const m = this.byWorker[worker]!;
    for (const b of blocks) {
      if (!m.delete(b)) this.total++;
      m.set(b, now + this.ttlS);
    }
    if (this.total > this.maxBlocks) this.prune(Math.floor(this.maxBlocks * this.pruneRatio));
  }

  private prune(target: number): void {
    while (this.total > target) {
      let oldest: Map<BlockId, number> | undefined;
      let oldestAt = Infinity;
      for (const m of this.byWorker) {
        const first = m.values().next();
        if (!first.done && first.value < oldestAt) [oldest, oldestAt] = [m, first.value];
      }
      if (!oldest) return;
      oldest.delete(oldest.keys().next().value!);
      this.total--;
    }
  }
}

interface Active {
  worker: number;
  prefillTokens: number;
  partialBlocks: number;
}

export class DynamoCostPolicy implements RouterPolicy {
  readonly name = 'dynamo-cost';
  private readonly index: ApproxKvIndexer;
  private readonly activeBlocks: Array<Map<BlockId, number>>;
  private readonly activePartial: number[];
  private readonly activePrefill: number[];
  private readonly active = new Map<number, Active>();
  private readonly rng: Rng;
  /** Workers whose last published KV use is past the busy threshold (never, with none set). */
  private busy: boolean[];
  /**
   * Engine metrics, read only with a busy threshold set: as shipped Dynamo's router reads none in
   * this mode, so a policy without one must not get them (the simulator hands metrics to a policy
   * that has this method).
   */
  readonly observe?: (workers: readonly WorkerObservation[]) => void;

  constructor(
    private readonly ctx: PolicyContext,
    private readonly params: Readonly<DynamoParams> = DYNAMO_DEFAULTS,
  ) {
    this.index = new ApproxKvIndexer(ctx.workers, params.ttlS, params.maxTreeBlocks, params.pruneTargetRatio);
    this.activeBlocks = Array.from({ length: ctx.workers }, () => new Map());
    this.activePartial = new Array<number>(ctx.workers).fill(0);
    this.activePrefill = new Array<number>(ctx.workers).fill(0);
    this.rng = new Rng(ctx.seed ^ 0x64796e);
    this.busy = new Array<boolean>(ctx.workers).fill(false);
    const t = params.busyKvThreshold;
    if (t !== undefined) this.observe = (workers) => (this.busy = workers.map((w) => w.kvUsage > t));
  }

  /** Each worker's cost for this request, as the selector computes it. */
  costs(req: SimRequest): Array<{ worker: number; cost: number; uncached: number }> {
    const bs = this.ctx.blockTokens;
    const partial = req.promptTokens > req.blocks.length * bs ? 1 : 0;
    const out = [];
    for (let w = 0; w < this.ctx.workers; w++) {
      const uncached = Math.max(0, req.promptTokens - this.index.overlap(req.blocks, w) * bs);
      const active = this.activeBlocks[w]!;
      let fresh = partial;
      for (const b of req.blocks) if (!active.has(b)) fresh++;
      const prefillBlocks = (this.activePrefill[w]! + uncached) / bs;
      const decodeBlocks = active.size + this.activePartial[w]! + fresh;
      out.push({ worker: w, cost: this.params.overlapScoreWeight * prefillBlocks + decodeBlocks, uncached });
    }
    return out;
  }

  route(req: SimRequest, now: number): RouteChoice {
    this.index.expire(now);
    const costs = this.costs(req).filter((c) => !this.busy[c.worker]);
    if (costs.length === 0) return { shed: 'all_workers_busy' };
    const best = Math.min(...costs.map((c) => c.cost));
    const ties = costs.filter((c) => c.cost === best);
    const pick = ties.length === 1 ? ties[0]! : this.rng.pick(ties);
    const w = pick.worker;

    const active = this.activeBlocks[w]!;
    for (const b of req.blocks) active.set(b, (active.get(b) ?? 0) + 1);
    const partialBlocks = req.promptTokens > req.blocks.length * this.ctx.blockTokens ? 1 : 0;
    this.activePartial[w]! += partialBlocks;
    this.activePrefill[w]! += pick.uncached;
    this.active.set(req.index, { worker: w, prefillTokens: pick.uncached, partialBlocks });
    this.index.insert(req.blocks, w, now);
    return { worker: w };
  }

  firstToken(req: SimRequest): void {
    const a = this.active.get(req.index);
    if (!a) return;
    this.activePrefill[a.worker]! -= a.prefillTokens;
    a.prefillTokens = 0;
  }

  completed(req: SimRequest): void {
    const a = this.active.get(req.index);
    if (!a) return;
    this.active.delete(req.index);
    this.activePrefill[a.worker]! -= a.prefillTokens;
    this.activePartial[a.worker]! -= a.partialBlocks;
    const active = this.activeBlocks[a.worker]!;
    for (const b of req.blocks) {
      const n = active.get(b)!;
      if (n <= 1) active.delete(b);
      else active.set(b, n - 1);
    }
  }
}
