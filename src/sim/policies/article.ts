/**
 * The article's algorithm (a web article on stateful LLM load balancing with KV-cache affinity;
 * its example `StatefulLLMLoadBalancer.assign_worker`): a session → worker map; stay on the session's worker
 * while its load is under a fixed threshold of 10; otherwise (or for a new session) take the least
 * loaded worker under the threshold and re-pin the session there; if every worker is at the
 * threshold, refuse ("System Capacity Full"), which the simulator counts as a shed. The article
 * keys on the session id only, so a request without one just gets the least-loaded fallback.
 * Load is the router's own count of requests in flight on the worker.
 */
import type { SimRequest } from '../workload.js';
import { InflightCounts, type PolicyContext, type RouteChoice, type RouterPolicy } from './policy.js';

/** "Maximum concurrent sessions per worker before migration" in the article's code. */
export const ARTICLE_THRESHOLD = 10;

export class ArticlePolicy implements RouterPolicy {
  readonly name = 'article';
  readonly affinity = new Map<string, number>();
  /** The router's own load view (public so tests can stage a scene). */
  readonly load: InflightCounts;

  constructor(
    ctx: PolicyContext,
    private readonly threshold = ARTICLE_THRESHOLD,
  ) {
    this.load = new InflightCounts(ctx.workers);
  }

  route(req: SimRequest): RouteChoice {
    const session = req.sessionId;
    const current = session === undefined ? undefined : this.affinity.get(session);
    if (current !== undefined && this.load.inflight[current]! < this.threshold) return this.take(current);
    // Python's min() over the load dict: lowest load, first in worker order on ties.
    let best: number | undefined;
    for (let w = 0; w < this.load.inflight.length; w++) {
      const l = this.load.inflight[w]!;
      if (l < this.threshold && (best === undefined || l < this.load.inflight[best]!)) best = w;
    }
    if (best === undefined) return { shed: 'capacity_full' };
    if (session !== undefined) this.affinity.set(session, best);
    return this.take(best);
  }

  completed(_req: SimRequest, worker: number): void {
    this.load.done(worker);
  }

  private take(worker: number): RouteChoice {
    this.load.add(worker);
    return { worker };
  }
}
