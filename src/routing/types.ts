/**
 * The vocabulary of routing decisions. Nothing here knows Envoy, gRPC or a store backend: workers
 * are named by their ids; the gate maps an id to what the proxy needs (an Envoy cluster, an address).
 */

/**
 * healthy: takes new and existing sessions.
 * pressured: keeps the sessions it holds, gets no new ones (KV or memory pressure, queue, heat);
 *   pressured by its queue alone, it still takes work when no worker takes it otherwise
 *   (overflow.ts).
 * draining: set by an operator; gets nothing, its sessions move.
 * down: unreachable or stale; gets nothing, its sessions move.
 */
export type WorkerState = 'healthy' | 'pressured' | 'draining' | 'down';
export const WORKER_STATES: readonly WorkerState[] = ['healthy', 'pressured', 'draining', 'down'];

import type { PolicyMode } from '../config/vocabulary.js';

/** One worker as a decision sees it. */
export interface WorkerView {
  id: string;
  state: WorkerState;
  /** Requests this fleet of gates has sent and not yet seen finish. */
  inflight: number;
  /** In-flight count at which the worker is saturated. */
  maxInflight: number;
  /** Leading blocks of this request's prompt the worker probably holds (prefix index). */
  prefixBlocks: number;
  /** KV-cache use in [0, 1] as last reported by the worker, when known. */
  kvUsage?: number;
  /**
   * Prompt blocks this gate has sent the worker that it must still compute (its leases' uncached
   * blocks, until their first token): the prefill queued ahead of a new request, in work rather
   * than requests. Absent: none, or not known.
   */
  pendingPrefill?: number;
  /** Requests queued in the engine as last reported, when known (a delayed view of load). */
  waiting?: number;
  /**
   * Requests the engine is running (prefilling or decoding) as last reported, when known. The
   * gate's own in-flight count ends at the first token, so this is the only view of decode work.
   */
  running?: number;
  /**
   * The engine's last scrape says it has the memory for more work (it reports KV use, or GPU
   * memory where configured, below pressure, and is not too hot), however long its queue. Only
   * set for workers with engine metrics; past its in-flight limit only such a worker takes work
   * (overflow.ts). A scrape with no memory figure gives false: unknown is not room.
   */
  engineRoom?: boolean;
  /**
   * For a worker pressured by KV use alone whose engine reports its KV capacity: the tokens of KV
   * it reported free, less the prefill this gate has sent it since (health.ts `kvRoomTokens`).
   * Past pressure, a one-off request that fits in it may still go there (overflow.ts `fitsOneOff`).
   */
  kvRoomTokens?: number;
  /**
   * LoRA adapters the worker reported (vLLM `vllm:lora_requests_info`): those of its running and
   * waiting requests, and how many one batch may hold. Absent when it reports none.
   */
  adapters?: { names: readonly string[]; max: number };
  /**
   * The worker's live sessions: those routed there within `scoring.sessions_window_s` whose prompt
   * then held at least `scoring.sessions_min_tokens`. Absent: none, or not counted (the sessions
   * term at weight 0).
   */
  liveSessions?: number;
}

/**
 * Weights of the score by scorer name (./scorers/; docs/DESIGN.md "Scoring"): the four the policy
 * has always had, and any other scorer's under its name (absent: weight 0).
 */
export interface ScoreWeights {
  prefix: number;
  load: number;
  kv: number;
  balance: number;
  readonly [scorer: string]: number | undefined;
}

export interface DecisionInput {
  /** Hash of the routing key, or undefined for requests without one (also the tie-break seed). */
  keyHash: string | undefined;
  /**
   * The tie-break seed of a request without a key, drawn by the gate per request so that such
   * requests spread over tied workers (absent: '', one worker wins every tie). Unused with a key.
   */
  tieSeed?: string;
  /** True when the key is a session id (only sessions are sticky). */
  session: boolean;
  /** The worker the session is affine to, if any. */
  affinity: string | undefined;
  /** The session's requests in flight on its affine worker. */
  keyInflight: number;
  /** Blocks in this request's prompt chain (0: no prompt to match). */
  totalBlocks: number;
  /**
   * The prompt's size in blocks, past the hashing cap too (estimated from the body there); absent:
   * `totalBlocks`. The unit the backlog scorer measures queues in.
   */
  promptBlocks?: number;
  /**
   * The prompt's size in tokens, estimated from its characters (config `prefix.chars_per_token`);
   * absent: unknown. What a one-off needs of a pressured worker's free KV.
   */
  promptTokens?: number;
  workers: readonly WorkerView[];
  mode: PolicyMode;
  weights: ScoreWeights;
  /** Work (running + queued) below which no worker counts as ahead of its fair share. */
  balanceFloor: number;
  /** Live sessions below which no worker counts as ahead of its share of them (the sessions term); absent: 1. */
  sessionsFloor?: number;
  /**
   * The prompt tokens below which a session is not counted among its worker's live sessions
   * (`scoring.sessions_min_tokens`); a session placed with a shorter prompt has no sessions term
   * either. Absent: 0.
   */
  sessionsMinTokens?: number;
  /** A session with this many requests in flight on its worker spills to scoring. */
  maxInflightPerSession: number;
  /**
   * Past its in-flight limit a worker whose engine reports room still takes work, up to this many
   * times the limit (overflow.ts); 0 or 1: the limit is hard, as for a worker without metrics.
   */
  overflowFactor?: number;
  /**
   * The share of each worker's limit this request's class may fill (./filters/class-share.ts); absent or 1
   * for the top class.
   */
  classShare?: number;
  /**
   * The LoRA adapter the request names, and whether workers with no room for it are filtered out
   * (absent: they are; `scoring.adapter_filter`) (./filters/adapter.ts). The weight of having it
   * loaded is `weights.adapter`, as every scorer's.
   */
  adapter?: { name: string; filter?: boolean };
}

