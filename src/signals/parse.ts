/**
 * Prometheus text → the signals kvgate routes on. Sample lines are parsed by a maintained parser
 * (parse-prometheus-text-format), after this module has kept only the lines of the metrics it reads
 * (samplesOf: where it is more tolerant than that strict parser); it then picks series and refuses
 * values that cannot be true (NaN, negative counts, KV use outside [0, 1]). Never throws: a scrape
 * is untrusted input.
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import type { LoraSignals, WorkerSignals } from '../routing/health.js';
import type { Engine } from '../config/vocabulary.js';
import { DCGM, ENGINE_METRICS, type EngineMetrics, type Selector } from './metric-names.js';

/**
 * Series of the metrics kvgate reads, past which a page is refused whole: an engine writes a few
 * per data-parallel rank, and vLLM's LoRA gauge one per change of its adapter lists, so real pages
 * stay in the hundreds; parsing is on the thread that answers Envoy, every scrape interval.
 */
export const MAX_WANTED_LINES = 20_000;
/**
 * Lines retried alone after the whole parse failed, past which the rest are skipped: each refused
 * line costs an exception, and a page of thousands of them would hold the thread that answers
 * Envoy for most of a second every scrape.
 */
export const MAX_REFUSED_LINES = 64;

/** Adapter names kept per list: a scrape is untrusted, and a real engine holds a handful. */
const MAX_ADAPTERS = 256;
const MAX_ADAPTER_CHARS = 256;

export interface ParseResult {
  signals: WorkerSignals;
  /** Values present but refused, and why (for logs). */
  problems: string[];
  /**
   * The oldest explicit sample timestamp among the metrics read (ms since the epoch, by the
   * exporter's clock), where any sample has one: the collector ages the page by it.
   */
  oldestSampleMs?: number;
}

interface Family {
  name: string;
  /** `timestamp_ms`: the sample's own timestamp, where the line has one (ms since the epoch). */
  metrics: Array<{ value?: string; labels?: Record<string, string>; timestamp_ms?: string }>;
}

type Sample = Family['metrics'][number];

export interface ParseOptions {
  /**
   * The worker's own GPUs on a DCGM page, by index (`gpu` label) or UUID (`UUID` label); absent:
   * every GPU on the page (config `workers[].dcgm_gpus`).
   */
  gpus?: readonly string[];
}

export function parseSignals(text: string, engine: Engine, opts: ParseOptions = {}): ParseResult {
  const problems: string[] = [];
  const names = namesOf(engine);
  const byName = samplesOf(text, names.wanted, problems);
  if (opts.gpus) ownGpus(byName, opts.gpus, problems);

  const m = ENGINE_METRICS[engine];
  const signals: WorkerSignals = {};
  const set = (field: 'running' | 'waiting' | 'kvUsage', sel: readonly Selector[], check: Check) => {
    const v = pick(byName, sel, field, check, problems);
    if (v !== undefined) signals[field] = v;
  };
  set('running', m.running, COUNT);
  set('waiting', m.waiting, COUNT);
  set('kvUsage', m.kvUsage, FRACTION);
  if (m.cacheInfo) {
    const labels = byName.get(m.cacheInfo.name)?.[0]?.labels;
    const bs = Number(labels?.[m.cacheInfo.blockSizeLabel]);
    const nb = Number(labels?.[m.cacheInfo.numBlocksLabel]);
    if (Number.isFinite(bs) && bs > 0) signals.blockSize = bs;
    if (Number.isFinite(nb) && nb > 0) signals.numGpuBlocks = nb;
  }
  if (m.loraInfo) {
    const lora = loraOf(byName.get(m.loraInfo.name), m.loraInfo, problems);
    if (lora) signals.lora = lora;
  }
  Object.assign(signals, framebuffer(byName, problems));
  const temp = pick(byName, [DCGM.temp], 'gpuTempC', NOT_NEGATIVE, problems);
  if (temp !== undefined) signals.gpuTempC = temp;
  const oldest = oldestTimestamp(byName, names.gauges);
  return { signals, problems, ...(oldest !== undefined ? { oldestSampleMs: oldest } : {}) };
}

