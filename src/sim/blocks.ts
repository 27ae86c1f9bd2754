/**
 * From prompt text to what a KV cache stores: an estimated token count and the chain of block ids.
 *
 * Engines cache KV in fixed blocks of tokens, each keyed by a chained hash (a block's hash covers
 * every block before it), and only whole blocks are reused (vLLM `docs/design/prefix_caching.md`). Without a
 * tokenizer, the UTF-8 text is cut into blocks of `blockTokens × CHARS_PER_TOKEN` bytes, chained
 * with xxhash64 (the project's hasher, src/util/xxhash.ts; `initHashing()` must have run).
 */
import { xxh } from '../util/xxhash.js';

/** ≈4 characters per token for English-like text (an assumption; prefix reuse on the shared agent traces was measured with it). */
export const CHARS_PER_TOKEN = 4;

/** Block size for text workloads: vLLM's default of 16 tokens on CUDA (vLLM `docs/design/prefix_caching.md`). */
export const TEXT_BLOCK_TOKENS = 16;

/** A block id: ids are compared for equality only (chained, so equal id ⇔ equal prefix). */
export type BlockId = number;

const MASK_53 = (1n << 53n) - 1n;
const encoder = new TextEncoder();

export function tokensOfText(text: string): number {
  return Math.max(1, Math.ceil(text.length / CHARS_PER_TOKEN));
}

/** Chained ids of the text's whole blocks (a trailing partial block is not cached, as in vLLM). */
export function textBlockIds(text: string, blockTokens: number = TEXT_BLOCK_TOKENS): BlockId[] {
  const bytes = encoder.encode(text);
  const size = blockTokens * CHARS_PER_TOKEN;
  const raw = xxh().h64Raw;
  const out: BlockId[] = [];
  let prev = 0n;
  for (let at = 0; at + size <= bytes.length; at += size) {
    prev = raw(bytes.subarray(at, at + size), prev);
    // 53 of the 64 bits: exact as a JS number; collisions stay negligible (~1e-4 at 1e6 blocks).
    out.push(Number(prev & MASK_53));
  }
  return out;
}
