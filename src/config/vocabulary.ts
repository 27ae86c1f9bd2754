/**
 * Names the config accepts that the rooms above it also speak: routing modes and engine kinds.
 * They live here, at the bottom of the house, so the config imports nothing above itself, and the
 * rooms above import them from here.
 */

/**
 * How a request picks its worker (a per-gate default, and a per-route knob):
 * session: sticky to the session's worker, else least loaded (the article's algorithm);
 * prefix: score every worker on prefix overlap, load and KV pressure, ignoring sessions;
 * both: sticky to the session's worker while it can take it, else scored (the default);
 * least_loaded: load alone.
 */
export type PolicyMode = 'session' | 'prefix' | 'both' | 'least_loaded';
export const POLICY_MODES: readonly PolicyMode[] = ['session', 'prefix', 'both', 'least_loaded'];

/** Model servers whose Prometheus metric names kvgate knows (src/signals/metric-names.ts). */
export const ENGINES = ['vllm', 'sglang', 'trtllm', 'triton'] as const;
export type Engine = (typeof ENGINES)[number];
