/**
 * An in-process prefix index: which workers probably hold each prompt block, learned from routing
 * decisions (a worker that was sent a prompt now caches its blocks) and ready to learn from engine
 * KV events (`record` / `forget`). Bounded like the caches it mirrors: each worker keeps at most
 * its capacity in blocks, least recently routed first out, and blocks unused for the TTL expire.
 */
import { LRUCache } from 'lru-cache';

/** Blocks per worker when nothing better is known: 400k KV tokens at 64 tokens per block. */
const DEFAULT_CAPACITY_BLOCKS = 6250;

/**
 * Expired blocks stop matching at once (`match` reads each holder's last-routed time); they are
 * swept out of the index at most this often per worker, oldest first.
 */
const SWEEP_INTERVAL_MS = 1000;

/*
 * Two structures: per worker an LRU of its blocks (recency and capacity: lru-cache keeps order in
 * a linked list, so re-routing a block is cheap), and per block a map of its holders to when each
 * was last routed it. `match` reads only the second, one lookup per block and candidate worker; it
 * used to ask each worker's LRU, whose per-entry TTL bookkeeping took a fifth of `Gate.route` at
 * 32 KB (128 blocks a request). TTL now lives in the holder times.
 */
export class PrefixIndex {
  /** block hash → the workers holding it → when each was last routed it */
  private readonly holders = new Map<string, Map<string, number>>();
  /** worker → its blocks, in routing recency, bounded by capacity */
  private readonly perWorker = new Map<string, LRUCache<string, true>>();
  private readonly sweptAt = new Map<string, number>();
  /** Bumped by every change to the holders (record, forget, clear), for the memo below. */
  private version = 0;
  /**
   * The last match: a decision matches its chain for the view it decides on and again, in the
   * same synchronous step, when the commit checks its prefix precondition. Same chain and worker
   * set (the same objects), same index version, same millisecond: the same answer, no second walk.
   */
  private memo:
    | { blocks: readonly string[]; among: readonly string[] | undefined; version: number; now: number; depth: Map<string, number> }
    | undefined;

  constructor(
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * For each worker, how many leading blocks of the chain it holds (the longest consecutive run
   * from block 0, as engines only reuse a prefix). Stops at the first block nobody holds. With
   * `among`, only those workers count (the pool's configured ones: a removed worker's blocks stay
   * until they expire, and nothing may weigh them). Callers pass the pool's own worker list, the
   * same array every time, so its set is built once and the memo below can hit.
   */
  match(blocks: readonly string[], among?: readonly string[]): Map<string, number> {
    const now = this.now();
    const m = this.memo;
    // A copy: callers own the map they get.
    if (m !== undefined && m.blocks === blocks && m.among === among && m.version === this.version && m.now === now) return new Map(m.depth);
    const depth = this.walk(blocks, now, among === undefined ? undefined : this.setOf(among));
    this.memo = { blocks, among, version: this.version, now, depth: new Map(depth) };
    return depth;
  }

  /** The set of a worker list, built once per list (the pools' lists live as long as their config). */
  private readonly sets = new WeakMap<readonly string[], ReadonlySet<string>>();

  private setOf(workers: readonly string[]): ReadonlySet<string> {
    let set = this.sets.get(workers);
    if (!set) this.sets.set(workers, (set = new Set(workers)));
    return set;
  }

  private walk(blocks: readonly string[], now: number, among: ReadonlySet<string> | undefined): Map<string, number> {
    const depth = new Map<string, number>();
    // Two reused lists instead of one per block; a worker's depth is written when it drops out
    // (or at the end), not at every block. Block 0's holders are inserted first, in the same
    // order as always, so callers iterating the map see what they always saw.
    let alive: string[] = [];
    let next: string[] = [];
    let i = 0;
    for (; i < blocks.length; i++) {
      const h = this.holders.get(blocks[i]!);
      if (!h) break;
      next.length = 0;
      if (i === 0) {
        for (const [w, at] of h) {
          if (now - at <= this.ttlMs && (among === undefined || among.has(w))) {
            next.push(w);
            depth.set(w, 1);
          }
        }
      } else {
        for (const w of alive) {
          const at = h.get(w);
          if (at !== undefined && now - at <= this.ttlMs) next.push(w);
          else depth.set(w, i);
        }
      }
      if (next.length === 0) return depth;
      const t = alive;
      alive = next;
      next = t;
    }
    for (const w of alive) depth.set(w, i);
    return depth;
  }

  /**
   * The worker now holds these blocks (e.g. it was just sent this prompt). `capacityBlocks` sizes
   * the worker's share of the index; without it an existing size is kept (or a default used).
   */
  record(worker: string, blocks: readonly string[], capacityBlocks?: number): void {
    this.version++;
    let lru = this.perWorker.get(worker);
    if (!lru || (capacityBlocks !== undefined && lru.max !== capacityBlocks)) {
      const old = lru;
      lru = new LRUCache<string, true>({
        max: Math.max(1, capacityBlocks ?? DEFAULT_CAPACITY_BLOCKS),
        noDisposeOnSet: true,
        // Evicted or forgotten: the worker no longer counts as holding the block.
        dispose: (_v, block) => this.unhold(block, worker),
      });
      // Oldest first into the new one, so recency carries over (and a smaller one keeps the newest).
      if (old) for (const b of [...old.rkeys()]) lru.set(b, true);
      this.perWorker.set(worker, lru);
    }
    const now = this.now();
    // Deepest block first, so the root of the chain is the most recent and the last to go: an
    // engine evicts a prefix from its tail, and a root without its tail is still a useful match.
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      let h = this.holders.get(b);
      if (!h) this.holders.set(b, (h = new Map()));
      h.set(worker, now);
      lru.set(b, true);
    }
    this.sweep(worker, lru, now);
  }

  /** The worker dropped these blocks (an engine's eviction event). */
  forget(worker: string, blocks: readonly string[]): void {
    this.version++;
    const lru = this.perWorker.get(worker);
    for (const b of blocks) lru?.delete(b);
  }

  /** Blocks the index holds for a worker (for tests and the debug endpoint). */
  size(worker: string): number {
    return this.perWorker.get(worker)?.size ?? 0;
  }

  clear(): void {
    this.version++;
    for (const lru of this.perWorker.values()) lru.clear();
    this.perWorker.clear();
    this.holders.clear();
    this.sweptAt.clear();
  }

  /** Now and then, drops the worker's expired blocks: the least recently routed ones, from the old end. */
  private sweep(worker: string, lru: LRUCache<string, true>, now: number): void {
    const last = this.sweptAt.get(worker);
    if (last === undefined) {
      this.sweptAt.set(worker, now);
      return;
    }
    if (now - last < Math.min(this.ttlMs, SWEEP_INTERVAL_MS)) return;
    this.sweptAt.set(worker, now);
    const expired: string[] = [];
    for (const b of lru.rkeys()) {
      const at = this.holders.get(b)?.get(worker);
      if (at !== undefined && now - at <= this.ttlMs) break;
      expired.push(b);
    }
    for (const b of expired) lru.delete(b);
  }

  private unhold(block: string, worker: string): void {
    const h = this.holders.get(block);
    if (!h) return;
    h.delete(worker);
    if (h.size === 0) this.holders.delete(block);
  }
}
