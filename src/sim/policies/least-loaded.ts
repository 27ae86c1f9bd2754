/** Least loaded (least connections): the worker with the fewest requests this router has in flight. */
import { InflightCounts, type PolicyContext, type RouteChoice, type RouterPolicy } from './policy.js';
import type { SimRequest } from '../workload.js';

export class LeastLoadedPolicy implements RouterPolicy {
  readonly name = 'least-loaded';
  /** The router's own load view (public so tests can stage a scene). */
  readonly load: InflightCounts;

  constructor(ctx: PolicyContext) {
    this.load = new InflightCounts(ctx.workers);
  }

  route(): RouteChoice {
    const worker = this.load.least()!;
    this.load.add(worker);
    return { worker };
  }

  completed(_req: SimRequest, worker: number): void {
    this.load.done(worker);
  }
}