export type RouteOutcome =
  /** The session's worker took it. */
  | 'affinity_hit'
  /** A session with no worker yet got the best-scoring one. */
  | 'new'
  /** The session's worker could not take it; it moved. */
  | 'migrated'
  /** No session (or a mode that ignores sessions): placed on a worker holding part of its prompt. */
  | 'prefix_hit'
  /** No session and no prefix match: placed by load alone. */
  | 'unkeyed';

/** Why each candidate scored what it did, for traces, logs and the debug endpoint. */
export interface CandidateExplanation {
  worker: string;
  state: WorkerState;
  inflight: number;
  maxInflight: number;
  prefixBlocks: number;
  kvUsage?: number;
  /** The in-flight bound this request's class is held to on this worker, when below its limit. */
  classLimit?: number;
  /** What the worker offers the request's LoRA adapter (./filters/adapter.ts), for adapter requests. */
  adapter?: 'has' | 'slot' | 'full' | 'unknown';
  /** Running plus queued requests as the engine last reported them (the balance term's input), when known. */
  work?: number;
  /** For a worker pressured by KV alone: the free KV in tokens a one-off had to fit in (WorkerView `kvRoomTokens`). */
  kvRoomTokens?: number;
  /** Its live sessions of long prompts (the sessions term's input), where the gate counts them. */
  liveSessions?: number;
  /** Undefined for workers that could not take the request. */
  score?: number;
}

export interface Explanation {
  mode: PolicyMode;
  totalBlocks: number;
  /** How the choice was made. */
  rule: 'sticky' | 'scored' | 'overflow' | 'shed';
  /** The session had too many requests in flight on its worker and spilled to scoring. */
  spilled: boolean;
  candidates: CandidateExplanation[];
}

/**
 * What the decision relied on. The store checks these atomically when it commits, so a decision
 * made from a slightly stale view is either still right or re-made from fresh state.
 */
export interface Preconditions {
  /** The affinity the decision saw (undefined: none). */
  affinity: string | undefined;
  /** Workers that must still be below these in-flight counts. */
  below: ReadonlyArray<{ worker: string; limit: number }>;
  /** Workers that must still be at or above these counts (the reason a session migrated). */
  atOrAbove: ReadonlyArray<{ worker: string; limit: number }>;
  /** Workers whose state must still be one of these (an operator may have drained it meanwhile). */
  states: ReadonlyArray<{ worker: string; in: readonly WorkerState[] }>;
  /**
   * The deepest prefix match the decision saw among the workers it weighed (`over`: the eligible
   * ones of the running config, in the order it saw them). A store that knows of a deeper match on
   * one of them (another replica placed this prefix meanwhile) rejects the commit so the decision is
   * re-made. Holders outside `over` (outside the request's endpoint subset, or gone from the config)
   * are not checked: the decision could not have chosen them, so they cannot make it wrong.
   */
  prefix?: { atMost: number; over: readonly string[] };
}

export type Decision =
  | {
      kind: 'route';
      worker: string;
      outcome: RouteOutcome;
      /** The worker a migrated session left. */
      from?: string;
      preconditions: Preconditions;
      explanation: Explanation;
    }
  | {
      kind: 'shed';
      /**
       * overloaded: every eligible worker that is up is at its limit, or pressured and not taking
       * this work; no_healthy_workers: none eligible at all.
       */
      reason: 'overloaded' | 'no_healthy_workers';
      preconditions: Preconditions;
      explanation: Explanation;
    };
