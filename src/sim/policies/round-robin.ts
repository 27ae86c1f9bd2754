/** Round robin: the stateless default of most balancers and of data-parallel engines (SGLang DP, vLLM DP). */
import type { PolicyContext, RouteChoice, RouterPolicy } from './policy.js';

export class RoundRobinPolicy implements RouterPolicy {
  readonly name = 'round-robin';
  private next = 0;

  constructor(private readonly ctx: PolicyContext) {}

  route(): RouteChoice {
    const worker = this.next;
    this.next = (this.next + 1) % this.ctx.workers;
    return { worker };
  }
}
