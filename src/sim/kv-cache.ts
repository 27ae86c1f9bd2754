/**
 * One worker's prefix KV cache, block-granular, with the semantics of vLLM's automatic prefix
 * caching (vLLM `docs/design/prefix_caching.md`, v1):
 *  - a request pins the blocks it uses (reference counts); pinned blocks are never evicted;
 *  - a block whose count drops to 0 stays cached but becomes evictable, in LRU order; a finished
 *    request's blocks are queued tail first, so a prompt's last blocks go before its first ones;
 *  - a prefix hit is the longest run of leading blocks present, stopping at the first miss.
 * An optional CPU tier (LMCache-style offload) keeps what the GPU evicts, in its own LRU, so a
 * later hit there costs a PCIe reload instead of a recompute.
 *
 * Block ids are dense small integers (workload.ts interns them), so the state lives in typed
 * arrays indexed by id, with the LRU orders as intrusive doubly linked lists: a replay touches
 * millions of blocks, and hash maps made that the simulator's bottleneck.
 */
import type { BlockId } from './blocks.js';

export interface PrefixMatch {
  /** Leading blocks found in GPU memory. */
  gpu: number;
  /** Further leading blocks found only in the CPU tier. */
  offload: number;
}

const NONE = -1;

/** An LRU order over block ids: O(1) push-to-most-recent, remove, and pop-least-recent. */
class LruList {
  prev = new Int32Array(0);
  next = new Int32Array(0);
  member = new Uint8Array(0);
  head = NONE; // least recent
  tail = NONE; // most recent
  size = 0;

  grow(n: number): void {
    const grow32 = (a: Int32Array) => {
      const b = new Int32Array(n);
      b.set(a);
      return b;
    };
    this.prev = grow32(this.prev);
    this.next = grow32(this.next);
    const m = new Uint8Array(n);
    m.set(this.member);
    this.member = m;
  }

  has(id: number): boolean {
    return id < this.member.length && this.member[id] === 1;
  }

  remove(id: number): void {
    if (!this.has(id)) return;
    const p = this.prev[id]!;
    const n = this.next[id]!;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
    this.member[id] = 0;
    this.size--;
  }

  /** Makes `id` the most recent (inserting it if absent). */
  push(id: number): void {
    this.remove(id);
    this.prev[id] = this.tail;
    this.next[id] = NONE;
    if (this.tail === NONE) this.head = id;
    else this.next[this.tail] = id;
    this.tail = id;
    this.member[id] = 1;
    this.size++;
  }

  pop(): number {
    const id = this.head;
    if (id !== NONE) this.remove(id);
    return id;
  }
}

export class KvCache {
  /** Per block id: -1 when not in GPU memory, else how many running requests pin it. */
  private ref = new Int32Array(0);
  /** Resident blocks with count 0, least recently released first. */
  private readonly evictable = new LruList();
  /** The CPU tier, least recently used first. */
  private readonly offloaded = new LruList();
  private resident = 0;
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
    return this.resident - this.evictable.size + this.anonymous;
  }

  /** Blocks in GPU memory, pinned or cached. */
  get usedBlocks(): number {
    return this.resident + this.anonymous;
  }

  /** Prompt blocks in GPU memory, pinned or not. */
  get cachedBlocks(): number {
    return this.resident;
  }

  has(block: BlockId): boolean {
    return block < this.ref.length && this.ref[block]! >= 0;
  }

  inOffload(block: BlockId): boolean {
    return this.offloaded.has(block);
  }

  match(blocks: readonly BlockId[]): PrefixMatch {
    let gpu = 0;
    let offload = 0;
    for (const b of blocks) {
      if (this.has(b)) gpu++;
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
    for (const b of blocks) if (!(b < this.ref.length && this.ref[b]! > 0)) cost++;
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
      this.ensure(b);
      const r = this.ref[b]!;
      if (r >= 0) {
        if (r === 0) this.evictable.remove(b);
        this.ref[b] = r + 1;
        continue;
      }
      this.makeRoom(1);
      this.ref[b] = 1;
      this.resident++;
      if (this.offloaded.has(b)) this.offloaded.push(b); // reloaded: refresh its CPU copy
    }
  }

  /**
   * Unpins; blocks no request uses become evictable, the prompt's tail first. If an oversized
   * request had over-committed memory, the excess is evicted now.
   */
  release(blocks: readonly BlockId[], anonymousBlocks: number): void {
    this.anonymous -= anonymousBlocks;
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      const r = b < this.ref.length ? this.ref[b]! : -1;
      if (r <= 0) continue;
      this.ref[b] = r - 1;
      if (r === 1) this.evictable.push(b);
    }
    this.makeRoom(0);
  }

  /**
   * Moves `blocks` out of GPU memory, as a worker-side agent does with a migrated session's KV on
   * an offload event: into the CPU tier where there is one, else dropped. Blocks a running request
   * pins stay (their KV is in use), as do blocks not in GPU memory. Returns how many left.
   */
  offload(blocks: readonly BlockId[]): number {
    let moved = 0;
    for (const b of blocks) {
      if (!(b < this.ref.length && this.ref[b] === 0)) continue;
      this.evictable.remove(b);
      this.ref[b] = -1;
      this.resident--;
      moved++;
      if (this.offloadBlocks > 0) {
        this.offloaded.push(b);
        if (this.offloaded.size > this.offloadBlocks) this.offloaded.pop();
      }
    }
    return moved;
  }

  /** Looks up then touches a request's blocks without keeping them pinned: an unconstrained LRU step. */
  touch(blocks: readonly BlockId[]): PrefixMatch {
    const m = this.match(blocks);
    this.acquire(blocks, 0);
    this.release(blocks, 0);
    return m;
  }

  private ensure(id: number): void {
    if (id < this.ref.length) return;
    let n = Math.max(1024, this.ref.length);
    while (n <= id) n *= 2;
    const ref = new Int32Array(n).fill(-1);
    ref.set(this.ref);
    this.ref = ref;
    this.evictable.grow(n);
    if (this.offloadBlocks > 0) this.offloaded.grow(n);
  }

  private makeRoom(blocks: number): void {
    while (this.usedBlocks + blocks > this.capacityBlocks) {
      const victim = this.evictable.pop();
      // Everything left is pinned: over-commit rather than deadlock (only an oversized request
      // admitted alone gets here; see worker.ts).
      if (victim === NONE) return;
      this.ref[victim] = -1;
      this.resident--;
      this.evictions++;
      if (this.offloadBlocks > 0) {
        this.offloaded.push(victim);
        if (this.offloaded.size > this.offloadBlocks) this.offloaded.pop();
      }
    }
  }
}
