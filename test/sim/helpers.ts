/** Small hand-made workloads and a tiny fleet whose timings are easy to compute by hand. */
import type { CostModel, FleetOptions } from '../../src/sim/cost-model.js';
import type { RouteChoice, RouterPolicy } from '../../src/sim/policies/policy.js';
import { finishWorkload, type SimRequest, type Workload } from '../../src/sim/workload.js';

export interface Spec {
  at: number;
  prompt: number;
  out: number;
  blocks: number[];
  session?: string;
}

/** A workload of 100-token blocks; each request's text is its block ids written out. */
export function handWorkload(specs: Spec[], blockTokens = 100): Workload {
  return finishWorkload(
    'test',
    'hand-made',
    blockTokens,
    specs.map((s) => ({
      arrivalS: s.at,
      promptTokens: s.prompt,
      outputTokens: s.out,
      blocks: s.blocks,
      sessionId: s.session,
      text: () => s.blocks.map((b) => `block ${b} `.padEnd(blockTokens * 4, '.')).join('') + 'tail',
    })),
  );
}

/**
 * Round numbers: prefill 1000 tok/s with no overhead; a decode step of exactly 10 ms whatever the
 * batch (KV reads cost nothing: kvBytesPerToken 0, 1 byte of weights at 100 B/s).
 */
export const HAND_COST: CostModel = {
  kvBytesPerToken: 0,
  prefillTokensPerS: 1000,
  prefillOverheadS: 0,
  weightBytes: 1,
  hbmBytesPerS: 100,
  decodeEfficiency: 1,
  offloadBytesPerS: 1,
};

/** Two workers of 10 blocks; prefill and decode as independent servers unless a test says otherwise. */
export const HAND_FLEET: FleetOptions = {
  workers: 2,
  cacheTokens: 1000,
  offloadTokens: 0,
  maxBatch: 8,
  prefillChunkTokens: 0,
};

/** Routes request i to `workers[i]`. */
export class FixedPolicy implements RouterPolicy {
  readonly name = 'fixed';
  readonly firstTokens: Array<[number, number]> = [];
  readonly completions: Array<[number, number]> = [];

  constructor(private readonly workers: readonly number[]) {}

  route(req: SimRequest): RouteChoice {
    return { worker: this.workers[req.index]! };
  }

  firstToken(req: SimRequest, _worker: number, now: number): void {
    this.firstTokens.push([req.index, now]);
  }

  completed(req: SimRequest, _worker: number, now: number): void {
    this.completions.push([req.index, now]);
  }
}

export function near(actual: number | null, expected: number, eps = 1e-9): boolean {
  return actual !== null && Math.abs(actual - expected) <= eps;
}
