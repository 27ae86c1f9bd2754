/**
 * kvgate itself, run for real: every simulated request becomes the `RequestInfo` Envoy's ext_proc
 * stream would produce (POST /v1/chat/completions, the session header when the workload has one,
 * an OpenAI JSON body with the model and the prompt) and goes through `Gate.route()` with a
 * `MemoryStore`, exactly as in production. The lease is released at the request's first token,
 * which is when kvgate releases in production (`routing.release_on: response_headers`). The gate
 * gets each worker's running, queued and KV-use figures at its collector's cadence and age
 * (simulator.ts `SignalCadence`: scraped every 50 ms, read every 100 ms), and derives health from
 * them itself. At each read it also does what the collector's read loop does with the verdicts:
 * a worker seen pressured starts the real Migrator (src/signals/migrator.ts) on the simulated
 * clock, which moves cold sessions through the real planMigration and store.migrate; each move
 * reaches the simulator as an offload event (`onSessionMoved`). Nothing of the policy is copied
 * here, so the simulator scores whatever the gate's policy is today.
 */
import { parseConfig } from '../../config/load.js';
import type { Config } from '../../config/schema.js';
import { Gate } from '../../gate/gate.js';
import type { Pool } from '../../gate/pools.js';
import { initHashing } from '../../request/hashing.js';
import type { RequestInfo } from '../../request/request.js';
import type { RouteOutcome } from '../../routing/types.js';
import { Migrator } from '../../signals/migrator.js';
import { MemoryStore } from '../../state/memory-store.js';
import type { Lease } from '../../state/store.js';
import { createLogger } from '../../telemetry/logger.js';
import { DEFAULT_FLEET, ENGINE_BLOCK_TOKENS } from '../cost-model.js';
import type { SimRequest } from '../workload.js';
import type { HealthVerdict, SignalRecord, WorkerSignals } from '../../routing/health.js';
import type { PolicyContext, RouteChoice, RouterPolicy, SessionMove, WorkerObservation } from './policy.js';

/** The model named in simulated bodies (the one the cost model describes). */
export const SIM_MODEL = 'meta-llama/Llama-3.1-8B-Instruct';

export function workerId(i: number): string {
  return `w${i}`;
}