/**
 * Per engine, the metric names parseSignals reads (`wanted`; DCGM's too: a DCGM page is parsed
 * alike) and, of those, the gauges that carry load (`gauges`: running, queued, KV use, DCGM's),
 * which alone age a page by their timestamps.
 */
const NAMES = new Map<Engine, { wanted: ReadonlySet<string>; gauges: ReadonlySet<string> }>();

function namesOf(engine: Engine): { wanted: ReadonlySet<string>; gauges: ReadonlySet<string> } {
  const known = NAMES.get(engine);
  if (known) return known;
  const m = ENGINE_METRICS[engine];
  const gauges = new Set([...m.running, ...m.waiting, ...m.kvUsage, ...Object.values(DCGM)].map((s) => s.name));
  const wanted = new Set(gauges);
  if (m.cacheInfo) wanted.add(m.cacheInfo.name);
  if (m.loraInfo) wanted.add(m.loraInfo.name);
  const names = { wanted, gauges };
  NAMES.set(engine, names);
  return names;
}

/**
 * The page's samples of the metrics kvgate reads, by name. Where the strict parser would void the
 * whole page for one line kvgate does not need, this keeps what it does need:
 * - comment lines are dropped before parsing: kvgate reads no HELP or TYPE text, and the parser
 *   throws on `# HELP name ` with empty text (what Python's prometheus_client writes for a metric
 *   documented with an empty string) and on a TYPE line with an extra word;
 * - only sample lines of wanted metrics are parsed, so a bad line elsewhere costs nothing (nor
 *   does parsing the histogram buckets that make up most of a vLLM page);
 * - the text handed to the parser ends with a newline: without one it drops the last sample;
 * - samples of one metric in several blocks are merged (the parser makes a family of each block);
 * - a wanted line the parser still refuses is skipped, reported, and the rest kept.
 */
function samplesOf(text: string, wanted: ReadonlySet<string>, problems: string[]): Map<string, Sample[]> {
  const lines: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    if (wanted.has(metricName(line))) lines.push(line);
  }
  const byName = new Map<string, Sample[]>();
  if (lines.length === 0) return byName;
  if (lines.length > MAX_WANTED_LINES) {
    problems.push(`${lines.length} series of the metrics kvgate reads, more than ${MAX_WANTED_LINES}: page refused`);
    return byName;
  }
  let families: Family[];
  try {
    families = parsePrometheusTextFormat(`${lines.join('\n')}\n`) as Family[];
  } catch (err) {
    families = [];
    let refused = 0;
    let i = 0;
    for (; i < lines.length && refused < MAX_REFUSED_LINES; i++) {
      try {
        for (const f of parsePrometheusTextFormat(`${lines[i]}\n`) as Family[]) families.push(f);
      } catch {
        refused++;
      }
    }
    const gaveUp = i < lines.length ? `; gave up after ${MAX_REFUSED_LINES} refused lines, ${lines.length - i} more skipped` : '';
    problems.push(`${refused} sample line(s) refused by the parser and skipped${gaveUp}: ${(err as Error).message.slice(0, 200)}`);
  }
  for (const f of families) {
    if (!f || typeof f.name !== 'string' || !Array.isArray(f.metrics)) continue;
    const known = byName.get(f.name);
    if (known) for (const s of f.metrics) known.push(s);
    else byName.set(f.name, f.metrics);
  }
  return byName;
}

/** A sample's value; NaN where it has none (`name{` or a bare name: the parser reads "", which Number() makes 0). */
function sampleValue(s: Sample): number {
  return s.value ? Number(s.value) : NaN;
}

/**
 * The oldest explicit timestamp of the samples read. An exporter that stamps its samples says when
 * each value was true (the Prometheus text format's optional timestamp): a frozen or cached page
 * keeps serving old timestamps, and only they tell it from a live one.
 */
