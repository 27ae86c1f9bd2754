/**
 * An in-process prefix index: which workers probably hold each prompt block, learned from routing
 * decisions (a worker that was sent a prompt now caches its blocks) and ready to learn from engine
 * KV events (`record` / `forget`). Bounded like the caches it mirrors: each worker keeps at most
 * its capacity in blocks, least recently routed first out, and blocks unused for the TTL expire.
 */
import { LRUCache } from 'lru-cache';

/** Blocks per worker when nothing better is known: 400k KV tokens at 64 tokens per block. */
const DEFAULT_CAPACITY_BLOCKS = 6250;

export class PrefixIndex {
  /** block hash → workers holding it */
  private readonly holders = new Map<string, Set<string>>();
  /** worker → its blocks, in routing recency, bounded by capacity and TTL */
  private readonly perWorker = new Map<string, LRUCache<string, true>>();

  constructor(private readonly ttlMs: number) {}

  /**
   * For each worker, how many leading blocks of the chain it holds (the longest consecutive run
   * from block 0, as engines only reuse a prefix). Stops at the first block nobody holds.
   */
  match(blocks: readonly string[]): Map<string, number> {
    const depth = new Map<string, number>();
    let alive: Set<string> | undefined;
    for (let i = 0; i < blocks.length; i++) {
      const h = this.holders.get(blocks[i]!);
      if (!h) break;
      const next = new Set<string>();
      for (const w of h) {
        if ((alive === undefined || alive.has(w)) && this.perWorker.get(w)?.has(blocks[i]!)) next.add(w);
      }
      if (next.size === 0) break;
      for (const w of next) depth.set(w, i + 1);
      alive = next;
    }
    return depth;
  }

  /**
   * The worker now holds these blocks (e.g. it was just sent this prompt). `capacityBlocks` sizes
   * the worker's share of the index; without it an existing size is kept (or a default used).
   */
  record(worker: string, blocks: readonly string[], capacityBlocks?: number): void {
    let lru = this.perWorker.get(worker);
    if (!lru || (capacityBlocks !== undefined && lru.max !== capacityBlocks)) {
      const old = lru;
      lru = new LRUCache<string, true>({
        max: Math.max(1, capacityBlocks ?? DEFAULT_CAPACITY_BLOCKS),
        noDisposeOnSet: true,
        ttl: this.ttlMs,
        // Evicted or expired: the worker no longer counts as holding the block.
        dispose: (_v, block) => this.unhold(block, worker),
      });
      if (old) for (const [b] of [...old.entries()].reverse()) lru.set(b, true);
      this.perWorker.set(worker, lru);
    }
    // Deepest block first, so the root of the chain is the most recent and the last to go: an
    // engine evicts a prefix from its tail, and a root without its tail is still a useful match.
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      lru.set(b, true);
      let h = this.holders.get(b);
      if (!h) this.holders.set(b, (h = new Set()));
      h.add(worker);
    }
  }

  /** The worker dropped these blocks (an engine's eviction event). */
  forget(worker: string, blocks: readonly string[]): void {
    const lru = this.perWorker.get(worker);
    for (const b of blocks) lru?.delete(b);
  }

  /** Blocks the index holds for a worker (for tests and the debug endpoint). */
  size(worker: string): number {
    return this.perWorker.get(worker)?.size ?? 0;
  }

  clear(): void {
    for (const lru of this.perWorker.values()) lru.clear();
    this.perWorker.clear();
    this.holders.clear();
  }

  private unhold(block: string, worker: string): void {
    const h = this.holders.get(block);
    if (!h) return;
    h.delete(worker);
    if (h.size === 0) this.holders.delete(block);
  }
}
