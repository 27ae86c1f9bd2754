/**
 * What a GPU worker costs in time and memory. Every default is a figure for Llama-3-8B in BF16 on
 * one H100 SXM under vLLM, each with its source or basis below (a published figure, or arithmetic
 * from published ones where marked as an estimate). All are overridable.
 */

export interface CostModel {
  /** KV bytes per token: 2 × 32 layers × 8 KV heads × 128 dims × 2 bytes = 128 KiB (Llama-3-8B's config). */
  kvBytesPerToken: number;
  /**
   * Prefill throughput on uncached tokens: ~25-30k prompt tok/s for 8B BF16 on one H100 in vLLM;
   * midpoint (an estimate: half of TensorRT-LLM's published FP8 figure,
   * `docs/source/performance/perf-overview.md`).
   */
  prefillTokensPerS: number;
  /**
   * Fixed cost of admitting a request (one forward pass plus scheduling): a full prefix hit on an
   * 8k prompt still has a TTFT of ~15-30 ms (an estimate); the low end, as the rest is the short forward.
   */
  prefillOverheadS: number;
  /** Weight bytes read per decode step: 8B params in BF16 ≈ 16 GB (2 bytes per parameter). */
  weightBytes: number;
  /** HBM bandwidth of an H100 SXM, HBM3: 3.35 TB/s (NVIDIA H100 specifications). */
  hbmBytesPerS: number;
  /** Achieved share of HBM bandwidth in a decode step: ~0.6-0.8; midpoint (an assumption). */
  decodeEfficiency: number;
  /**
   * Host-to-device bandwidth for reloading offloaded KV: PCIe Gen5 x16, ~50 GB/s in practice (an
   * estimate from NVIDIA's 64 GB/s per direction).
   */
  offloadBytesPerS: number;
}

export const DEFAULT_COST_MODEL: Readonly<CostModel> = Object.freeze({
  kvBytesPerToken: 131_072,
  prefillTokensPerS: 27_500,
  prefillOverheadS: 0.015,
  weightBytes: 16e9,
  hbmBytesPerS: 3.35e12,
  decodeEfficiency: 0.7,
  offloadBytesPerS: 50e9,
});

export interface FleetOptions {
  /** Workers (one engine instance each): a simple 8-GPU cluster of 8B instances (an assumption). */
  workers: number;
  /**
   * HBM KV capacity per worker in tokens: ~400k for 8B BF16 on an 80 GB H100 (an estimate from
   * vLLM's default `gpu_memory_utilization` of 0.9).
   */
  cacheTokens: number;
  /**
   * CPU offload tier per worker in tokens; 0 turns it off (off by default: its gains are
   * conditional, per LMCache's own and third-party benchmarks).
   */
  offloadTokens: number;
  /** Most sequences in one continuous batch: vLLM's `--max-num-seqs` default of 256. */
  maxBatch: number;
  /**
   * Token budget of one engine step while a prefill runs (vLLM's `--max-num-batched-tokens` with
   * chunked prefill): each step carries a prompt chunk plus one token per decoding sequence, so
   * decoding slows to the chunk's compute time and the prefill shares compute with the decodes.
   * 2048 is the common setting for latency-sensitive serving. 0 models prefill and decode as
   * independent servers (used by the hand-computed tests).
   */
  prefillChunkTokens: number;
}

/**
 * The simulated engines' KV block size in tokens: vLLM's default `block_size`, which its
 * `cache_config_info` publishes beside `num_gpu_blocks`. What the routers that read that gauge
 * see (llm-d sizes its index by it; kvgate's collector reads the capacity from it).
 */
export const ENGINE_BLOCK_TOKENS = 16;

export const DEFAULT_FLEET: Readonly<FleetOptions> = Object.freeze({
  workers: 8,
  cacheTokens: 400_000,
  offloadTokens: 0,
  maxBatch: 256,
  prefillChunkTokens: 2048,
});

/**
 * Prefill throughput with `decoding` sequences riding in the same steps: each step of `chunk`
 * prompt tokens also computes one token per decoding sequence, and cannot be shorter than a decode
 * step (reading the weights and the batch's KV).
 */
export function prefillTokensPerS(cost: CostModel, chunk: number, decoding: number, decodeContextTokens: number): number {
  if (chunk <= 0 || decoding === 0) return cost.prefillTokensPerS;
  return Math.min(
    (cost.prefillTokensPerS * chunk) / (chunk + decoding),
    chunk / decodeStepSeconds(cost, decodeContextTokens),
  );
}

/** Seconds to prefill: fixed overhead, compute for uncached tokens, PCIe reload for offloaded ones. */
export function prefillSeconds(cost: CostModel, computedTokens: number, reloadedTokens: number, tokensPerS = cost.prefillTokensPerS): number {
  return (
    cost.prefillOverheadS +
    computedTokens / tokensPerS +
    (reloadedTokens * cost.kvBytesPerToken) / cost.offloadBytesPerS
  );
}

/**
 * Seconds per decode step: decode is bandwidth-bound, so a step reads the weights once plus the KV
 * of every running sequence. Each running sequence gains one token per step.
 */
export function decodeStepSeconds(cost: CostModel, contextTokens: number): number {
  return (cost.weightBytes + contextTokens * cost.kvBytesPerToken) / (cost.hbmBytesPerS * cost.decodeEfficiency);
}

/** A decode step while a prefill chunk shares it: as long as the chunk's compute, at least. */
export function mixedStepSeconds(cost: CostModel, chunk: number, decoding: number, contextTokens: number): number {
  return Math.max(decodeStepSeconds(cost, contextTokens), (chunk + decoding) / cost.prefillTokensPerS);
}
