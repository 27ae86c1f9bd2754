/**
 * One policy over one workload on one simulated fleet: arrivals are routed by the policy, served
 * by the workers, and every request's timeline is recorded for metrics.ts.
 */
import type { CostModel, FleetOptions } from './cost-model.js';
import { DEFAULTS } from '../config/defaults.js';
import { EventLoop } from './event-loop.js';
import type { LoraOptions } from './lora-slots.js';
import type { RouterPolicy } from './policies/policy.js';
import { SimWorker, type Job, type WorkerHooks } from './worker.js';
import type { SimRequest, Workload } from './workload.js';

export interface SimOptions {
  fleet: FleetOptions;
  cost: CostModel;
  /** Seconds between load samples (for "load over time"); default: 1/120 of the arrival span. */
  sampleIntervalS?: number;
  /** Called after each routed (or shed) request with how many have been. */
  onProgress?: (routed: number) => void;
  /** How engine metrics reach policies that read them; default: kvgate's production cadence. */
  signals?: SignalCadence;
  /**
   * LoRA adapters: each worker's slots and load cost, and each request's adapter (lora-slots.ts).
   * Absent: no request names an adapter and the workers are exactly as without this option.
   */
  lora?: LoraOptions;
}

/**
 * How model-server metrics reach a router, in simulated milliseconds. In production kvgate's
 * collector (src/signals/collector.ts) scrapes each worker every `signals.interval_ms` and its
 * read loop hands the gate the latest scrape of every worker every min(250, max(20, 2 × interval))
 * ms, aged by when the scrape was taken. The simulator does the same for every policy that reads
 * engine metrics (kvgate, dynamo-cost, llm-d), so all of them decide on data of the same age.
 */
export interface SignalCadence {
  scrapeIntervalMs: number;
  readIntervalMs: number;
}

/** kvgate's defaults (src/config/defaults.ts `scrapeIntervalMs`) and the collector's read cadence. */
export function defaultSignalCadence(scrapeIntervalMs: number = DEFAULTS.scrapeIntervalMs): SignalCadence {
  return { scrapeIntervalMs, readIntervalMs: Math.max(20, Math.min(250, scrapeIntervalMs * 2)) };
}

export interface RequestOutcome {
  /** The worker it ran on, or -1 if the policy shed it. */
  worker: number;
  shedReason: string | undefined;
  arrivalS: number;
  firstTokenS: number;
  finishS: number;
  cachedTokens: number;
  offloadTokens: number;
  computedTokens: number;
}

export interface LoadSample {
  t: number;
  worker: number;
  /** Mean requests on the worker (waiting, prefilling, decoding) over the interval ending at t. */
  outstanding: number;
  /** Share of its KV blocks pinned by running requests. */
  pinned: number;
}

export interface PolicyRun {
  policy: string;
  outcomes: RequestOutcome[];
  /** Per worker: prompt tokens computed + tokens generated. */
  workerWork: number[];
  workerEvictions: number[];
  load: LoadSample[];
  /** Wall-clock seconds the run took (includes the policy's own cost, e.g. kvgate's hashing). */
  wallS: number;
  /** Per worker, with adapters only: admissions that found their adapter resident, loads, evictions. */
  lora?: { hits: number[]; loads: number[]; evictions: number[] };
  /**
   * Sessions the router moved by itself (kvgate's preemptive migration), in order: when, which,
   * where, and how many of the session's KV blocks left the old worker's GPU memory.
   */
  sessionMoves: SessionMoveRecord[];
}

export interface SessionMoveRecord {
  t: number;
  sessionId: string;
  from: number;
  to: number;
  offloadedBlocks: number;
}

