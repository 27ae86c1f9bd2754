/**
 * `kvgate bench`, the whole run. All servers (the no-op ceiling, kvgate on each store) run side by
 * side; for each body size, every server is warmed up, then measured at saturation (closed loop)
 * in rounds interleaved across servers, then at half of its saturation (open loop, Poisson
 * arrivals) for latency at a sane load. Ratios are to the no-op ceiling in the same round, on the
 * same machine, with the same client.
 */
import { describeMachine, type Machine } from './machine.js';
import { COMPILED, LoadPool, type WindowResult } from './load-pool.js';
import { findRedisServer, startBenchRedis, type BenchRedis } from './redis-server.js';
import { startServer, type GateCounts, type ServerUnderTest, type TargetName } from './servers.js';
import { sizeLabel } from './bodies.js';
import { DEFAULTS } from '../config/defaults.js';
import { evaluateTargets, type TargetCheck } from './targets.js';
import type { BenchBodyMode } from './load-client.js';

export interface BenchOptions {
  sizes: number[];
  /**
   * Request body modes to play: buffered (Envoy's BUFFERED, one body message) and full_duplex
   * (FULL_DUPLEX_STREAMED, chunks without waiting, body echoed back). Default: buffered.
   */
  bodyModes?: BenchBodyMode[];
  stores: Array<'memory' | 'redis'>;
  /** Measured time of each saturation round; the half-saturation run lasts `rounds` times this. */
  durationMs: number;
  /** Unmeasured load on every server at every size before its first measured run (JIT, caches). */
  warmupMs: number;
  /** Saturation runs per server and size, interleaved across servers so drift hits all alike. */
  rounds: number;
  concurrency: number;
  clientThreads: number;
  workers: number;
  /** An existing Redis; without it a redis-server on PATH is started (or the redis runs are skipped). */
  redisUrl?: string;
  halfSaturation: boolean;
  seed: number;
  /** Each measured window stays open until this many requests completed in it (load-pool.ts `minCompleted`; 0 or absent: off). */
  minCompleted?: number;
}

import type { RunRow } from './run-row.js';
import { median } from '../util/median.js';

export type { RunRow };

export interface BenchReport {
  tool: 'kvgate bench';
  machine: Machine;
  redis: string | null;
  /**
   * What ran: the compiled build (dist/, as `kvgate serve` runs) or the TypeScript source through
   * tsx, which wraps every closure it creates in a naming call (esbuild's keepNames) and so makes
   * the gate's code, not the no-op's, dearer than it is in production.
   */
  build: 'compiled' | 'source (tsx)';
  options: BenchOptions;
  runs: RunRow[];
  targets: TargetCheck[];
  skipped: string[];
  wall_s: number;
}

/** Called as each step starts, with how long it is planned to take (for a time-left estimate). */
export type Progress = (line: string, plannedMs: number) => void;

/** The steps runBench will take (each one `progress` call) and their planned time in all. */
export function benchPlan(opts: Pick<BenchOptions, 'sizes' | 'stores' | 'rounds' | 'durationMs' | 'warmupMs' | 'halfSaturation' | 'bodyModes'>): { steps: number; plannedMs: number } {
  const servers = 1 + opts.stores.length;
  const cases = opts.sizes.length * (opts.bodyModes?.length ?? 1);
  const perCase = servers * (1 + opts.rounds + (opts.halfSaturation ? 1 : 0));
  const perCaseMs = servers * (Math.max(1, opts.warmupMs) + opts.rounds * (RAMP_MS + opts.durationMs) + (opts.halfSaturation ? RAMP_MS + opts.durationMs * opts.rounds : 0));
  return { steps: cases * perCase, plannedMs: cases * perCaseMs };
}

/** Each measured run first ramps up its streams unmeasured for this long. */
const RAMP_MS = 200;

const round3 = (x: number) => Math.round(x * 1000) / 1000;

