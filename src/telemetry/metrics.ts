/**
 * Every Prometheus metric kvgate exports, declared in this one file with its unit and, for
 * histograms, why its buckets are where they are. Served as text on the admin port's `/metrics`.
 *
 * Naming follows Prometheus conventions: the `kvgate_` prefix, base units (seconds), `_total` on
 * counters. Each gate instance has its own registry (tests run several gates in one process);
 * Node's process metrics (`process_*`, `nodejs_*`) come from prom-client's defaults.
 *
 * Label values are closed sets (outcomes, reasons, operations), or worker ids and pool names from
 * the config, so cardinality is bounded by the fleet size. A client's own words (a model name, a
 * path) are never a label value: the client could make the series unbounded.
 *
 * Which per-request metrics carry `pool` and which do not, and why, is said at each one: an
 * operator running several pools needs each pool's shed and hit rates (the pools serve different
 * models on different workers, and one pool's overload is invisible in a fleet-wide sum).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type LabelValues } from 'prom-client';
import type { WorkerView } from '../routing/types.js';
import { WORKER_STATES } from '../routing/types.js';
import { RELOAD_OUTCOMES, type ReloadOutcome } from '../config/reload.js';

/**
 * What happened to a request, as metrics, spans and logs name it:
 * affinity_hit, new, migrated, prefix_hit, unkeyed: routed (see RouteOutcome);
 * shed: 429/503 because no eligible worker could take it;
 * rejected: 400/413, the request itself was unusable;
 * fallback: the gate failed to decide and the request went on without a routing answer;
 * abandoned: the stream ended (Envoy's message timeout, or the client went away) before the
 * decision was answered, so whatever the gate decided was never applied (its lease is given back).
 */
export const DECISION_OUTCOMES = ['affinity_hit', 'new', 'migrated', 'prefix_hit', 'unkeyed', 'shed', 'rejected', 'fallback', 'abandoned'] as const;
export type DecisionOutcome = (typeof DECISION_OUTCOMES)[number];

/**
 * The `pool` label of a request no pool was chosen for: rejected before the pool pick (an unusable
 * body, a model no pool serves), a fallback (the gate failed before answering) or an abandoned
 * stream whose decision never named one. Empty because a pool name never is (the config's
 * POOL_NAME needs one character), so it can never be mistaken for a real pool; Prometheus stores
 * an empty label as no label, which is what it means: these requests have no pool.
 */
export const NO_POOL = '';

/** Why an ext_proc stream ended in error (label of kvgate_extproc_stream_errors_total). */
export type StreamErrorReason = 'protocol_violation' | 'idle_timeout' | 'internal' | 'write_failed';

/** Store operations that are timed (label of the store metrics). */
export type StoreOperation = 'commit' | 'snapshot' | 'release' | 'set_state' | 'ping' | 'record_response' | 'response_worker';

/**
 * Decision latency: from the message that triggers the decision to the reply being written.
 * A memory-store decision takes tens of microseconds and a Redis one a round trip (~0.2-2 ms on a
 * LAN); `store.timeout_ms` (100 ms by default) bounds the degraded path and Envoy's message_timeout (0.5 s in
 * envoy/envoy.yaml) the worst case, so the buckets run from 50 µs to 0.5 s, dense below 5 ms.
 */
const DECISION_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];
/** One store call: same range as decisions (a decision is mostly its store calls). */
const STORE_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];

export interface MetricsOptions {
  /** Workers as the gate currently sees them, read at scrape time (no I/O). */
  fleet?: () => readonly WorkerView[];
  /**
   * The config's pool names, read at scrape time: every outcome of every pool is exported from the
   * first scrape (and a pool a reload adds from the next), so per-pool rate() has no gaps.
   */
  pools?: () => readonly string[];
  /**
   * The config's worker ids (every pool's), read at scrape time: series labelled with a worker a
   * reload removed are dropped, as are those of a removed pool (see `dropGoneSeries`).
   */
  workers?: () => readonly string[];
  /** Include Node's process metrics (off in tests that start many gates in one process). */
  processMetrics?: boolean;
  /** Log lines dropped so far because stdout did not keep up (src/telemetry/logger.ts), read at scrape time. */
  logLinesDropped?: () => number;
}

