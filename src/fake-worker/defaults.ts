/**
 * The fake worker's defaults, each with its reason. They describe one vLLM engine serving
 * Llama-3-8B on one H100, the same GPU the simulator's cost model describes (src/sim/cost-model.ts,
 * where each figure's source is given), so a fake fleet behaves like the one
 * `kvgate sim` reasons about, only in real time. Tests and the demo shrink them.
 */

export interface FakeWorkerOptions {
  /** Shown in logs, in `x-fake-worker-id` on every response, and in the DCGM labels. */
  id: string;
  /** The model name `/v1/models` lists and responses echo when a request names none. */
  model: string;
  host: string;
  /** 0 asks the OS for a free port. */
  port: number;
  /** KV cache capacity in tokens; also the longest prompt + output accepted (max_model_len). */
  kvCapacityTokens: number;
  /** Tokens per KV block (vLLM's `--block-size`). */
  blockTokens: number;
  /** Prefill throughput on uncached prompt tokens. */
  prefillTokensPerS: number;
  /** Fixed cost of a prefill even on a full prefix hit (one forward pass plus scheduling). */
  prefillOverheadMs: number;
  /** Time between two generated tokens of one sequence. */
  decodeMsPerToken: number;
  /** Most sequences running at once (vLLM's `--max-num-seqs`); the rest wait. */
  maxBatch: number;
  /** Most requests waiting for a batch slot; past it the worker answers 503. */
  maxWaiting: number;
  /** Tokens generated when a request sets no `max_tokens` / `max_completion_tokens`. */
  defaultOutputTokens: number;
  /** Largest request body read; past it the answer is 413. */
  maxBodyBytes: number;
  /** Expose DCGM-exporter GPU metrics on `/metrics` next to vLLM's. */
  dcgm: boolean;
  /** Framebuffer size DCGM reports, MiB. */
  gpuMemoryMib: number;
  /** Share of the framebuffer vLLM claims at start (weights + preallocated KV), used or not. */
  gpuMemoryUtilization: number;
  /**
   * LoRA adapters served (vLLM's `--lora-modules` names): a request whose `model` is one runs with
   * it, and `/metrics` carries `vllm:lora_requests_info`. Empty: no LoRA, no such metric.
   */
  loraModules: readonly string[];
  /** Most adapters in one batch (vLLM's `--max-loras`), reported as `max_lora`. */
  maxLoras: number;
}

export const FAKE_WORKER_DEFAULTS: Readonly<FakeWorkerOptions> = Object.freeze({
  id: 'fake-worker',
  /** What the project's examples and tests send. */
  model: 'llama',
  /** A simulator has no business on a public interface unless asked. */
  host: '127.0.0.1',
  port: 0,
  /** ~400k tokens: Llama-3-8B BF16 on an 80 GB H100 (an estimate, as DEFAULT_FLEET). */
  kvCapacityTokens: 400_000,
  /** vLLM's default block size on CUDA (vLLM `docs/design/prefix_caching.md`). */
  blockTokens: 16,
  /** ~25-30k prompt tok/s for 8B BF16 on one H100 in vLLM; the midpoint, as DEFAULT_COST_MODEL. */
  prefillTokensPerS: 27_500,
  /** A full prefix hit on an 8k prompt still takes ~15-30 ms to first token (an estimate, as DEFAULT_COST_MODEL). */
  prefillOverheadMs: 15,
  /** One decode step reads 16 GB of weights at ~70% of 3.35 TB/s ≈ 7 ms (as DEFAULT_COST_MODEL). */
  decodeMsPerToken: 7,
  /** vLLM's `--max-num-seqs` default. */
  maxBatch: 256,
  /** Four batches' worth: a queue this deep already means seconds of waiting; deeper is a flood. */
  maxWaiting: 1024,
  /** Short answers keep tests and the demo quick; real clients set max_tokens anyway. */
  defaultOutputTokens: 16,
  /** The gate's own `limits.max_body_bytes` default: what Envoy would let through. */
  maxBodyBytes: 8 * 1024 * 1024,
  /** DCGM runs as a separate exporter in real fleets; off unless a test or demo wants GPU signals. */
  dcgm: false,
  /** What nvidia-smi reports for an H100 80GB HBM3. */
  gpuMemoryMib: 81_559,
  /** vLLM's `--gpu-memory-utilization` default: it takes 90% of the GPU at start, busy or idle. */
  gpuMemoryUtilization: 0.9,
  /** vLLM serves no adapters unless started with `--enable-lora`. */
  loraModules: [],
  /** vLLM's `--max-loras` default. */
  maxLoras: 1,
});

/**
 * Distinct prompt blocks the worker remembers ids for before it starts a fresh cache (when idle).
 * The KV cache indexes blocks by dense ids (src/sim/kv-cache.ts), and the map from content hash
 * to id only grows; 2M ids (~150 MB with the cache's arrays) is far past any test or demo, and
 * bounds a long benchmark run.
 */
export const MAX_INTERNED_BLOCKS = 2_000_000;
