/**
 * The fake worker's `/metrics`: vLLM's Prometheus metrics (names, types and labels as vLLM v1
 * exposes them), optionally NVIDIA DCGM exporter's GPU metrics, produced by prom-client from the
 * engine's live state, and bent by the test hooks (controls.ts) into the failures a scraper must
 * survive.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ControlState } from './controls.js';
import type { FakeWorkerOptions } from './defaults.js';
import type { FakeEngine } from './engine.js';

export const CONTENT_TYPE = Registry.PROMETHEUS_CONTENT_TYPE;

/** Families of the KV-usage gauge under each naming (see METRIC_NAMES). */
const KV_CURRENT = 'vllm:kv_cache_usage_perc';
const KV_LEGACY = 'vllm:gpu_cache_usage_perc';
const DCGM_FAMILIES = new Set(['DCGM_FI_DEV_FB_USED', 'DCGM_FI_DEV_FB_FREE', 'DCGM_FI_DEV_GPU_TEMP']);

/** vLLM's TTFT histogram buckets (vllm/v1/metrics/loggers.py), up to the ones a fake worker reaches. */
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];

/** A GPU's idle and fully busy temperatures, °C: what an H100 SXM shows under air or liquid cooling. */
const IDLE_TEMP_C = 35;
const BUSY_TEMP_C = 75;

type MetricsOptions = Pick<FakeWorkerOptions, 'id' | 'model' | 'blockTokens' | 'maxBatch' | 'gpuMemoryMib' | 'gpuMemoryUtilization' | 'loraModules' | 'maxLoras'>;

export class WorkerMetrics {
  readonly registry = new Registry();
  private readonly names: string[] = [];

  constructor(
    engine: FakeEngine,
    opts: MetricsOptions,
    private readonly controls: () => ControlState,
  ) {
    const reg = [this.registry];
    const labels = { model_name: opts.model, engine: '0' };
    const gauge = (name: string, help: string, value: () => number) => {
      const shape = this.shape.bind(this);
      this.names.push(name);
      new Gauge({
        name,
        help,
        labelNames: ['model_name', 'engine'],
        registers: reg,
        collect() {
          this.set(labels, shape(value()));
        },
      });
    };
    const counter = (name: string, help: string, total: () => number) => {
      this.names.push(name);
      let last = 0;
      const metric = new Counter({
        name,
        help,
        labelNames: ['model_name', 'engine'],
        registers: reg,
        collect() {
          const now = total();
          if (now > last) this.inc(labels, now - last);
          last = now;
        },
      });
      // vLLM shows a counter at 0 from the start; a labelled prom-client counter shows nothing until its first inc.
      metric.inc(labels, 0);
    };
    const c = () => this.controls();
    gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', () => c().requests_running ?? engine.requestsRunning);
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', () => c().requests_waiting ?? engine.requestsWaiting);
    gauge(KV_CURRENT, 'KV-cache usage. 1 means 100 percent usage.', () => c().kv_usage ?? engine.kvUsage);
    gauge(KV_LEGACY, 'GPU KV-cache usage. 1 means 100 percent usage. (deprecated: use vllm:kv_cache_usage_perc)', () => c().kv_usage ?? engine.kvUsage);
    counter('vllm:prefix_cache_queries_total', 'Prefix cache queries, in terms of number of queried tokens.', () => engine.totals.prefixQueryTokens);
    counter('vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens.', () => engine.totals.prefixHitTokens);
    counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.', () => engine.totals.promptTokens);
    counter('vllm:generation_tokens_total', 'Number of generation tokens processed.', () => engine.totals.generationTokens);

    this.names.push('vllm:cache_config_info');
    const info = new Gauge({
      name: 'vllm:cache_config_info',
      help: 'Information of the LLMEngine CacheConfig',
      labelNames: ['block_size', 'num_gpu_blocks', 'enable_prefix_caching', 'cache_dtype', 'gpu_memory_utilization', 'engine'],
      registers: reg,
    });
    info.set(
      {
        block_size: String(opts.blockTokens),
        num_gpu_blocks: String(engine.numGpuBlocks),
        enable_prefix_caching: 'True',
        cache_dtype: 'auto',
        gpu_memory_utilization: String(opts.gpuMemoryUtilization),
        engine: '0',
      },
      1,
    );

    if (opts.loraModules.length > 0) {
      // As vLLM (v1 loggers): one series, its labels the current adapters, its value the time of the update.
      this.names.push('vllm:lora_requests_info');
      new Gauge({
        name: 'vllm:lora_requests_info',
        help: 'Running stats on lora requests.',
        labelNames: ['max_lora', 'waiting_lora_adapters', 'running_lora_adapters'],
        registers: reg,
        collect() {
          this.reset();
          this.set({ max_lora: String(opts.maxLoras), waiting_lora_adapters: engine.adaptersWaiting.join(','), running_lora_adapters: engine.adaptersRunning.join(',') }, Date.now() / 1000);
        },
      });
    }

    this.names.push('vllm:time_to_first_token_seconds');
    const ttft = new Histogram({
      name: 'vllm:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds.',
      labelNames: ['model_name', 'engine'],
      buckets: TTFT_BUCKETS,
      registers: reg,
    });
    ttft.zero(labels);
    engine.onFirstToken = (s) => ttft.observe(labels, s);

    const gpu = { gpu: '0', UUID: `GPU-fake-${opts.id}`, device: 'nvidia0', modelName: 'NVIDIA H100 80GB HBM3', Hostname: opts.id };
    const dcgm = (name: string, help: string, value: () => number) => {
      const shape = this.shape.bind(this);
      this.names.push(name);
      new Gauge({
        name,
        help,
        labelNames: Object.keys(gpu),
        registers: reg,
        collect() {
          this.set(gpu, shape(value()));
        },
      });
    };
    const usedFrac = () => c().gpu_memory_used_frac ?? opts.gpuMemoryUtilization;
    dcgm('DCGM_FI_DEV_FB_USED', 'Framebuffer memory used (in MiB).', () => Math.round(opts.gpuMemoryMib * usedFrac()));
    dcgm('DCGM_FI_DEV_FB_FREE', 'Framebuffer memory free (in MiB).', () => opts.gpuMemoryMib - Math.round(opts.gpuMemoryMib * usedFrac()));
    dcgm('DCGM_FI_DEV_GPU_TEMP', 'GPU temperature (in C).', () => {
      const busy = Math.min(1, engine.requestsRunning / opts.maxBatch);
      return c().gpu_temp_c ?? Math.round(IDLE_TEMP_C + (BUSY_TEMP_C - IDLE_TEMP_C) * busy);
    });
  }