export class Metrics {
  readonly registry = new Registry();
  private readonly livePools: (() => readonly string[]) | undefined;
  private readonly liveWorkers: (() => readonly string[]) | undefined;

  /** By pool: each pool's hit and shed rates (pool names come from the config; NO_POOL otherwise). */
  readonly decisions: Counter<'outcome' | 'pool'>;

  /** No `pool`: worker ids are unique across pools, so `from` already says which pool. */
  readonly migrations = new Counter({
    name: 'kvgate_migrations_total',
    help: 'Keys moved off the worker holding their KV cache, by the worker they left.',
    labelNames: ['from'] as const,
    registers: [this.registry],
  });

  /** By pool: which pool ran out of workers (a shed always has one; NO_POOL is there for safety). */
  readonly sheds = new Counter({
    name: 'kvgate_sheds_total',
    help: 'Requests answered at once instead of queued: overloaded (429) or no eligible worker (503), by the class of service shed and the pool that shed it.',
    labelNames: ['reason', 'status', 'class', 'pool'] as const,
    registers: [this.registry],
  });

  /**
   * The denominator of each class's shed rate: sheds{class} / class_requests{class}. By pool too,
   * so that ratio also holds per pool with the same labels on both sides.
   */
  readonly classRequests = new Counter({
    name: 'kvgate_class_requests_total',
    help: 'Requests routed or shed, by class of service and pool (with kvgate_sheds_total: each class\'s shed rate).',
    labelNames: ['class', 'pool'] as const,
    registers: [this.registry],
  });

  /** No `pool`: the shared store is one for every pool, so when it is unreachable it is for all of them. */
  readonly degradedDecisions = new Counter({
    name: 'kvgate_degraded_decisions_total',
    help: 'Requests routed on local state because the shared store was unreachable.',
    registers: [this.registry],
  });

  /** No `pool`: a key rotation is the fleet's, the same for every pool. */
  readonly previousKeyFinds = new Counter({
    name: 'kvgate_session_previous_key_finds_total',
    help: 'Requests whose session or stored response was found only under the previous session hash key (a rotation in progress; near zero for a while: the previous key can go).',
    registers: [this.registry],
  });

  /**
   * By pool: a pool's decision time grows with its worker count (the snapshot read and scored per
   * decision), so a slow pool must not hide in the others' quantiles. Bounded: outcomes x pools.
   */
  readonly decisionSeconds = new Histogram({
    name: 'kvgate_decision_duration_seconds',
    help: 'Time from the ext_proc message that triggers a decision to its reply, by outcome and pool, in seconds.',
    labelNames: ['outcome', 'pool'] as const,
    buckets: DECISION_BUCKETS,
    registers: [this.registry],
  });

  /** No `pool`: a store call's cost is the store's (one Redis or memory for every pool), not a pool's. */
  readonly storeSeconds = new Histogram({
    name: 'kvgate_store_duration_seconds',
    help: 'Store calls by operation, in seconds (Redis: one round trip; memory: in-process).',
    labelNames: ['operation'] as const,
    buckets: STORE_BUCKETS,
    registers: [this.registry],
  });

  readonly storeErrors = new Counter({
    name: 'kvgate_store_errors_total',
    help: 'Store calls that failed or fell back to local state, by operation.',
    labelNames: ['operation'] as const,
    registers: [this.registry],
  });

  /** Stream metrics have no `pool`: a stream opens, and may fail, before any pool is chosen. */
  readonly streamsStarted = new Counter({
    name: 'kvgate_extproc_streams_total',
    help: 'ext_proc streams opened by Envoy (one per HTTP request).',
    registers: [this.registry],
  });

