/**
 * What a routing policy is to the simulator. A policy sees only what a router in front of the
 * fleet could see: the requests it routed, when their first token and their end came back, and
 * whatever state it keeps itself (in-flight counts, its own approximate prefix tree). Policies
 * whose real system reads engine metrics (kvgate; Dynamo's busy detection; llm-d's queue and
 * KV-utilisation scorers) implement `observe` and get them the way a real router does: scraped
 * at an interval and delivered late (simulator.ts `SignalCadence`), the same for all of them.
 */
import type { SimRequest } from '../workload.js';

export type RouteChoice = { worker: number } | { shed: string };

export interface WorkerObservation {
  running: number;
  waiting: number;
  /** Pinned KV blocks over capacity, as vLLM's kv_cache_usage_perc counts them. */
  kvUsage: number;
  /** Seconds since this figure was scraped (0 when handed over directly, as in unit tests). */
  ageS?: number;
  /** vLLM's `vllm:lora_requests_info`, on a fleet with adapters only (lora-slots.ts). */
  lora?: { running: string[]; waiting: string[]; maxLora: number };
}

export interface RouterPolicy {
  readonly name: string;
  route(req: SimRequest, nowS: number): RouteChoice | Promise<RouteChoice>;
  /** The response's first token (its headers) came back. */
  firstToken?(req: SimRequest, worker: number, nowS: number): void | Promise<void>;
  /** The response ended. */
  completed?(req: SimRequest, worker: number, nowS: number): void | Promise<void>;
  /**
   * What each worker's metrics endpoint said at its last scrape (running, queued, KV use) and how
   * old that is, delivered every read interval to policies that read model-server metrics, as
   * kvgate's collector does (simulator.ts `SignalCadence`).
   */
  observe?(workers: readonly WorkerObservation[], nowS: number): void | Promise<void>;
  /**
   * For a router that moves sessions off a worker on its own (kvgate's preemptive migration): calls
   * `listener` for each move, as the offload event a worker-side agent reads. The simulator is that
   * agent: it takes the session's KV out of the old worker's GPU memory.
   */
  onSessionMoved?(listener: (move: SessionMove) => void): void;
  close?(): Promise<void>;
}

/** A session a router moved between workers by itself (not by routing one of its requests). */
export interface SessionMove {
  /** The workload's session id. */
  sessionId: string;
  from: number;
  to: number;
}

export interface PolicyContext {
  workers: number;
  /** Tokens per block of the workload's block ids. */
  blockTokens: number;
  seed: number;
  /** kvgate's per-worker in-flight limit (config `limits.max_inflight`). */
  maxInflight: number;
  /** Each worker's KV capacity in tokens, which engines publish (llm-d sizes its index by it); default 400k. */
  cacheTokens?: number;
  /**
   * A kvgate config (parsed YAML, as `kvgate serve --config` takes) for the simulated gate: its
   * routing, thresholds and signals apply; the simulator sets the workers and `limits.max_inflight`.
   */
  gateConfig?: Record<string, unknown>;
}

/**
 * A router's own count of requests it sent to each worker and has not seen finish (the load
 * signal SGLang's router and plain least-connections balancers use), plus how many it ever sent.
 */
export class InflightCounts {
  readonly inflight: number[];
  readonly routed: number[];

  constructor(workers: number) {
    this.inflight = new Array<number>(workers).fill(0);
    this.routed = new Array<number>(workers).fill(0);
  }

  add(w: number): void {
    this.inflight[w]!++;
    this.routed[w]!++;
  }

  done(w: number): void {
    this.inflight[w]!--;
  }

  /** Lowest in-flight count; ties go to the fewer routed so far, then the lower index (SGLang's tie-break). */
  least(candidates?: readonly number[]): number | undefined {
    let best: number | undefined;
    for (const w of candidates ?? this.inflight.keys()) {
      if (
        best === undefined ||
        this.inflight[w]! < this.inflight[best]! ||
        (this.inflight[w] === this.inflight[best] && this.routed[w]! < this.routed[best]!)
      )
        best = w;
    }
    return best;
  }
}