export async function runBench(opts: BenchOptions, progress: Progress = () => {}): Promise<BenchReport> {
  const started = Date.now();
  // Described first, before the run's own load moves the load average.
  const machine = describeMachine();
  const skipped: string[] = [];
  let redis: BenchRedis | undefined;
  let redisUrl = opts.redisUrl;
  let redisLabel: string | null = null;
  const stores = [...opts.stores];
  if (stores.includes('redis') && !redisUrl) {
    const bin = findRedisServer();
    if (bin) {
      redis = await startBenchRedis(bin);
      redisUrl = redis.url;
      redisLabel = `redis-server ${redis.version} started by the bench on loopback`;
    } else {
      stores.splice(stores.indexOf('redis'), 1);
      skipped.push('redis: no --redis URL and no redis-server on PATH');
    }
  } else if (redisUrl && stores.includes('redis')) {
    redisLabel = `given: ${redisUrl.replace(/\/\/[^@/]*@/, '//***@')}`;
  }

  const pool = LoadPool.create(opts.clientThreads);
  const servers: ServerUnderTest[] = [];
  const runs: RunRow[] = [];
  try {
    for (const name of ['noop', ...stores] as TargetName[]) {
      // The gate's own warnings (Redis timeouts) would drown the output; the report counts them.
      servers.push(await startServer(name, { workers: opts.workers, logLevel: 'error', ...(redisUrl ? { redisUrl } : {}) }));
    }
    for (const bytes of opts.sizes) for (const bodyMode of opts.bodyModes ?? ['buffered']) {
      const size = sizeLabel(bytes);
      const label = bodyMode === 'buffered' ? size : `${size} ${bodyMode}`;
      const base = (s: ServerUnderTest) => ({
        target: s.target,
        bodyBytes: bytes,
        bodyMode,
        seed: opts.seed,
        ...(s.routingHeader ? { expectHeader: s.routingHeader } : {}),
      });
      for (const s of servers) {
        progress(`${label}: warming up ${s.name}`, Math.max(1, opts.warmupMs));
        await pool.run({ ...base(s), mode: 'closed', concurrency: opts.concurrency, warmupMs: 0, durationMs: Math.max(1, opts.warmupMs) });
      }
      const rounds = new Map<ServerUnderTest, Array<{ w: WindowResult; gate: GateCounts | null }>>(servers.map((s) => [s, []]));
      for (let round = 1; round <= opts.rounds; round++) {
        for (const s of servers) {
          progress(`${label}: ${s.name} at saturation, round ${round}/${opts.rounds}`, RAMP_MS + opts.durationMs);
          s.window();
          const w = await pool.run({ ...base(s), minCompleted: opts.minCompleted, mode: 'closed', concurrency: opts.concurrency, warmupMs: RAMP_MS, durationMs: opts.durationMs });
          rounds.get(s)!.push({ w, gate: s.window() ?? null });
        }
      }
      const noopRounds = rounds.get(servers[0]!)!.map((r) => r.w.perS);
      const satRows = new Map<ServerUnderTest, RunRow>();
      for (const s of servers) {
        const rs = rounds.get(s)!;
        const perS = rs.map((r) => r.w.perS);
        // The round whose throughput is the median stands for the server; its latencies are shown.
        const mid = rs.find((r) => r.w.perS === median(perS)) ?? [...rs].sort((a, b) => a.w.perS - b.w.perS)[rs.length >> 1]!;
        const r = row(s.name, bodyMode, size, 'saturation', opts.concurrency, null, mid.w, sumGate(rs.map((x) => x.gate)));
        r.decisions_per_s = Math.round(median(perS));
        r.rounds_per_s = perS;
        r.errors = rs.reduce((n, x) => n + x.w.errors, 0);
        r.shed = rs.reduce((n, x) => n + x.w.shed, 0);
        r.error_samples = rs.flatMap((x) => x.w.errorSamples).slice(0, 5);
        if (s.name !== 'noop') {
          const ratios = perS.map((p, i) => (noopRounds[i]! > 0 ? p / noopRounds[i]! : 0));
          r.ratio_to_noop = round3(median(ratios));
          r.ratio_range = [round3(Math.min(...ratios)), round3(Math.max(...ratios))];
        }
        satRows.set(s, r);
        runs.push(r);
      }
      if (!opts.halfSaturation) continue;
      for (const s of servers) {
        // The median round, not the fastest: a rate above what the server can do now turns the
        // latency run into a queueing test.
        const capacity = satRows.get(s)!.decisions_per_s;
        if (capacity <= 0) continue;
        const rate = capacity / 2;
        // Room for the bursts of Poisson arrivals, without letting a stuck server pile up streams
        // forever, and never more than the gate's fleet holds (every worker at its limit): past that
        // a stall turns the latency row into a test of shedding (a loaded machine once stalled a
        // test's run of 4 workers, 64 slots, under 256 streams: 18 shed). Arrivals past it are
        // dropped by the client, and reported.
        const cap = Math.min(Math.max(opts.concurrency * 4, 256), opts.workers * DEFAULTS.maxInflight);
        progress(`${label}: ${s.name} at half of saturation, ${Math.round(rate)}/s`, RAMP_MS + opts.durationMs * opts.rounds);
        s.window();
        const w = await pool.run({ ...base(s), minCompleted: opts.minCompleted, mode: 'open', concurrency: cap, ratePerS: rate, warmupMs: RAMP_MS, durationMs: opts.durationMs * opts.rounds });
        runs.push(row(s.name, bodyMode, size, 'half', cap, Math.round(rate), w, s.window() ?? null));
      }
    }
  } finally {
    for (const s of servers) {
      pool.forget(s.target);
      await s.close();
    }
    await pool.close();
    await redis?.stop();
  }

  for (const r of runs) {
    if (r.target === 'noop' || r.load !== 'half') continue;
    const noop = runs.find((n) => n.target === 'noop' && n.body_mode === r.body_mode && n.size === r.size && n.load === 'half');
    // At half load each server runs at its own rate; the ratio compares the rates served.
    r.ratio_to_noop = noop && noop.decisions_per_s > 0 ? round3(r.decisions_per_s / noop.decisions_per_s) : null;
  }
  return {
    tool: 'kvgate bench',
    machine,
    redis: redisLabel,
    build: COMPILED ? 'compiled' : 'source (tsx)',
    options: { ...opts, ...(opts.redisUrl ? { redisUrl: '(given)' } : {}) },
    runs,
    targets: evaluateTargets(runs),
    skipped,
    wall_s: Math.round((Date.now() - started) / 100) / 10,
  };
}