  readonly streamErrors = new Counter({
    name: 'kvgate_extproc_stream_errors_total',
    help: 'ext_proc streams ended in error, by reason (protocol_violation, idle_timeout, internal, write_failed).',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly openStreams = new Gauge({
    name: 'kvgate_extproc_streams_open',
    help: 'ext_proc streams currently open.',
    registers: [this.registry],
  });

  /**
   * No `pool`: a report that does not match the chosen worker says the proxy ignored the pick, a
   * proxy setting that is the same for every pool.
   */
  readonly servedEndpoints = new Counter({
    name: 'kvgate_served_endpoint_reports_total',
    help: 'Endpoint-picker mode: served-endpoint reports from the proxy, by whether they match the chosen worker (chosen, other, unknown).',
    labelNames: ['match'] as const,
    registers: [this.registry],
  });

  /**
   * Config re-reads (file change or SIGHUP) by outcome. A rejected file leaves the old config
   * running, which is safe, but the next pod started from that file fails: the gauge below is what
   * to alert on, as for Prometheus's own prometheus_config_last_reload_successful.
   */
  readonly configReloads = new Counter({
    name: 'kvgate_config_reloads_total',
    help: 'Config file re-reads by outcome: applied, unchanged, rejected (invalid; the running config stays).',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly configLastReloadSuccessful = new Gauge({
    name: 'kvgate_config_last_reload_successful',
    help: 'Whether the config file was valid when last read (1) or rejected, leaving an older config running (0).',
    registers: [this.registry],
  });

  readonly configRestartPending = new Gauge({
    name: 'kvgate_config_restart_pending',
    help: 'Settings the config file changes that apply only at the next restart (store, leases.ttl_s, ...).',
    registers: [this.registry],
  });

  constructor(opts: MetricsOptions = {}) {
    const pools = opts.pools;
    this.livePools = pools;
    this.liveWorkers = opts.workers;
    this.decisions = new Counter({
      name: 'kvgate_decisions_total',
      help: 'Routing decisions by outcome (affinity_hit, new, migrated, prefix_hit, unkeyed, shed, rejected, fallback, abandoned: the stream ended before the decision was answered) and pool (empty: none was chosen).',
      labelNames: ['outcome', 'pool'] as const,
      registers: [this.registry],
      collect() {
        // A pool a reload added is exported from the next scrape; inc by 0 creates a series and
        // leaves one that exists as it is.
        if (!pools) return;
        try {
          for (const pool of pools()) for (const o of DECISION_OUTCOMES) this.inc({ outcome: o, pool }, 0);
        } catch {
          // Metrics are best effort: a scrape must not fail on this.
        }
      },
    });
    const decisions = this.decisions;
    // Computed at scrape from the counters, so it can never disagree with them. Lifetime ratio;
    // for a windowed one use the PromQL in the README.
    new Gauge({
      name: 'kvgate_affinity_hit_ratio',
      help: 'Share of keyed routed requests that reached the worker already holding their key (affinity_hit / (affinity_hit + migrated + new)), since start.',
      registers: [this.registry],
      async collect() {
        const values = (await decisions.get()).values;
        // Summed over pools: this gauge is the whole gate's ratio (per pool, use the PromQL).
        const count = (o: DecisionOutcome) => values.reduce((n, v) => n + (v.labels.outcome === o ? v.value : 0), 0);
        const keyed = count('affinity_hit') + count('migrated') + count('new');
        this.set(keyed === 0 ? 0 : count('affinity_hit') / keyed);
      },
    });
    const fleet = opts.fleet;
    if (fleet) {
      const safeFleet = (): readonly WorkerView[] => {
        try {
          return fleet();
        } catch {
          return [];
        }
      };
      new Gauge({
        name: 'kvgate_worker_inflight',
        help: 'Requests in flight per worker as this gate sees them (all replicas on a shared store).',
        labelNames: ['worker'] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const w of safeFleet()) this.set({ worker: w.id }, w.inflight);
        },
      });
      new Gauge({
        name: 'kvgate_worker_max_inflight',
        help: 'In-flight limit per worker: at it, the worker gets no more requests.',
        labelNames: ['worker'] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const w of safeFleet()) this.set({ worker: w.id }, w.maxInflight);
        },
      });
      new Gauge({
        name: 'kvgate_worker_state',
        help: 'Worker state: 1 for the current state, 0 for the others (healthy, pressured, draining, down).',
        labelNames: ['worker', 'state'] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const w of safeFleet()) for (const s of WORKER_STATES) this.set({ worker: w.id, state: s }, w.state === s ? 1 : 0);
        },
      });
    }
    const logDrops = opts.logLinesDropped;
    new Counter({
      name: 'kvgate_log_lines_dropped_total',
      help: 'Log lines dropped because stdout did not take them as fast as they were written (the log buffer is bounded, logBufferMaxBytes).',
      registers: [this.registry],
      collect() {
        // The logger counts; the counter shows its count (a count only grows, so this is monotonic).
        let n = 0;
        try {
          n = logDrops?.() ?? 0;
        } catch {
          // Best effort, as every collect here: a scrape must not fail on this.
        }
        this.reset();
        this.inc(n);
      },
    });
    if (opts.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    // Every outcome and reason appears from the first scrape, so rate() works without gaps: the
    // config's pools at scrape (collect above), and the outcomes a request with no pool can have.
    for (const o of ['rejected', 'fallback', 'abandoned'] as const) this.decisions.inc({ outcome: o, pool: NO_POOL }, 0);
    for (const o of RELOAD_OUTCOMES) this.configReloads.inc({ outcome: o }, 0);
    // The config a gate starts with was read and validated, or it would not have started.
    this.configLastReloadSuccessful.set(1);
    this.configRestartPending.set(0);
  }

  /** Records one config re-read (ConfigReloader's onOutcome). */
  configReloaded(outcome: ReloadOutcome, restartNeeded: readonly string[]): void {
    this.configReloads.inc({ outcome });
    this.configLastReloadSuccessful.set(outcome === 'rejected' ? 0 : 1);
    // A rejected file says nothing about restart-only settings: the last valid file's count stands.
    if (outcome !== 'rejected') this.configRestartPending.set(restartNeeded.length);
  }

  /** The text exposition for `/metrics`. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    await this.dropGoneSeries();
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /**
   * Drops the series of pools and workers the running config no longer has. A series that is
   * never removed is exported for the life of the process, so after a reload that removed a pool
   * its counters stood still on every scrape, looking like a pool that gets no traffic, and
   * alerts or dashboards over `pool` kept listing it. Done at scrape rather than at reload so that
   * a request of the old pool that finishes after the reload, and records its outcome then, does
   * not bring a series back for good. Series of pools and workers that remain are not touched, so
   * their counters keep their values. A pool or worker that a later reload brings back starts
   * again from 0, which rate() reads as a counter reset.
   */
  private async dropGoneSeries(): Promise<void> {
    try {
      const pools = this.livePools?.();
      // No pool at all means no config yet (a scrape while the gate starts): nothing is gone.
      if (pools && pools.length > 0) {
        const keep = new Set<string>([...pools, NO_POOL]);
        for (const m of [this.decisions, this.sheds, this.classRequests, this.decisionSeconds]) await dropSeries(m, 'pool', keep);
      }
      const workers = this.liveWorkers?.();
      if (workers && workers.length > 0) await dropSeries(this.migrations, 'from', new Set(workers));
    } catch {
      // Metrics are best effort: a scrape must not fail on this.
    }
  }

  /** Runs a telemetry update; a bug in it must never reach the request path. */
  static safely(fn: () => void): void {
    try {
      fn();
    } catch {
      // Metrics are best effort by design.
    }
  }
}

/**
 * Removes each series of `metric` whose `label` is not in `keep`. prom-client removes a series by
 * its full label set, so the sets are read back from the metric (a histogram's bucket values carry
 * `le` as well, which is not one of its labels).
 */
async function dropSeries<T extends string>(metric: Counter<T> | Histogram<T>, label: T, keep: ReadonlySet<string>): Promise<void> {
  for (const v of (await metric.get()).values) {
    const value = v.labels[label];
    if (value === undefined || keep.has(String(value))) continue;
    const labels: Record<string, string | number> = {};
    for (const [k, x] of Object.entries(v.labels)) if (k !== 'le' && (typeof x === 'string' || typeof x === 'number')) labels[k] = x;
    metric.remove(labels as LabelValues<T>);
  }
}
