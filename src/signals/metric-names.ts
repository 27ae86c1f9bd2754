/**
 * Where each signal lives in each model server's Prometheus output. Names from the engines' own
 * metrics as the Gateway API Inference Extension and llm-d read them (llm-d-router
 * `pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go`; GIE
 * `docs/proposals/003-model-server-protocol/README.md`). Each signal
 * lists aliases in order: a metric renamed between server versions (vLLM's
 * `gpu_cache_usage_perc` → `kv_cache_usage_perc`) is found under either name.
 */

import type { Engine } from '../config/vocabulary.js';

/** A metric name, optionally narrowed to series whose label has a value. */
export interface Selector {
  name: string;
  label?: [string, string];
}

export interface EngineMetrics {
  running: Selector[];
  waiting: Selector[];
  /** KV-cache use in [0, 1]. */
  kvUsage: Selector[];
  /** Labels of a *_info metric carrying the KV block size and block count, when the engine has one. */
  cacheInfo?: { name: string; blockSizeLabel: string; numBlocksLabel: string };
  /**
   * The LoRA adapter gauge, when the engine has one: vLLM's `vllm:lora_requests_info`, whose labels
   * list the adapters of running and waiting requests (comma-separated) and the most adapters one
   * batch may hold; its value is the wall-clock time of the update, so the latest series is current
   * (vLLM docs/design/metrics.md "LoRA Metrics"; the GIE model-server protocol reads it the same way).
   */
  loraInfo?: { name: string; runningLabel: string; waitingLabel: string; maxLabel: string };
}

export const ENGINE_METRICS: Readonly<Record<Engine, EngineMetrics>> = {
  vllm: {
    running: [{ name: 'vllm:num_requests_running' }],
    waiting: [{ name: 'vllm:num_requests_waiting' }],
    kvUsage: [{ name: 'vllm:kv_cache_usage_perc' }, { name: 'vllm:gpu_cache_usage_perc' }],
    cacheInfo: { name: 'vllm:cache_config_info', blockSizeLabel: 'block_size', numBlocksLabel: 'num_gpu_blocks' },
    loraInfo: { name: 'vllm:lora_requests_info', runningLabel: 'running_lora_adapters', waitingLabel: 'waiting_lora_adapters', maxLabel: 'max_lora' },
  },
  sglang: {
    running: [{ name: 'sglang:num_running_reqs' }],
    waiting: [{ name: 'sglang:num_queue_reqs' }],
    kvUsage: [{ name: 'sglang:token_usage' }],
    cacheInfo: { name: 'sglang:cache_config_info', blockSizeLabel: 'page_size', numBlocksLabel: 'num_pages' },
  },
  trtllm: {
    running: [{ name: 'trtllm_num_requests_running' }],
    waiting: [{ name: 'trtllm_num_requests_waiting' }],
    kvUsage: [{ name: 'trtllm_kv_cache_utilization' }],
  },
  triton: {
    running: [{ name: 'nv_trt_llm_request_metrics', label: ['request_type', 'scheduled'] }],
    waiting: [{ name: 'nv_trt_llm_request_metrics', label: ['request_type', 'waiting'] }],
    kvUsage: [{ name: 'nv_trt_llm_kv_cache_block_metrics', label: ['kv_cache_block_type', 'fraction'] }],
  },
};

/** NVIDIA DCGM exporter: GPU framebuffer (MiB) and temperature (°C). */
export const DCGM = {
  fbUsed: { name: 'DCGM_FI_DEV_FB_USED' },
  fbFree: { name: 'DCGM_FI_DEV_FB_FREE' },
  temp: { name: 'DCGM_FI_DEV_GPU_TEMP' },
} as const satisfies Record<string, Selector>;