/** The gate config a simulated fleet gets: its workers, the in-flight limit, the user's config (`--gate-config`) or defaults otherwise. */
export function simGateConfig(ctx: PolicyContext): Config {
  const user = ctx.gateConfig ?? {};
  const limits = typeof user['limits'] === 'object' && user['limits'] !== null ? (user['limits'] as Record<string, unknown>) : {};
  return parseConfig(
    {
      ...user,
      // The metrics URL is never fetched: the simulator hands the gate each scrape (observe()).
      workers: Array.from({ length: ctx.workers }, (_, i) => ({ id: workerId(i), cluster: `sim_${workerId(i)}`, metrics_url: `http://sim-${workerId(i)}.invalid/metrics` })),
      limits: { ...limits, max_inflight: ctx.maxInflight },
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

/** What a simulation adds to each request before the gate sees it (a class header, an adapter as `model`). */
export type DecorateRequest = (info: RequestInfo, req: SimRequest, config: Config) => RequestInfo;

/** How a simulation shapes the kvgate it runs (`--classes`, `--adapters`); nothing: plain kvgate. */
export interface KvgateVariant {
  /** Its row's name. */
  name?: string;
  decorate?: DecorateRequest;
  /** What each worker reports at the first read (default: an idle engine, no adapter gauge). */
  idle?: WorkerObservation;
}

export class KvgatePolicy implements RouterPolicy {
  private readonly leases = new Map<number, Lease>();
  private readonly index: ReadonlyMap<string, number>;
  /** How the gate decided, by outcome, for the report. */
  readonly outcomes = new Map<RouteOutcome | 'shed', number>();
  /** Simulated milliseconds, as of the last call in: the Migrator's and the store's clock. */
  private nowMs = 0;
  private readonly migrator: Migrator<Pool>;
  /** Each worker's state at the last read, as the collector keeps it (a round starts on a change to pressured). */
  private previous = new Map<string, HealthVerdict['state']>();
  /** Session key hash (as offload events carry it) → the workload's session id. */
  private readonly sessions = new Map<string, string>();

  /**
   * The real gate as a simulated router; `decorate` lets a simulation shape its requests. A gate
   * over a MemoryStore timed by this policy's `clock` migrates on the simulated clock.
   */
  constructor(
    readonly gate: Gate,
    readonly name = 'kvgate',
    private readonly decorate?: DecorateRequest,
    /**
     * Each worker's KV capacity in tokens, as vLLM's `cache_config_info` publishes it (blocks of
     * 16 tokens) and kvgate's collector reads it; undefined: the page has no such gauge.
     */
    private readonly cacheTokens?: number,
  ) {
    this.index = new Map(gate.currentConfig.workers.map((w, i) => [w.id, i]));
    this.migrator = new Migrator<Pool>(gate, gate.store, createLogger('silent'), this.clock);
  }

  /** The simulated clock in milliseconds (what the Migrator paces itself by). */
  readonly clock = (): number => this.nowMs;

  /** The gate of `simGateConfig(ctx)` over a MemoryStore, as every simulation runs kvgate. */
  static async create(ctx: PolicyContext, variant: KvgateVariant = {}): Promise<KvgatePolicy> {
    await initHashing();
    let clock = (): number => 0;
    // The store on the simulated clock, as a real gate's runs on real time: its affinity, prefix
    // and response TTLs lapse after that much simulated time (on the wall clock, a simulation
    // taking seconds, they never would), and its migration lock is held for simulated time (on
    // the wall clock a simulation would find it still held and skip rounds a real gate makes).
    const store = new MemoryStore({ now: () => clock() });
    const policy = new KvgatePolicy(new Gate(simGateConfig(ctx), store, createLogger('silent')), variant.name, variant.decorate, ctx.cacheTokens ?? DEFAULT_FLEET.cacheTokens);
    clock = policy.clock;
    // As `kvgate serve` reads every worker once before serving: an idle fleet.
    const idle = variant.idle ?? { running: 0, waiting: 0, kvUsage: 0 };
    policy.observe(Array.from({ length: ctx.workers }, () => idle));
    return policy;
  }

  async route(req: SimRequest, nowS?: number): Promise<RouteChoice> {
    if (nowS !== undefined) this.nowMs = nowS * 1000;
    const info = requestInfo(req, this.gate.currentConfig);
    const res = await this.gate.route(this.decorate ? this.decorate(info, req, this.gate.currentConfig) : info);
    if (res.kind === 'reject') {
      this.count('shed');
      return { shed: res.error.code };
    }
    this.count(res.outcome);
    this.leases.set(req.index, res.lease);
    if (res.key?.kind === 'session' && req.sessionId !== undefined) this.sessions.set(res.key.hash, req.sessionId);
    return { worker: this.index.get(res.worker)! };
  }

  async firstToken(req: SimRequest, _worker?: number, nowS?: number): Promise<void> {
    if (nowS !== undefined) this.nowMs = nowS * 1000;
    const lease = this.leases.get(req.index);
    if (!lease) return;
    this.leases.delete(req.index);
    await this.gate.release(lease);
  }

  /**
   * A scrape of every worker, handed to the gate as its collector would after reading the store,
   * and the collector's reaction to the verdicts (collector.ts `read`): the one replica owns every
   * worker, so each pressured one gets a migration round when the Migrator says one is due. The
   * returned promise settles when those rounds have.
   */
  observe(workers: readonly WorkerObservation[], nowS?: number): Promise<void> | void {
    if (nowS !== undefined) this.nowMs = nowS * 1000;
    const records = new Map<string, SignalRecord>();
    workers.forEach((w, i) => {
      const signals: WorkerSignals = { running: w.running, waiting: w.waiting, kvUsage: w.kvUsage };
      if (this.cacheTokens !== undefined) {
        signals.blockSize = ENGINE_BLOCK_TOKENS;
        signals.numGpuBlocks = Math.floor(this.cacheTokens / ENGINE_BLOCK_TOKENS);
      }
      // The adapter gauge, where the simulated engines run adapters (as vLLM's lora_requests_info).
      if (w.lora) signals.lora = { running: [...w.lora.running], waiting: [...w.lora.waiting], maxLora: w.lora.maxLora };
      records.set(workerId(i), { signals, ageMs: (w.ageS ?? 0) * 1000, failures: 0 });
    });
    const verdicts = this.gate.setSignals(records);
    const rounds: Promise<void>[] = [];
    for (const [worker, v] of verdicts) {
      if (v.state === 'pressured' && this.gate.currentConfig.migration.enabled) {
        const round = this.migrator.pressured(worker, v.codes[0] ?? 'pressure', this.previous.get(worker) !== 'pressured');
        if (round) rounds.push(round);
      }
    }
    this.previous = new Map([...verdicts].map(([w, v]) => [w, v.state]));
    return rounds.length > 0 ? Promise.all(rounds).then(() => undefined) : undefined;
  }

  /** Each offload event the gate's store publishes, as a move of a workload session. */
  onSessionMoved(listener: (move: SessionMove) => void): void {
    this.gate.store.onOffload((e) => {
      const sessionId = this.sessions.get(e.session);
      const from = this.index.get(e.from);
      const to = this.index.get(e.to);
      if (sessionId !== undefined && from !== undefined && to !== undefined) listener({ sessionId, from, to });
    });
  }

  close(): Promise<void> {
    this.migrator.stop();
    return this.gate.store.close();
  }

  private count(k: RouteOutcome | 'shed'): void {
    this.outcomes.set(k, (this.outcomes.get(k) ?? 0) + 1);
  }
}
