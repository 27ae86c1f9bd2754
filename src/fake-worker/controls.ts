/**
 * Test hooks: what a test (or an operator rehearsing an incident) can force on a fake worker, by
 * flag at start or at any time with `POST /control` (a JSON object of the fields to change; `null`
 * clears a forced value; `reset: true` first returns everything to how the flags set it at start).
 *
 * Forced values change what `/metrics` reports, not what the engine does: a worker "at 90% KV"
 * still serves requests at its normal pace, so a test can tell the gate's reaction to the signal
 * apart from the worker's own slowness (which `slow_factor` adds on purpose).
 */
import { z } from 'zod';

/**
 * How `/metrics` answers:
 *  ok        the current values;
 *  error     500;
 *  timeout   never answers (the connection stays open until the client gives up or the worker stops);
 *  garbage   200 with text that is not the Prometheus format;
 *  partial   200 with the current text cut off in the middle of a line;
 *  stale     200 with the values frozen when this mode was set, each sample stamped with that time
 *            (Prometheus sample timestamps), so a scraper that reads timestamps sees their age;
 *  nan       200 with NaN for every gauge;
 *  negative  200 with every gauge negative;
 *  empty     200 with an empty body (every metric missing).
 */
export const METRICS_MODES = ['ok', 'error', 'timeout', 'garbage', 'partial', 'stale', 'nan', 'negative', 'empty'] as const;
export type MetricsMode = (typeof METRICS_MODES)[number];

/**
 * Which names the KV-usage gauge goes by: vLLM renamed `vllm:gpu_cache_usage_perc` to
 * `vllm:kv_cache_usage_perc` (v0.10/0.11 era), so a fleet can show either or, during the
 * deprecation window, both.
 */
export const METRIC_NAMES = ['both', 'current', 'legacy'] as const;
export type MetricNames = (typeof METRIC_NAMES)[number];

export const HEALTH_MODES = ['ok', 'error', 'timeout'] as const;
export type HealthMode = (typeof HEALTH_MODES)[number];

export interface ControlState {
  /** Forced `vllm:kv_cache_usage_perc` (0..1 normally; any finite number, to test a scraper's range checks). */
  kv_usage: number | null;
  requests_running: number | null;
  requests_waiting: number | null;
  /** Forced `DCGM_FI_DEV_GPU_TEMP`, °C. */
  gpu_temp_c: number | null;
  /** Forced share of the framebuffer in use (DCGM FB_USED / (USED + FREE)). */
  gpu_memory_used_frac: number | null;
  metrics: MetricsMode;
  /** Delay before `/metrics` answers, ms (a slow exporter that still answers). */
  metrics_delay_ms: number;
  metric_names: MetricNames;
  /** Expose the DCGM GPU metrics on `/metrics`. */
  dcgm: boolean;
  /** How `GET /health` answers: 200, 503, or never. */
  health: HealthMode;
  /** Stretches prefill and decode: 3 = three times slower (below 1 is faster). */
  slow_factor: number;
}

export function normalControls(dcgm: boolean): ControlState {
  return {
    kv_usage: null,
    requests_running: null,
    requests_waiting: null,
    gpu_temp_c: null,
    gpu_memory_used_frac: null,
    metrics: 'ok',
    metrics_delay_ms: 0,
    metric_names: 'both',
    dcgm,
    health: 'ok',
    slow_factor: 1,
  };
}

const forcedNumber = z.number().finite().nullable();
const forcedCount = z.number().int().nonnegative().nullable();

/** The body of `POST /control`: every field optional, unknown fields refused. */
export const controlPatchSchema = z.strictObject({
  reset: z.boolean().optional(),
  kv_usage: forcedNumber.optional(),
  requests_running: forcedCount.optional(),
  requests_waiting: forcedCount.optional(),
  gpu_temp_c: forcedNumber.optional(),
  gpu_memory_used_frac: forcedNumber.optional(),
  metrics: z.enum(METRICS_MODES).optional(),
  metrics_delay_ms: z.number().int().min(0).max(600_000).optional(),
  metric_names: z.enum(METRIC_NAMES).optional(),
  dcgm: z.boolean().optional(),
  health: z.enum(HEALTH_MODES).optional(),
  slow_factor: z.number().positive().max(1000).optional(),
});

export type ControlPatch = z.infer<typeof controlPatchSchema>;

/** Validates a patch; on failure, one line per problem with its field. */
export function parseControlPatch(raw: unknown): { ok: true; value: ControlPatch } | { ok: false; problems: string[] } {
  const r = controlPatchSchema.safeParse(raw);
  if (r.success) return { ok: true, value: r.data };
  return { ok: false, problems: r.error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(body)'}: ${i.message}`) };
}

/** The state after a patch (a fresh object; `reset` first returns to `initial`, the state at start). */
export function applyControlPatch(state: ControlState, patch: ControlPatch, initial: ControlState): ControlState {
  const next: ControlState = patch.reset ? { ...initial } : { ...state };
  for (const [k, v] of Object.entries(patch)) {
    if (k === 'reset' || v === undefined) continue;
    (next as unknown as Record<string, unknown>)[k] = v;
  }
  return next;
}