  /**
   * The exposition text with the current values: the families the controls enable (naming of
   * the KV gauge, DCGM on or off), gauges bent to NaN or negative when asked.
   */
  async text(): Promise<string> {
    const c = this.controls();
    const parts: string[] = [];
    for (const name of this.names) {
      if (name === KV_CURRENT && c.metric_names === 'legacy') continue;
      if (name === KV_LEGACY && c.metric_names === 'current') continue;
      if (DCGM_FAMILIES.has(name) && !c.dcgm) continue;
      parts.push(await this.registry.getSingleMetricAsString(name));
    }
    return `${parts.join('\n')}\n`;
  }

  private shape(v: number): number {
    const mode = this.controls().metrics;
    if (mode === 'nan') return NaN;
    if (mode === 'negative') return -Math.abs(v) - 1;
    return v;
  }
}

/** Stamps every sample line with a Prometheus timestamp (ms since the epoch). */
export function withTimestamps(text: string, atMs: number): string {
  return text
    .split('\n')
    .map((line) => (line === '' || line.startsWith('#') ? line : `${line} ${atMs}`))
    .join('\n');
}

/** The text cut off in the middle of a line past its half, as a dropped connection leaves it. */
export function truncated(text: string): string {
  let at = Math.floor(text.length / 2);
  const lineStart = text.indexOf('\n', at);
  if (lineStart >= 0 && lineStart + 1 < text.length) at = lineStart + 1;
  const lineEnd = text.indexOf('\n', at);
  const end = lineEnd > at ? lineEnd : text.length;
  return text.slice(0, at + Math.max(1, Math.floor((end - at) / 2)));
}

/** What a misconfigured proxy or a crashed exporter serves in place of metrics. */
export const GARBAGE_TEXT =
  '<html><head><title>502 Bad Gateway</title></head><body>upstream connect error</body></html>\n' +
  'vllm:num_requests_running{model_name="llama" engine=0 twelve\n' +
  '\u0000\u0001\u0002 {{{ }}} ### TYPE ??? gauge\n';