function oldestTimestamp(byName: ReadonlyMap<string, Sample[]>, gauges: ReadonlySet<string>): number | undefined {
  let oldest: number | undefined;
  for (const [name, series] of byName) {
    // Only the load gauges age a page: an info metric (cache_config_info, a LoRA series of an
    // old adapter set) is written once and would keep an exporter that stamps series by their
    // last change looking stale forever.
    if (!gauges.has(name)) continue;
    for (const s of series) {
      if (!s.timestamp_ms) continue;
      const t = Number(s.timestamp_ms);
      if (Number.isFinite(t) && (oldest === undefined || t < oldest)) oldest = t;
    }
  }
  return oldest;
}

/** A sample line's metric name: up to its labels or its value, as the parser reads it. */
function metricName(line: string): string {
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 123 /* { */ || c === 32 /* space */ || c === 9 /* tab */) return line.slice(0, i);
  }
  return line;
}

/**
 * The current series of the LoRA gauge (its value is the update's time: the greatest is the
 * latest), read into adapter lists. A series without a valid `max_lora` is refused.
 *
 * vLLM writes a new series for every change of the lists and keeps the old ones (vllm/v1/metrics/
 * loggers.py, `set_to_current_time` on the labels of the moment), and once its requests drain the
 * newest series lists no adapter although the adapters stay loaded. As GIE does
 * (pkg/epp/backend/metrics/metrics.go `getLatestLoraMetric`), series whose running and waiting
 * lists are both empty are passed over; only when every series is empty is the newest one read.
 */
function loraOf(series: readonly Sample[] | undefined, sel: NonNullable<EngineMetrics['loraInfo']>, problems: string[]): LoraSignals | undefined {
  if (!series || series.length === 0) return undefined;
  let latest: Sample | undefined;
  let at = -Infinity;
  let latestListing: Sample | undefined;
  let listingAt = -Infinity;
  for (const s of series) {
    const v = sampleValue(s);
    if (!Number.isFinite(v)) continue;
    if (v >= at) {
      latest = s;
      at = v;
    }
    if (v >= listingAt && (s.labels?.[sel.runningLabel] || s.labels?.[sel.waitingLabel])) {
      latestListing = s;
      listingAt = v;
    }
  }
  latest = latestListing ?? latest;
  if (!latest) {
    problems.push(`${sel.name} has no series with a finite value`);
    return undefined;
  }
  const labels = latest.labels ?? {};
  const max = Number(labels[sel.maxLabel]);
  if (!Number.isInteger(max) || max < 0) {
    problems.push(`${sel.name} ${sel.maxLabel}="${String(labels[sel.maxLabel] ?? '').slice(0, 32)}" is not a count`);
    return undefined;
  }
  return { running: adapterList(labels[sel.runningLabel]), waiting: adapterList(labels[sel.waitingLabel]), maxLora: max };
}

function adapterList(raw: string | undefined): string[] {
  if (!raw) return [];
  const out = new Set<string>();
  for (const part of raw.split(',')) {
    const name = part.trim();
    if (name === '' || name.length > MAX_ADAPTER_CHARS) continue;
    out.add(name);
    if (out.size >= MAX_ADAPTERS) break;
  }
  return [...out];
}

/**
 * Labels that tell copies of one engine's figures apart, not different engines. With SGLang's
 * `--enable-metrics-for-all-schedulers` every tensor-, pipeline- and expert-parallel rank of a
 * data-parallel group reports the same batch under its own `tp_rank`/`pp_rank`/`moe_ep_rank`
 * (SGLang scheduler_metrics_mixin.py, the collector's labels): counted once, as the largest copy.
 * `dp_rank` (SGLang) and `engine` (vLLM) name different engines, whose counts add up.
 */
