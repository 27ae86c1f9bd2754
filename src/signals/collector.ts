/**
 * The load collector: scrapes model-server and DCGM metrics, publishes them to the store, reads
 * everyone's back, and hands the gate each worker's signals and health.
 *
 * Replicas share the scraping: each gate heartbeats into the store, and a worker is scraped only by
 * the live gate that wins rendezvous hashing for it, so a fleet of gates puts the load of one
 * scraper on each worker however many gates there are. A gate that dies stops heartbeating and
 * its workers move to the others within a heartbeat TTL, well inside the staleness limit.
 * Every replica reads all signals back from the store (aged by the store's clock), so all of them
 * see the same picture and compute the same health.
 *
 * The owner of a worker also runs its preemptive migration (./migrator.ts) when it turns pressured,
 * so sessions move once, not once per replica.
 *
 * While the store cannot be reached (a heartbeat or a read fails), a replica cannot share: it
 * scrapes every worker itself and judges each on its own latest scrape, as a single replica does,
 * until the store answers again. Its workers keep serving on fresh figures through the outage; the
 * cost is one scraper per replica on each worker meanwhile.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { WorkerConfig } from '../config/schema.js';
import type { HealthVerdict, SignalRecord } from '../routing/health.js';
import { rendezvousScore } from '../routing/rendezvous.js';
import type { RoutingStore } from '../state/store.js';
import { keepScrape, scrapeRecord, type KeptScrape } from '../state/scrape-record.js';
import type { Fleet, FleetPool } from './fleet.js';
import { Migrator } from './migrator.js';
import type { WorkerSignals } from '../routing/health.js';
import { parseSignals } from './parse.js';
import { skipWhileRunning } from '../util/coalesced.js';
import { deadline, type Deadline } from '../util/deadline.js';
import { shownUrl } from '../util/shown-url.js';

/** Largest metrics page read; a vLLM page is a few tens of KB, so more is a broken endpoint. */
const MAX_METRICS_BYTES = 4 * 1024 * 1024;

export interface CollectorOptions<P extends FleetPool> {
  /** The gate (./fleet.ts: what the loops read from it and feed it). */
  gate: Fleet<P>;
  store: RoutingStore;
  logger: Logger;
  /** This replica's id in the store's live-gate set. */
  gateId?: string;
}

export class SignalCollector<P extends FleetPool> {
  readonly gateId: string;
  private owned = new Set<string>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly loops: NodeJS.Timeout[] = [];
  private previous = new Map<string, HealthVerdict['state']>();
  private readonly migrator: Migrator<P>;
  private stopped = false;
  private started = false;
  private running = { heartbeatMs: 0, readMs: 0 };
  private lastWarn = new Map<string, number>();
  private readonly heartbeatTick = skipWhileRunning(() => this.heartbeat());
  private readonly readTick = skipWhileRunning(() => this.read());
  /** This replica's own latest scrape of each worker: what it judges on while the store is away. */
  private readonly ownScrapes = new Map<string, KeptScrape>();
  /** The last read of the signals failed: this replica scrapes every worker until one succeeds. */
  private readFailed = false;

  constructor(private readonly opts: CollectorOptions<P>) {
    this.gateId = opts.gateId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
    this.migrator = new Migrator(opts.gate, opts.store, opts.logger);
  }

  private get workers(): WorkerConfig[] {
    // The config allows dcgm_url only beside metrics_url (schema.ts): a worker is scraped for its engine.
    return this.opts.gate.currentConfig.workers.filter((w) => w.metrics_url);
  }

  /** Starts the loops; resolves after the first round of scrapes and reads (bounded by the scrape timeout). */
  async start(): Promise<void> {
    if (this.workers.length === 0 || this.started) return;
    this.started = true;
    await this.heartbeatTick();
    await Promise.all([...this.owned].map((w) => this.scrape(w)));
    await this.readTick();
    // Stopped while the first round ran (shutdown, or a reload's start racing one): no loops.
    if (this.stopped) return;
    this.startLoops();
    for (const w of this.owned) this.schedule(w);
  }

