/**
 * Consistent hashing on the session id, as vLLM production-stack's `session` router does
 * (`src/vllm_router/routers/routing_logic.py`): a hash ring over the workers keyed by the session. Ketama-style,
 * 160 points per worker (uhashring's default of 40 vnodes × 4 replicas). A request without a
 * session goes where the router's own load is lowest (the stack's "lowest QPS" fallback).
 */
import { xxh } from '../../util/xxhash.js';
import type { SimRequest } from '../workload.js';
import { InflightCounts, type PolicyContext, type RouteChoice, type RouterPolicy } from './policy.js';

const POINTS_PER_WORKER = 160;

export class ConsistentHashPolicy implements RouterPolicy {
  readonly name = 'consistent-hash';
  private readonly ring: Array<{ point: number; worker: number }> = [];
  /** The router's own load view (public so tests can stage a scene). */
  readonly load: InflightCounts;

  constructor(ctx: PolicyContext) {
    this.load = new InflightCounts(ctx.workers);
    for (let w = 0; w < ctx.workers; w++) {
      for (let i = 0; i < POINTS_PER_WORKER; i++) this.ring.push({ point: xxh().h32(`worker-${w}-${i}`, 0), worker: w });
    }
    this.ring.sort((a, b) => a.point - b.point || a.worker - b.worker);
  }

  /** The ring owner of a key: the first point clockwise from its hash. */
  owner(key: string): number {
    const h = xxh().h32(key, 0);
    let lo = 0;
    let hi = this.ring.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.ring[mid]!.point < h) lo = mid + 1;
      else hi = mid;
    }
    return this.ring[lo === this.ring.length ? 0 : lo]!.worker;
  }

  route(req: SimRequest): RouteChoice {
    const worker = req.sessionId !== undefined ? this.owner(req.sessionId) : this.load.least()!;
    this.load.add(worker);
    return { worker };
  }

  completed(_req: SimRequest, worker: number): void {
    this.load.done(worker);
  }
}