const RANK_LABELS = ['tp_rank', 'pp_rank', 'moe_ep_rank'] as const;
/**
 * SGLang's priority label. With priority scheduling on, `_log_gauge_queue_count`
 * (python/sglang/srt/observability/metrics_collector.py) writes each queue count twice: the total
 * under `priority=""` and the breakdown under `priority="<n>"`. The total is read; the breakdown
 * only where no total is written.
 */
const PRIORITY_LABEL = 'priority';

/** What a true value of one series looks like, and what is said of one that is not. */
interface Check {
  ok(v: number): boolean;
  says: string;
}
const nonNegative = (v: number): boolean => Number.isFinite(v) && v >= 0;
const COUNT: Check = { ok: nonNegative, says: 'is not a count' };
const FRACTION: Check = { ok: (v) => nonNegative(v) && v <= 1, says: 'is outside [0, 1]' };
/** A gauge that cannot be negative (MiB, °C): the same test as a count, said of a gauge. */
const NOT_NEGATIVE: Check = { ok: nonNegative, says: 'is invalid' };

/**
 * The value of the first selector that has series. Several series (per model, per GPU) combine
 * conservatively for pressure: counts are summed, ratios and gauges take the maximum. A series
 * whose value cannot be true (NaN, ±Inf, negative, out of range) is refused on its own and
 * reported: the other series still say something true (one engine's NaN used to void the signal
 * for all of them). Undefined when no series is left.
 */
function pick(byName: ReadonlyMap<string, Sample[]>, selectors: readonly Selector[], field: string, check: Check, problems: string[]): number | undefined {
  for (const sel of selectors) {
    const good = validSeries(byName, sel, field, check, problems);
    if (good === undefined) continue;
    if (good.length === 0) return undefined;
    const isRatioOrGauge = /perc|usage|utilization|TEMP|fraction|FB_/i.test(sel.name) || sel.label?.[1] === 'fraction';
    return isRatioOrGauge ? maxOf(good) : sumCounts(good);
  }
  return undefined;
}

/** A selector's series with true values (see pick); undefined when it has no series at all. */
function validSeries(byName: ReadonlyMap<string, Sample[]>, sel: Selector, field: string, check: Check, problems: string[]): Sample[] | undefined {
  const all = byName.get(sel.name);
  if (!all) return undefined;
  const series = all.filter((s) => !sel.label || s.labels?.[sel.label[0]] === sel.label[1]);
  if (series.length === 0) return undefined;
  const good = series.filter((s) => check.ok(sampleValue(s)));
  if (good.length < series.length) {
    const bad = series.find((s) => !check.ok(sampleValue(s)))!;
    const of = series.length > 1 ? ` (${series.length - good.length} of ${series.length} series ignored)` : '';
    problems.push(`${field}=${sampleValue(bad)} ${check.says}${of}`);
  }
  return good;
}

/**
 * GPU framebuffer used and free (DCGM), of the fullest GPU. Used and free are paired per GPU (its
 * UUID, else its index; per MIG instance where there are some): the largest used and the largest
 * free each on their own may come from different GPUs, and 70000 used on one GPU with 70000 free
 * on another read as half full when the first is 87.5% full. A figure with nothing to pair with
 * (the other metric absent) is kept alone, as its largest value.
 */
function framebuffer(byName: ReadonlyMap<string, Sample[]>, problems: string[]): Pick<WorkerSignals, 'fbUsedMiB' | 'fbFreeMiB'> {
  const used = validSeries(byName, DCGM.fbUsed, 'fbUsedMiB', NOT_NEGATIVE, problems);
  const free = validSeries(byName, DCGM.fbFree, 'fbFreeMiB', NOT_NEGATIVE, problems);
  if (!used?.length || !free?.length) {
    return { ...(used?.length ? { fbUsedMiB: maxOf(used) } : {}), ...(free?.length ? { fbFreeMiB: maxOf(free) } : {}) };
  }
  const freeByGpu = new Map<string, number>();
  for (const s of free) freeByGpu.set(gpuKey(s), Math.max(freeByGpu.get(gpuKey(s)) ?? -Infinity, sampleValue(s)));
  let worst: { fbUsedMiB: number; fbFreeMiB: number; ratio: number } | undefined;
  for (const s of used) {
    const u = sampleValue(s);
    const f = freeByGpu.get(gpuKey(s));
    if (f === undefined) continue;
    const ratio = u + f > 0 ? u / (u + f) : 0;
    if (!worst || ratio > worst.ratio) worst = { fbUsedMiB: u, fbFreeMiB: f, ratio };
  }
  if (!worst) {
    problems.push('DCGM framebuffer used and free name different GPUs: neither is read');
    return {};
  }
  return { fbUsedMiB: worst.fbUsedMiB, fbFreeMiB: worst.fbFreeMiB };
}

