/**
 * SGLang's cache-aware router, re-implemented from its published description (SMG
 * `model_gateway/src/policies/cache_aware.rs`, formerly sgl-model-gateway / `sgl-router`; current
 * defaults from SMG `model_gateway/src/config/types.rs`):
 *  1. load = the router's own in-flight requests per worker. If (max − min) > balance_abs_threshold
 *     AND max > balance_rel_threshold × min, the fleet is imbalanced: take the least-loaded worker.
 *  2. Otherwise walk the router's approximate multi-tenant prefix tree to the deepest node that
 *     matches; match_rate = matched / input. Above cache_threshold, take that node's most recent
 *     tenant (not load-aware, as in SGLang); else the least-loaded worker.
 *  3. Insert the request's prefix under the chosen worker ("predict-on-route"; the router never
 *     learns of the engines' evictions). Every eviction_interval, a tenant over max_tree_size loses
 *     its least recently used leaves.
 * SGLang's HTTP router keeps a character tree; this one keeps the same tree at block granularity
 * (the chained hashes of the prompt text's blocks), which only rounds matches down to a block.
 */
import type { BlockId } from '../blocks.js';
import { CHARS_PER_TOKEN } from '../blocks.js';
import type { SimRequest } from '../workload.js';
import { InflightCounts, type PolicyContext, type RouteChoice, type RouterPolicy } from './policy.js';

export interface SglangParams {
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  evictionIntervalS: number;
  maxTreeChars: number;
}

export const SGLANG_DEFAULTS: Readonly<SglangParams> = Object.freeze({
  cacheThreshold: 0.3,
  balanceAbsThreshold: 64,
  balanceRelThreshold: 1.5,
  evictionIntervalS: 120,
  /** Per-tenant character budget: 2^26. */
  maxTreeChars: 67_108_864,
});

/** An approximate prefix tree: which workers this router has sent each prefix to, and when. */
export class TenantTree {
  /** Chained block id (a tree node: the prefix up to it) → tenant → last access time. */
  private readonly nodes = new Map<BlockId, Map<number, number>>();
  /** Per tenant, its nodes least recently used first (leaves before their parents). */
  private readonly lru: Array<Map<BlockId, true>>;

  constructor(tenants: number) {
    this.lru = Array.from({ length: tenants }, () => new Map());
  }

  size(tenant: number): number {
    return this.lru[tenant]!.size;
  }

  /** Deepest matching node (any tenant) and its most recently used tenant. */
  match(blocks: readonly BlockId[]): { depth: number; tenant: number | undefined } {
    let depth = 0;
    let node: Map<number, number> | undefined;
    for (const b of blocks) {
      const n = this.nodes.get(b);
      if (n === undefined || n.size === 0) break;
      node = n;
      depth++;
    }
    let tenant: number | undefined;
    let latest = -Infinity;
    if (node) for (const [t, at] of node) if (at > latest || (at === latest && t < tenant!)) [tenant, latest] = [t, at];
    return { depth, tenant };
  }

  insert(blocks: readonly BlockId[], tenant: number, now: number): void {
    const lru = this.lru[tenant]!;
    // Deepest first, so the root ends up most recent and leaves are evicted before parents.
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      let n = this.nodes.get(b);
      if (!n) this.nodes.set(b, (n = new Map()));
      n.set(tenant, now);
      lru.delete(b);
      lru.set(b, true);
    }
  }

  /** Drops each tenant's least recently used nodes until it holds at most `maxNodes`. */
  evict(maxNodes: number): void {
    for (const [tenant, lru] of this.lru.entries()) {
      while (lru.size > maxNodes) {
        const b = lru.keys().next().value!;
        lru.delete(b);
        const n = this.nodes.get(b);
        n?.delete(tenant);
        if (n && n.size === 0) this.nodes.delete(b);
      }
    }
  }
}

export class SglangCacheAwarePolicy implements RouterPolicy {
  readonly name = 'sglang-cache-aware';
  /** The router's own load view (public so tests can stage a scene). */
  readonly load: InflightCounts;
  readonly tree: TenantTree;
  private nextEvictionS: number;
  private readonly maxNodes: number;

  constructor(
    private readonly ctx: PolicyContext,
    private readonly params: Readonly<SglangParams> = SGLANG_DEFAULTS,
  ) {
    this.load = new InflightCounts(ctx.workers);
    this.tree = new TenantTree(ctx.workers);
    this.nextEvictionS = params.evictionIntervalS;
    this.maxNodes = Math.floor(params.maxTreeChars / (ctx.blockTokens * CHARS_PER_TOKEN));
  }

  route(req: SimRequest, now: number): RouteChoice {
    if (now >= this.nextEvictionS) {
      this.tree.evict(this.maxNodes);
      this.nextEvictionS = now + this.params.evictionIntervalS;
    }
    const loads = this.load.inflight;
    const min = Math.min(...loads);
    const max = Math.max(...loads);
    const imbalanced = max - min > this.params.balanceAbsThreshold && max > this.params.balanceRelThreshold * min;
    let worker: number;
    if (imbalanced) worker = this.load.least()!;
    else {
      const m = this.tree.match(req.blocks);
      const matchRate = (m.depth * this.ctx.blockTokens) / req.promptTokens;
      worker = matchRate > this.params.cacheThreshold && m.tenant !== undefined ? m.tenant : this.load.least()!;
    }
    this.tree.insert(req.blocks, worker, now);
    this.load.add(worker);
    return { worker };
  }

  completed(_req: SimRequest, worker: number): void {
    this.load.done(worker);
  }
}
