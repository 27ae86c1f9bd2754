/**
 * kvgate itself, run for real: every simulated request becomes the `RequestInfo` Envoy's ext_proc
 * stream would produce (POST /v1/chat/completions, the session header when the workload has one,
 * an OpenAI JSON body with the model and the prompt) and goes through `Gate.route()` with a
 * `MemoryStore`, exactly as in production. The lease is released at the request's first token,
 * which is when kvgate releases in production (`routing.release_on: response_headers`). Worker
 * KV pressure is pushed into the store as the 'pressured' state. Nothing of the policy is copied
 * here, so the simulator scores whatever the gate's policy is today.
 */
import { parseConfig } from '../../config/load.js';
import type { Config } from '../../config/schema.js';
import { Gate } from '../../gate/gate.js';
import { initHashing } from '../../request/hashing.js';
import type { RequestInfo } from '../../request/request.js';
import type { RouteOutcome } from '../../routing/types.js';
import { MemoryStore } from '../../state/memory-store.js';
import type { Lease } from '../../state/store.js';
import { createLogger } from '../../telemetry/logger.js';
import type { SimRequest } from '../workload.js';
import type { PolicyContext, RouteChoice, RouterPolicy } from './policy.js';

/** The model named in simulated bodies (the one the cost model describes). */
export const SIM_MODEL = 'meta-llama/Llama-3.1-8B-Instruct';

export function workerId(i: number): string {
  return `w${i}`;
}

/** The gate config a simulated fleet gets: its workers, the in-flight limit, defaults otherwise. */
export function simGateConfig(ctx: PolicyContext): Config {
  return parseConfig(
    {
      workers: Array.from({ length: ctx.workers }, (_, i) => ({ id: workerId(i), cluster: `sim_${workerId(i)}` })),
      limits: { max_inflight: ctx.maxInflight },
    },
    'simulator gate config',
  );
}

/** The request Envoy would hand kvgate for this simulated request. */
export function requestInfo(req: SimRequest, config: Config): RequestInfo {
  const headers = new Map<string, string>([['content-type', 'application/json']]);
  if (req.sessionId !== undefined) headers.set(config.keys.session_header, req.sessionId);
  const body = JSON.stringify({
    model: SIM_MODEL,
    messages: [{ role: 'user', content: req.text() }],
    max_tokens: req.outputTokens,
    stream: true,
  });
  return { method: 'POST', path: '/v1/chat/completions', headers, body: Buffer.from(body) };
}

export class KvgatePolicy implements RouterPolicy {
  readonly name = 'kvgate';
  private readonly leases = new Map<number, Lease>();
  private readonly index: ReadonlyMap<string, number>;
  /** How the gate decided, by outcome, for the report. */
  readonly outcomes = new Map<RouteOutcome | 'shed', number>();

  private constructor(readonly gate: Gate) {
    this.index = new Map(gate.currentConfig.workers.map((w, i) => [w.id, i]));
  }

  static async create(ctx: PolicyContext): Promise<KvgatePolicy> {
    await initHashing();
    return new KvgatePolicy(new Gate(simGateConfig(ctx), new MemoryStore(), createLogger('silent')));
  }

  async route(req: SimRequest): Promise<RouteChoice> {
    const res = await this.gate.route(requestInfo(req, this.gate.currentConfig));
    if (res.kind === 'reject') {
      this.count('shed');
      return { shed: res.error.code };
    }
    this.count(res.outcome);
    this.leases.set(req.index, res.lease);
    return { worker: this.index.get(res.worker)! };
  }

  async firstToken(req: SimRequest): Promise<void> {
    const lease = this.leases.get(req.index);
    if (!lease) return;
    this.leases.delete(req.index);
    await this.gate.release(lease);
  }

  workerPressure(worker: number, pressured: boolean): Promise<void> {
    return this.gate.store.setWorkerState(this.gate.pool, workerId(worker), pressured ? 'pressured' : 'healthy');
  }

  close(): Promise<void> {
    return this.gate.store.close();
  }

  private count(k: RouteOutcome | 'shed'): void {
    this.outcomes.set(k, (this.outcomes.get(k) ?? 0) + 1);
  }
}