export async function simulate(workload: Workload, policy: RouterPolicy, opts: SimOptions): Promise<PolicyRun> {
  const started = performance.now();
  const reqs = workload.requests;
  const loop = new EventLoop();
  const outcomes: RequestOutcome[] = reqs.map((r) => ({
    worker: -1,
    shedReason: undefined,
    arrivalS: r.arrivalS,
    firstTokenS: NaN,
    finishS: NaN,
    cachedTokens: 0,
    offloadTokens: 0,
    computedTokens: 0,
  }));
  let settled = 0; // finished or shed

  const hooks: WorkerHooks = {
    firstToken: (job: Job) => {
      const o = outcomes[job.req.index]!;
      o.firstTokenS = job.firstTokenS;
      o.cachedTokens = job.cachedTokens;
      o.offloadTokens = job.offloadTokens;
      o.computedTokens = job.computedTokens;
      return policy.firstToken?.(job.req, job.worker, loop.now);
    },
    finished: (job: Job) => {
      outcomes[job.req.index]!.finishS = job.finishS;
      settled++;
      return policy.completed?.(job.req, job.worker, loop.now);
    },
  };
  const workers = Array.from(
    { length: opts.fleet.workers },
    (_, i) => new SimWorker(i, opts.fleet, opts.cost, workload.blockTokens, loop, hooks, opts.lora),
  );

  // The worker-side agent of kvgate's offload events: a session the router moved leaves the old
  // worker's GPU memory. Its KV is the blocks of its last request there that no other session's
  // prompt contains (a shared system prompt stays: other sessions use it), less any block a
  // running request pins. The new worker gets nothing: its next turn recomputes what that worker
  // does not already hold.
  const sessionMoves: SessionMoveRecord[] = [];
  const lastRouted = new Map<string, { worker: number; req: SimRequest }>();
  if (policy.onSessionMoved) {
    const own = sessionOwnedBlocks(workload);
    policy.onSessionMoved((m) => {
      const last = lastRouted.get(m.sessionId);
      const blocks = last && last.worker === m.from ? last.req.blocks.filter((b) => own(b, m.sessionId)) : [];
      sessionMoves.push({ t: loop.now, sessionId: m.sessionId, from: m.from, to: m.to, offloadedBlocks: workers[m.from]!.offload(blocks) });
    });
  }

  let next = 0;
  const arrive = async (): Promise<void> => {
    const req = reqs[next++]!;
    if (next < reqs.length) loop.at(reqs[next]!.arrivalS, arrive);
    const pending = policy.route(req, loop.now);
    const choice = pending instanceof Promise ? await pending : pending;
    const o = outcomes[req.index]!;
    if ('shed' in choice) {
      o.shedReason = choice.shed;
      settled++;
    } else {
      if (!Number.isInteger(choice.worker) || choice.worker < 0 || choice.worker >= workers.length) {
        throw new Error(`policy ${policy.name} chose worker ${choice.worker} of ${workers.length}`);
      }
      o.worker = choice.worker;
      if (req.sessionId !== undefined) lastRouted.set(req.sessionId, { worker: choice.worker, req });
      workers[choice.worker]!.submit(req);
    }
    opts.onProgress?.(next);
  };
  if (reqs.length > 0) loop.at(reqs[0]!.arrivalS, arrive);

  const load: LoadSample[] = [];
  const span = reqs.length > 0 ? reqs[reqs.length - 1]!.arrivalS : 0;
  const every = opts.sampleIntervalS ?? Math.max(span / 120, 0.5);
  const lastIntegral = new Array<number>(workers.length).fill(0);
  let lastSampleAt = 0;
  const sample = (): void => {
    const dt = loop.now - lastSampleAt;
    for (const w of workers) {
      const integral = w.loadIntegral(loop.now);
      load.push({
        t: loop.now,
        worker: w.id,
        outstanding: dt > 0 ? (integral - lastIntegral[w.id]!) / dt : w.outstanding,
        pinned: w.cache.pinnedBlocks / w.cache.capacityBlocks,
      });
      lastIntegral[w.id] = integral;
    }
    lastSampleAt = loop.now;
    if (settled < reqs.length) loop.at(loop.now + every, sample);
  };
  loop.at(every, sample);

  // Engine metrics, only for policies that read them: each worker is scraped every scrape
  // interval (the snapshot is what its /metrics says at that instant), and every read interval
  // the policy gets the latest scrape of every worker with its age, as kvgate's collector hands
  // them to the gate. Nothing reaches a policy between reads.
  if (policy.observe) {
    const cadence = opts.signals ?? defaultSignalCadence();
    const scrapeS = cadence.scrapeIntervalMs / 1000;
    const readS = cadence.readIntervalMs / 1000;
    let latest: { t: number; obs: ReturnType<SimWorker['observe']>[] } = { t: 0, obs: workers.map((w) => w.observe()) };
    // Times are k × interval (not sums, which drift); a read due at the instant of a scrape may
    // run before it, as in production where the two loops are not synchronised.
    let scrapes = 0;
    let reads = 0;
    const scrape = (): void => {
      latest = { t: loop.now, obs: workers.map((w) => w.observe()) };
      if (settled < reqs.length) loop.at(++scrapes * scrapeS, scrape);
    };
    // A read may start work in the router (kvgate's migration rounds): the loop settles it before
    // simulated time moves on, as a round against an in-process store takes no time in production.
    const read = (): void | Promise<void> => {
      const ageS = Math.max(0, loop.now - latest.t);
      if (settled < reqs.length) loop.at(++reads * readS, read);
      return policy.observe!(latest.obs.map((o) => ({ ...o, ageS })), loop.now);
    };
    loop.at(0, scrape);
    loop.at(0, read);
  }

  await loop.run();
  if (settled !== reqs.length) throw new Error(`simulation ended with ${reqs.length - settled} requests unfinished`);
  return {
    policy: policy.name,
    outcomes,
    workerWork: workers.map((w) => w.workTokens),
    workerEvictions: workers.map((w) => w.cache.evictions),
    load,
    sessionMoves,
    wallS: (performance.now() - started) / 1000,
    ...(opts.lora
      ? { lora: { hits: workers.map((w) => w.lora!.hits), loads: workers.map((w) => w.lora!.loads), evictions: workers.map((w) => w.lora!.evictions) } }
      : {}),
  };
}

/**
 * Whether a block belongs to one session alone: it appears in no other session's prompt and in no
 * prompt without a session. Block ids are dense (workload.ts interns them), so one array does.
 */
export function sessionOwnedBlocks(workload: Workload): (block: number, sessionId: string) => boolean {
  const SHARED = -2;
  const ids = new Map<string, number>();
  // -1: unseen; >= 0: the one session's number; SHARED: more than one owner.
  const owner = new Int32Array(workload.blockCount).fill(-1);
  for (const r of workload.requests) {
    let id = SHARED;
    if (r.sessionId !== undefined) {
      id = ids.get(r.sessionId) ?? ids.size;
      ids.set(r.sessionId, id);
    }
    for (const b of r.blocks) {
      const o = owner[b]!;
      owner[b] = o === -1 || o === id ? id : SHARED;
    }
  }
  return (block, sessionId) => {
    const id = ids.get(sessionId);
    return id !== undefined && owner[block] === id;
  };
}