  /**
   * After a config reload. A running collector picks up added and removed workers at its next
   * heartbeat by itself, and scrape intervals and timeouts at the next scrape; the heartbeat and
   * read loops are restarted if `signals.*` changed their cadence. One that found no worker with
   * metrics at startup has no loops yet and starts them now, or workers a reload adds would wait
   * for data that never comes (and count as down).
   */
  configChanged(): void {
    if (this.stopped || this.workers.length === 0) return;
    if (!this.started) {
      this.start().catch((err: unknown) => this.warn('start', 'signal collector failed to start', err));
    } else if (this.loops.length > 0) {
      this.startLoops();
    }
  }

  /** How often to heartbeat and to read signals back, from the running `signals.*` settings. */
  private cadence(): { heartbeatMs: number; readMs: number } {
    const cfg = this.opts.gate.currentConfig.signals;
    return {
      // Several heartbeats per staleness window, so a dead gate's workers move long before their data goes stale.
      heartbeatMs: Math.max(100, Math.min(1000, cfg.stale_after_ms / 4)),
      // Read twice per scrape interval at most, and at least a few times per staleness window.
      readMs: Math.max(20, Math.min(250, cfg.interval_ms * 2)),
    };
  }

  /** (Re)starts the heartbeat and read loops when their cadence differs from the running one. */
  private startLoops(): void {
    const { heartbeatMs, readMs } = this.cadence();
    if (this.loops.length > 0 && heartbeatMs === this.running.heartbeatMs && readMs === this.running.readMs) return;
    for (const t of this.loops) clearInterval(t);
    this.loops.length = 0;
    this.running = { heartbeatMs, readMs };
    // One heartbeat and one read at a time: a tick while the last still waits on a slow store is skipped.
    this.loops.push(setInterval(() => void this.heartbeatTick(), heartbeatMs).unref());
    this.loops.push(setInterval(() => void this.readTick(), readMs).unref());
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.loops) clearInterval(t);
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    this.migrator.stop();
  }

  /** The running heartbeat and read intervals (0 before the loops start). */
  get loopIntervals(): Readonly<{ heartbeatMs: number; readMs: number }> {
    return this.running;
  }

  /** Workers this replica scrapes now. */
  get ownedWorkers(): ReadonlySet<string> {
    return this.owned;
  }

  private async heartbeat(): Promise<void> {
    // A heartbeat lasts three intervals: one late or lost heartbeat does not drop this replica.
    const ttlMs = this.cadence().heartbeatMs * 3;
    // Heartbeats say which replicas are alive, not anything about a pool: they live under the
    // default pool's keys, and every replica shares the worker set of all pools by rendezvous.
    const pool = this.opts.gate.pool;
    let live: string[];
    try {
      live = await this.opts.store.heartbeat(pool, this.gateId, ttlMs);
    } catch (err) {
      this.warn('heartbeat', 'signal collector heartbeat failed; scraping every worker until the store answers', err);
      this.shareOut([this.gateId]);
      return;
    }
    this.shareOut(this.readFailed ? [this.gateId] : live);
  }

  /**
   * Takes the workers that rendezvous hashing gives this replica among the `live` ones. Alone
   * (the store did not answer a heartbeat or a read) that is every worker: no replica can see
   * another then, nor read what the others scrape, so this one's verdicts rest on scrapes of its
   * own (read() judges on them) until the store answers and the workers are shared out again.
   */
  private shareOut(live: string[]): void {
    if (!live.includes(this.gateId)) live.push(this.gateId);
    const mine = new Set<string>();
    const configured = new Set<string>();
    for (const w of this.workers) {
      configured.add(w.id);
      let best = this.gateId;
      let bestScore = -1;
      for (const g of live) {
        const s = rendezvousScore(g, w.id);
        if (s > bestScore || (s === bestScore && g < best)) {
          best = g;
          bestScore = s;
        }
      }
      if (best === this.gateId) mine.add(w.id);
    }
    for (const w of this.owned) if (!mine.has(w)) this.unschedule(w);
    // Workers a reload removed leave no scrape behind.
    for (const w of this.ownScrapes.keys()) if (!configured.has(w)) this.ownScrapes.delete(w);
    const gained = [...mine].filter((w) => !this.owned.has(w));
    this.owned = mine;
    if (!this.stopped && this.loops.length > 0) for (const w of gained) this.schedule(w);
  }

  private schedule(worker: string): void {
    if (this.stopped || this.timers.has(worker)) return;
    const tick = async () => {
      this.timers.delete(worker);
      if (this.stopped || !this.owned.has(worker)) return;
      await this.scrape(worker);
      if (!this.stopped && this.owned.has(worker) && !this.timers.has(worker)) {
        this.timers.set(worker, setTimeout(() => void tick(), this.opts.gate.currentConfig.signals.interval_ms).unref());
      }
    };
    this.timers.set(worker, setTimeout(() => void tick(), 0).unref());
  }

  private unschedule(worker: string): void {
    const t = this.timers.get(worker);
    if (t) clearTimeout(t);
    this.timers.delete(worker);
  }

  /** One scrape of one worker (its engine metrics and DCGM), published to the store. Never throws. */
  private async scrape(worker: string): Promise<void> {
    const w = this.opts.gate.currentConfig.workers.find((x) => x.id === worker);
    // Gone, or its metrics_url removed, by a reload since it was scheduled: nothing to scrape.
    const metricsUrl = w?.metrics_url;
    if (!w || metricsUrl === undefined) return;
    const timeout = this.opts.gate.currentConfig.signals.timeout_ms;
    let update: { signals: WorkerSignals } | { error: string };
    try {
      const signals: WorkerSignals = {};
      const problems: string[] = [];
      const staleAfterMs = this.opts.gate.currentConfig.signals.stale_after_ms;
      const read = async (url: string) => {
        const page = await fetchPage(url, timeout);
        const parsed = parseSignals(page.text, w.engine, w.dcgm_gpus === 'all' ? {} : { gpus: w.dcgm_gpus });
        problems.push(...parsed.problems);
        // How old the figures already were when served, where the exporter stamps its samples: by
        // the exporter's own clock (the response's Date header; whole seconds, so up to 1 s
        // younger than they are, but no clock skew between hosts), else by this gate's.
        const ageMs = parsed.oldestSampleMs === undefined ? undefined : Math.max(0, (page.dateMs ?? Date.now()) - parsed.oldestSampleMs);
        return { signals: parsed.signals, ageMs };
      };
      const engine = await read(metricsUrl);
      Object.assign(signals, engine.signals);
      // Health adds it to the scrape's age: figures stamped older than stale_after_ms are stale.
      if (engine.ageMs !== undefined) signals.sampleAgeMs = engine.ageMs;
      if (w.dcgm_url) {
        try {
          const dcgm = await read(w.dcgm_url);
          if (dcgm.ageMs !== undefined && dcgm.ageMs > staleAfterMs) {
            // Stale GPU figures are no figures; the engine's stand, as when DCGM fails (below).
            this.warn(`dcgm:${worker}`, 'DCGM metrics are stale; using the engine metrics without GPU memory and temperature', `samples ${dcgm.ageMs} ms old`, { worker });
          } else {
            Object.assign(signals, dcgm.signals);
          }
        } catch (err) {
          // The engine's figures stand: a broken exporter says nothing about the engine, and
          // failing the scrape for it marked a serving worker down. GPU memory and temperature
          // are unknown for this scrape.
          this.warn(`dcgm:${worker}`, 'DCGM scrape failed; using the engine metrics without GPU memory and temperature', err, { worker });
        }
      }
      if (problems.length > 0) this.warn(`problems:${worker}`, 'worker metrics had invalid values; ignoring them', problems.join('; '), { worker });
      if (signals.running === undefined && signals.waiting === undefined && signals.kvUsage === undefined) {
        // A page without any of the engine's series is not data: maybe the wrong engine, or a
        // renamed metric. Counting it as a healthy, idle worker would be a guess.
        update = { error: `no ${w.engine} metrics found` };
      } else {
        update = { signals };
      }
    } catch (err) {
      update = { error: (err as Error).message || String(err) };
    }
    if ('error' in update) this.warn(`scrape:${worker}`, 'worker scrape failed', update.error, { worker });
    // Kept as the store keeps it: a failure keeps the last figures and counts.
    this.ownScrapes.set(worker, keepScrape(this.ownScrapes.get(worker), update, this.opts.gate.clock()));
    try {
      // Under the worker's own pool, where that pool's routing state lives.
      const pool = this.opts.gate.pools.poolOfWorker(worker)?.name ?? this.opts.gate.pool;
      await this.opts.store.publishSignals(pool, worker, update);
    } catch (err) {
      this.warn('publish', 'could not publish worker signals', err);
    }
  }

  /** Reads every worker's signals from the store, hands them to the gate, reacts to new pressure. */
  private async read(): Promise<void> {
    if (this.stopped) return;
    // One read per pool; worker ids are unique across pools, so the records merge into one map.
    const records = new Map<string, SignalRecord>();
    try {
      const pools = this.opts.gate.pools.all();
      const read = await Promise.all(pools.map((p) => this.opts.store.readSignals(p.name)));
      // A pool's records of workers it no longer has are left behind by a reload that moved them
      // (nothing deletes them): only a worker's current pool speaks for it, or a frozen record of
      // its old pool could win the merge and hold it stale, down, for good.
      // The same rule as the publishing side (scrape): the pool a worker is in now.
      const fleet = this.opts.gate.pools;
      read.forEach((r, i) => {
        for (const [worker, rec] of r) if (fleet.poolOfWorker(worker)?.name === pools[i]!.name) records.set(worker, rec);
      });
    } catch (err) {
      // Keep the last picture, aged by the time since it was read: past stale_after_ms a worker
      // with no fresh figures is down, so none keeps its traffic (or its verdict) on old data.
      this.warn('read', 'could not read worker signals', err);
      if (!this.readFailed) {
        this.readFailed = true;
        this.shareOut([this.gateId]);
      }
      // On this replica's own scrapes where it has them (it scrapes every worker while its
      // heartbeat fails too), else on the last figures read, aged. No migration on them: moving
      // sessions needs the store this read could not reach.
      this.judged(this.opts.gate.ageSignals(this.ownRecords()), false);
      return;
    }
    // Shared out again at the next heartbeat that succeeds.
    this.readFailed = false;
    this.judged(this.opts.gate.setSignals(records), true);
  }

  /**
   * This replica's own scrapes as records, aged as the store ages what it holds, by the gate's
   * clock: the gate weighs them against its last records aged by that same clock (`ageSignals`).
   */
  private ownRecords(): Map<string, SignalRecord> {
    const now = this.opts.gate.clock();
    const out = new Map<string, SignalRecord>();
    for (const [w, kept] of this.ownScrapes) out.set(w, scrapeRecord(kept, now));
    return out;
  }

  /** Logs each worker's change of state, and starts migration off a pressured worker this replica owns. */
  private judged(verdicts: ReadonlyMap<string, HealthVerdict>, migrate: boolean): void {
    for (const [worker, v] of verdicts) {
      const before = this.previous.get(worker);
      if (before !== v.state) {
        this.opts.logger.info({ worker, from: before ?? 'unknown', to: v.state, reasons: v.reasons }, 'worker state changed');
      }
      if (migrate && v.state === 'pressured' && this.owned.has(worker) && this.opts.gate.currentConfig.migration.enabled) {
        this.migrator.pressured(worker, v.codes[0] ?? 'pressure', before !== 'pressured');
      }
    }
    this.previous = new Map([...verdicts].map(([w, v]) => [w, v.state]));
  }

  private warn(key: string, msg: string, err: unknown, extra: Record<string, unknown> = {}): void {
    // Per cause, once every 5 s: a dead worker is scraped 20 times a second.
    const now = Date.now();
    if (now - (this.lastWarn.get(key) ?? 0) < 5000) return;
    this.lastWarn.set(key, now);
    this.opts.logger.warn({ ...extra, err: err instanceof Error ? err.message : String(err) }, msg);
  }
}