function sumGate(parts: ReadonlyArray<GateCounts | null>): GateCounts | null {
  const present = parts.filter((p): p is GateCounts => p !== null);
  if (present.length === 0) return null;
  const out: GateCounts = { outcomes: {}, degraded: 0, retried: 0 };
  for (const p of present) {
    out.degraded += p.degraded;
    out.retried += p.retried;
    for (const [k, v] of Object.entries(p.outcomes)) out.outcomes[k] = (out.outcomes[k] ?? 0) + v;
  }
  return out;
}

function row(
  target: TargetName,
  bodyMode: BenchBodyMode,
  size: string,
  load: RunRow['load'],
  concurrency: number,
  rate: number | null,
  w: WindowResult,
  gate: GateCounts | null,
): RunRow {
  return {
    target,
    body_mode: bodyMode,
    size,
    body_bytes: w.meanBodyBytes,
    load,
    concurrency,
    rate_per_s: rate,
    window_s: w.windowS,
    decisions_per_s: w.perS,
    rounds_per_s: [w.perS],
    ratio_to_noop: null,
    ratio_range: null,
    // The server's busy time over the span its ELU covers, per request completed in the window.
    server_busy_us: w.completed > 0 ? Math.round((w.serverElu * w.serverWindowS * 1e6) / w.completed) : 0,
    completed: w.completed,
    routed: w.routed,
    shed: w.shed,
    errors: w.errors,
    error_samples: w.errorSamples,
    dropped: w.dropped,
    added: w.added,
    decision: w.decision,
    schedule_lag: load === 'half' ? w.scheduleLag : null,
    server_elu: w.serverElu,
    client_elu: w.clientElu,
    rss_peak_mb: w.rssPeakMb,
    heap_mb: w.heapMb,
    gate,
  };
}
