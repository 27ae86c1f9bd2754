/**
 * The main thread's side of the load: starts the client threads, splits a run's concurrency and
 * rate over them, times warm-up and window, and merges what they measured. While the window is
 * open it samples what the server side costs: the main thread's event-loop utilization (the gate
 * runs there) and the process's RSS.
 */
import { performance, type RecordableHistogram } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { newHistogram, type LoadPlan, type LoadResult } from './load-client.js';
import type { FromWorker, ToWorker } from './load-worker.js';

/** Null where there were no samples. */
export interface Percentiles {
  samples: number;
  mean_ms: number | null;
  p50_ms: number | null;
  p99_ms: number | null;
  /** Null under 1,000 samples: a p99.9 of fewer is a guess. */
  p999_ms: number | null;
  max_ms: number | null;
}

export interface WindowResult {
  windowS: number;
  completed: number;
  routed: number;
  shed: number;
  errors: number;
  errorSamples: string[];
  dropped: number;
  meanBodyBytes: number;
  perS: number;
  added: Percentiles;
  decision: Percentiles;
  scheduleLag: Percentiles;
  /** Main thread (server) event-loop utilization over the window. */
  serverElu: number;
  /** The span `serverElu` covers (s): from the window's mark to its end, extension included. */
  serverWindowS: number;
  /** Mean over client threads. */
  clientElu: number;
  rssPeakMb: number;
  /** Main-thread V8 heap in use at the window's end (the server's isolate only). */
  heapMb: number;
}

/**
 * `minCompleted`: the measured window stays open past `durationMs` until the client threads
 * together have completed this many requests in it, for at most MIN_COMPLETED_WAIT_MS more: on a
 * loaded machine a short window can otherwise see none, and a rate or latency of no requests
 * measures nothing. Every figure (the server's event-loop use, RSS and heap as well as the
 * threads' counts) covers the whole window, its extension included, and every thread keeps its
 * load up until all stop together. Default 0: the window closes at `durationMs`.
 */
export type RunPlan = Omit<LoadPlan, 'thread'> & { warmupMs: number; durationMs: number; minCompleted?: number };

/** How long past its planned end a window waits for `minCompleted` (a server that completes none is broken). */
const MIN_COMPLETED_WAIT_MS = 10_000;

const round3 = (x: number) => Math.round(x * 1000) / 1000;

export function percentiles(h: RecordableHistogram): Percentiles {
  const ms = (us: number) => round3(us / 1000);
  const n = h.count;
  return {
    samples: n,
    mean_ms: n ? ms(h.mean) : null,
    p50_ms: n ? ms(h.percentile(50)) : null,
    p99_ms: n ? ms(h.percentile(99)) : null,
    p999_ms: n >= 1000 ? ms(h.percentile(99.9)) : null,
    max_ms: n ? ms(h.max) : null,
  };
}

/**
 * Starts the client thread from the same build as this module: the compiled load-worker.js beside
 * it (dist/, what the `kvgate` binary runs, where tsx, a development tool, may not be installed),
 * or, from the source, load-worker.ts through tsx whether or not this process was started by tsx.
 */
/** Whether the bench runs from the compiled build (dist/, as `kvgate serve` runs) or the TypeScript source. */
export const COMPILED = !import.meta.url.endsWith('.ts');

function clientWorker(): Worker {
  if (COMPILED) return new Worker(new URL('./load-worker.js', import.meta.url));
  const entry = new URL('./load-worker.ts', import.meta.url);
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(boot, { eval: true });
}

class ClientThread {
  private readonly worker: Worker;
  private waiting: { type: FromWorker['type']; resolve: (m: FromWorker) => void; reject: (e: Error) => void } | undefined;
  private failed: Error | undefined;

  constructor() {
    this.worker = clientWorker();
    this.worker.on('message', (m: FromWorker) => {
      const w = this.waiting;
      if (m.type === 'error') {
        this.failed = new Error(`load client thread: ${m.message}`);
        this.waiting = undefined;
        w?.reject(this.failed);
      } else if (w && w.type === m.type) {
        this.waiting = undefined;
        w.resolve(m);
      }
    });
    this.worker.on('error', (err) => {
      this.failed = err;
      this.waiting?.reject(err);
      this.waiting = undefined;
    });
  }

  post(msg: ToWorker): void {
    if (this.failed) throw this.failed;
    this.worker.postMessage(msg);
  }

