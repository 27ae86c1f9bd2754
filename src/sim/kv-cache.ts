/**
 * One worker's prefix KV cache, block-granular, with the semantics of vLLM's automatic prefix
 * caching (routing-landscape.md §3.6):
 *  - a request pins the blocks it uses (reference counts); pinned blocks are never evicted;
 *  - a block whose count drops to 0 stays cached but becomes evictable, in LRU order; a finished
 *    request's blocks are queued tail first, so a prompt's last blocks go before its first ones;
 *  - a prefix hit is the longest run of leading blocks present, stopping at the first miss.
 * An optional CPU tier (LMCache-style offload) keeps what the GPU evicts, in its own LRU, so a
 * later hit there costs a PCIe reload instead of a recompute.
 */
import type { BlockId } from './blocks.js';

export interface PrefixMatch {
  /** Leading blocks found in GPU memory. */
  gpu: number;
  /** Further leading blocks found only in the CPU tier. */
  offload: number;
}

export class KvCache {
  /** GPU-resident blocks → reference count. */
  private readonly resident = new Map<BlockId, number>();
  /** Resident blocks with count 0, least recently released first (Map keeps insertion order). */
  private readonly evictable = new Map<BlockId, true>();
  /** CPU tier, least recently used first. */
  private readonly offloaded = new Map<BlockId, true>();
  /** Pinned blocks that hold no reusable prefix (a prompt's partial tail, generated tokens). */
  private anonymous = 0;
  /** Blocks evicted from GPU memory so far. */
  evictions = 0;

  constructor(
    readonly capacityBlocks: number,
    readonly offloadBlocks = 0,
  ) {}

  /** Blocks held by running requests. */
  get pinnedBlocks(): number {
    return this.resident.size - this.evictable.size + this.anonymous;
  }

  /** Blocks in GPU memory, pinned or cached. */
  get usedBlocks(): number {
    return this.resident.size + this.anonymous;
  }

  /** Cached (resident) prompt blocks, pinned or not. */
  get cachedBlocks(): number {
    return this.resident.size;
  }

  has(block: BlockId): boolean {
    return this.resident.has(block);
  }

  match(blocks: readonly BlockId[]): PrefixMatch {
    let gpu = 0;
    let offload = 0;
    for (const b of blocks) {
      if (this.resident.has(b)) gpu++;
      else if (this.offloaded.has(b)) offload++;
      else break;
    }
    return { gpu, offload };
  }

  /**
   * Blocks that admitting a request would newly pin: its cached-but-unpinned hits, its missing
   * blocks, and its anonymous blocks. It fits while pinned + this ≤ capacity, because everything
   * else in memory can be evicted.
   */
  pinCost(blocks: readonly BlockId[], anonymousBlocks: number): number {
    let cost = anonymousBlocks;
    for (const b of blocks) {
      const ref = this.resident.get(b);
      if (ref === undefined || ref === 0) cost++;
    }
    return cost;
  }

  fits(pinCost: number): boolean {
    return this.pinnedBlocks + pinCost <= this.capacityBlocks;
  }

  /** Pins `blocks` (allocating, and evicting LRU blocks for, the missing ones) plus anonymous blocks. */
  acquire(blocks: readonly BlockId[], anonymousBlocks: number): void {
    this.makeRoom(anonymousBlocks);
    this.anonymous += anonymousBlocks;
    for (const b of blocks) {
      const ref = this.resident.get(b);
      if (ref !== undefined) {
        if (ref === 0) this.evictable.delete(b);
        this.resident.set(b, ref + 1);
        continue;
      }
      this.makeRoom(1);
      this.resident.set(b, 1);
      if (this.offloaded.delete(b)) this.offloaded.set(b, true); // reloaded: refresh its CPU copy
    }
  }

  /** Unpins; blocks no request uses become evictable, the prompt's tail first. */
  release(blocks: readonly BlockId[], anonymousBlocks: number): void {
    this.anonymous -= anonymousBlocks;
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      const ref = this.resident.get(b);
      if (ref === undefined) continue;
      if (ref <= 1) {
        this.resident.set(b, 0);
        this.evictable.delete(b);
        this.evictable.set(b, true);
      } else this.resident.set(b, ref - 1);
    }
  }

  /** Looks up then touches a request's blocks without keeping them pinned: an unconstrained LRU step. */
  touch(blocks: readonly BlockId[]): PrefixMatch {
    const m = this.match(blocks);
    this.acquire(blocks, 0);
    this.release(blocks, 0);
    return m;
  }

  private makeRoom(blocks: number): void {
    while (this.usedBlocks + blocks > this.capacityBlocks) {
      const victim = this.evictable.keys().next();
      // Everything left is pinned: over-commit rather than deadlock (only an oversized request
      // admitted alone gets here; see worker.ts).
      if (victim.done) return;
      this.evictable.delete(victim.value);
      this.resident.delete(victim.value);
      this.evictions++;
      if (this.offloadBlocks > 0) {
        this.offloaded.delete(victim.value);
        this.offloaded.set(victim.value, true);
        if (this.offloaded.size > this.offloadBlocks) this.offloaded.delete(this.offloaded.keys().next().value!);
      }
    }
  }
}