/**
 * One metrics page as text, at most MAX_METRICS_BYTES of it, with the time its server says it is
 * (its Date header), where it says. The body is read as a stream and
 * counted as it arrives (after any gzip or deflate decoding, which fetch does): a page past the
 * limit is cut off there and its connection closed. Checking only content-length (absent when
 * chunked, and the compressed size when gzipped) and then the text after reading all of it let a
 * small gzip body that expands to 64 MiB, or an endless chunked one, cost that much memory first.
 */
export async function fetchPage(url: string, timeoutMs: number): Promise<{ text: string; dateMs?: number }> {
  // Not AbortSignal.any over AbortSignal.timeout: on Node 20 a GC can lose that timeout (../util/deadline.ts).
  const limit = deadline(timeoutMs);
  try {
    return await readPage(url, timeoutMs, limit);
  } finally {
    limit.clear();
  }
}

async function readPage(url: string, timeoutMs: number, limit: Deadline): Promise<{ text: string; dateMs?: number }> {
  const signal = limit.signal;
  let res: Response;
  try {
    res = await fetch(url, { signal, headers: { accept: 'text/plain' } });
  } catch (err) {
    throw new Error(fetchFailure(url, timeoutMs, err), { cause: err });
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`HTTP ${res.status} from ${shownUrl(url)}`);
  }
  const len = Number(res.headers.get('content-length'));
  if (Number.isFinite(len) && len > MAX_METRICS_BYTES) {
    await res.body?.cancel();
    throw new Error(`metrics page of ${len} bytes is too large`);
  }
  const date = Date.parse(res.headers.get('date') ?? '');
  const dated = Number.isFinite(date) ? { dateMs: date } : {};
  if (!res.body) return { text: '', ...dated };
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      bytes += value.byteLength;
      if (bytes > MAX_METRICS_BYTES) {
        limit.abort();
        await reader.cancel().catch(() => undefined);
        throw new PageTooLarge();
      }
      chunks.push(value);
    }
  } catch (err) {
    if (err instanceof PageTooLarge) throw err;
    throw new Error(fetchFailure(url, timeoutMs, err), { cause: err });
  }
  // As res.text() decodes: UTF-8, a byte-order mark dropped, bad bytes replaced.
  return { text: new TextDecoder().decode(Buffer.concat(chunks, bytes)), ...dated };
}

class PageTooLarge extends Error {
  constructor() {
    super(`metrics page is larger than ${MAX_METRICS_BYTES} bytes`);
  }
}

/**
 * A failed fetch in words: fetch's own message is "fetch failed", with the reason (the OS's error
 * code) only in its cause.
 */
export function fetchFailure(rawUrl: string, timeoutMs: number, err: unknown): string {
  const url = shownUrl(rawUrl);
  const name = (err as Error).name;
  if (name === 'TimeoutError' || name === 'AbortError') return `no answer from ${url} in ${timeoutMs} ms (signals.timeout_ms)`;
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const code = cause?.code ?? '';
  if (code === 'ECONNREFUSED') return `nothing listening at ${url} (ECONNREFUSED): is the worker up, and is its metrics_url right?`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `cannot resolve the host of ${url} (${code}): check the worker's metrics_url`;
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return `${url} closed the connection (${code})`;
  // fetch's own message may quote the whole URL: the query string is cut out of it too.
  const detail = [code, cause?.message].filter(Boolean).join(' ') || (err as Error).message;
  return `cannot fetch ${url}: ${detail.split(rawUrl).join(url)}`;
}