  request<T extends FromWorker['type']>(msg: ToWorker, reply: T): Promise<Extract<FromWorker, { type: T }>> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.waiting = { type: reply, resolve: resolve as (m: FromWorker) => void, reject };
      this.worker.postMessage(msg);
    });
  }

  async close(): Promise<void> {
    try {
      this.worker.postMessage({ type: 'close' } satisfies ToWorker);
    } catch {
      // Already gone.
    }
    await this.worker.terminate();
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Splits n as evenly as possible into k parts. */
function split(n: number, k: number, i: number): number {
  return Math.floor(n / k) + (i < n % k ? 1 : 0);
}

export class LoadPool {
  private constructor(private readonly threads: ClientThread[]) {}

  static create(threads: number): LoadPool {
    return new LoadPool(Array.from({ length: Math.max(1, threads) }, () => new ClientThread()));
  }

  get size(): number {
    return this.threads.length;
  }

  async run(plan: RunPlan): Promise<WindowResult> {
    const { warmupMs, durationMs, minCompleted = 0, ...load } = plan;
    const k = this.threads.length;
    const active = this.threads.filter((_, i) => split(load.concurrency, k, i) > 0);
    await Promise.all(
      active.map((t, i) =>
        t.request(
          {
            type: 'start',
            plan: {
              ...load,
              thread: i,
              concurrency: split(load.concurrency, active.length, i),
              ...(load.ratePerS !== undefined ? { ratePerS: load.ratePerS / active.length } : {}),
            },
          },
          'started',
        ),
      ),
    );
    await sleep(warmupMs);
    for (const t of active) t.post({ type: 'mark' });
    const elu0 = performance.eventLoopUtilization();
    const marked = performance.now();
    let rssPeak = process.memoryUsage.rss();
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, process.memoryUsage.rss());
    }, 100);
    await sleep(durationMs);
    if (minCompleted > 0) {
      const until = performance.now() + MIN_COMPLETED_WAIT_MS;
      for (;;) {
        const counts = await Promise.all(active.map((t) => t.request({ type: 'count' }, 'count')));
        if (counts.reduce((n, c) => n + c.completed, 0) >= minCompleted || performance.now() >= until) break;
        await sleep(10);
      }
    }
    clearInterval(sampler);
    rssPeak = Math.max(rssPeak, process.memoryUsage.rss());
    const serverElu = performance.eventLoopUtilization(elu0).utilization;
    const serverWindowS = round3((performance.now() - marked) / 1000);
    const heapMb = process.memoryUsage().heapUsed / 2 ** 20;
    const results = (await Promise.all(active.map((t) => t.request({ type: 'stop' }, 'result')))).map((m) => m.result);
    return merge(results, { serverElu, serverWindowS, rssPeakMb: rssPeak / 2 ** 20, heapMb });
  }

  /** Drops the client threads' connections to a target that is about to stop. */
  forget(target: string): void {
    for (const t of this.threads) t.post({ type: 'forget', target });
  }

  async close(): Promise<void> {
    await Promise.all(this.threads.map((t) => t.close()));
  }
}

function merge(results: LoadResult[], server: { serverElu: number; serverWindowS: number; rssPeakMb: number; heapMb: number }): WindowResult {
  const hist = (pick: (r: LoadResult) => RecordableHistogram) => {
    const h = newHistogram();
    for (const r of results) h.add(pick(r));
    return percentiles(h);
  };
  const sum = (pick: (r: LoadResult) => number) => results.reduce((n, r) => n + pick(r), 0);
  const windowMs = Math.max(...results.map((r) => r.windowMs));
  const completed = sum((r) => r.completed);
  return {
    windowS: round3(windowMs / 1000),
    completed,
    routed: sum((r) => r.routed),
    shed: sum((r) => r.shed),
    errors: sum((r) => r.errors),
    errorSamples: results.flatMap((r) => r.errorSamples).slice(0, 5),
    dropped: sum((r) => r.dropped),
    meanBodyBytes: completed > 0 ? Math.round(sum((r) => r.meanBodyBytes * r.completed) / completed) : 0,
    perS: Math.round((completed / windowMs) * 1000),
    added: hist((r) => r.added),
    decision: hist((r) => r.decision),
    scheduleLag: hist((r) => r.scheduleLag),
    serverElu: round3(server.serverElu),
    serverWindowS: server.serverWindowS,
    clientElu: round3(sum((r) => r.clientElu) / results.length),
    rssPeakMb: Math.round(server.rssPeakMb),
    heapMb: Math.round(server.heapMb),
  };
}