/**
 * Keeps only the worker's own GPUs in the DCGM families: a DCGM exporter reports every GPU of its
 * node, and where workers share a node, another worker's hot or full GPU is not this one's.
 */
function ownGpus(byName: Map<string, Sample[]>, gpus: readonly string[], problems: string[]): void {
  const own = new Set(gpus);
  for (const sel of Object.values(DCGM)) {
    const all = byName.get(sel.name);
    if (!all) continue;
    const mine = all.filter((s) => own.has(s.labels?.['gpu'] ?? '\u0000') || own.has(s.labels?.['UUID'] ?? '\u0000'));
    if (mine.length === 0) problems.push(`${sel.name} has no series for dcgm_gpus ${[...own].join(',').slice(0, 200)}`);
    byName.set(sel.name, mine);
  }
}

/** Which GPU a DCGM series is about: the DCGM exporter's `UUID`, else `gpu` (index), per MIG instance (`GPU_I_ID`). */
function gpuKey(s: Sample): string {
  const l = s.labels ?? {};
  return `${l['Hostname'] ?? ''}\u0000${l['UUID'] ?? l['gpu'] ?? ''}\u0000${l['GPU_I_ID'] ?? ''}`;
}

/** The largest value, by a loop: Math.max(...values) throws a RangeError past ~125k arguments. */
function maxOf(series: readonly Sample[]): number {
  let max = -Infinity;
  for (const s of series) max = Math.max(max, sampleValue(s));
  return max;
}

/**
 * A count over several series: different engines add up, copies of one engine's figure (ranks of
 * one data-parallel group, RANK_LABELS) count once, and a priority breakdown is not added to the
 * total it breaks down (PRIORITY_LABEL).
 */
function sumCounts(series: readonly Sample[]): number {
  // The common page (vLLM; SGLang without these options) has none of these labels: a plain sum.
  if (!series.some((s) => s.labels !== undefined && (s.labels[PRIORITY_LABEL] !== undefined || RANK_LABELS.some((l) => s.labels![l] !== undefined)))) {
    let sum = 0;
    for (const s of series) sum += sampleValue(s);
    return sum;
  }
  // Per engine (every other label: SGLang's dp_rank, vLLM's engine), per priority: the largest copy across ranks.
  const engines = new Map<string, Map<string, number>>();
  for (const s of series) {
    const labels = s.labels ?? {};
    const key = Object.keys(labels)
      .filter((k) => k !== PRIORITY_LABEL && !(RANK_LABELS as readonly string[]).includes(k))
      .sort()
      .map((k) => `${k}\u0000${labels[k]}`)
      .join('\u0001');
    let byPriority = engines.get(key);
    if (!byPriority) engines.set(key, (byPriority = new Map()));
    // An absent label and an empty one are the same series to Prometheus.
    const priority = labels[PRIORITY_LABEL] ?? '';
    const v = sampleValue(s);
    byPriority.set(priority, Math.max(byPriority.get(priority) ?? -Infinity, v));
  }
  let sum = 0;
  for (const byPriority of engines.values()) {
    const total = byPriority.get('');
    if (total !== undefined && byPriority.size > 1) sum += total;
    else for (const v of byPriority.values()) sum += v;
  }
  return sum;
}
