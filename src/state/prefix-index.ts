/**
 * An in-process prefix index: which workers probably hold each prompt block, learned from routing
 * decisions (a worker that was sent a prompt now caches its blocks) and ready to learn from engine
 * KV events (`record` / `forget`). Bounded like the caches it mirrors: each worker keeps at most
 * its capacity in blocks, least recently routed first out, and blocks unused for the TTL expire.
 */

/** Blocks per worker when nothing better is known: 400k KV tokens at 64 tokens per block. */
const DEFAULT_CAPACITY_BLOCKS = 6250;

/**
 * Expired blocks stop matching at once (`match` reads each holder's last-routed time); they are
 * swept out of the index at most this often per worker, oldest first.
 */
const SWEEP_INTERVAL_MS = 1000;

/**
 * A worker's recency queue is compacted (its stale and consumed entries dropped) once either
 * outgrows the blocks it holds by this much: every record appends, so compaction, which costs the
 * queue's length, is amortised O(1) a block.
 */
const QUEUE_SLACK = 1024;

/*
 * Layout. The index is read far more than it changes and its reads are one walk per request down
 * a chain of up to max_blocks blocks, where a shared system prompt makes the first blocks held by
 * every worker. So:
 *
 * - Workers are numbered (small integers, in order of first record) and each block has one
 *   `Holders` entry: a flat array of its holders' numbers, each with when it was last routed the
 *   block. A walk costs at most one string-keyed lookup per block (see the hints below) and then
 *   number array reads; it used to cost one string-keyed Map lookup per block and live worker.
 * - A worker's recency (for capacity, LRU) is a queue of (holders entry, touch number) pairs it
 *   appends to on every record; an entry is current only while the worker's touch number in that
 *   block still equals the queued one, so routing a block again costs two array pushes, and
 *   eviction pops from the head past the stale pairs. This is an exact LRU (the same evictions, in
 *   the same order, as the linked list of lru-cache it replaces, whose bookkeeping was ~6% of the
 *   gate's time at 32 KB), not an approximation. A JS Map in insertion order would be the usual
 *   idiom, but evicting from its head leaves holes that V8 skips one by one on each `keys().next()`
 *   until the table is rehashed: thousands of steps per eviction once a worker is full.
 * - Holder order within a block is the order workers first took it (removal keeps the order), so
 *   `match`'s map lists block 0's holders in the same order as the per-block Maps it replaces.
 * - Each entry remembers the entry of the block that followed it in the last chain recorded
 *   through it. Prompts that share a prefix share it block for block (chained hashes), so a walk
 *   or record usually finds block i+1's entry there and checks it (same block hash, still held)
 *   with one short string comparison instead of a hash lookup in a map of every block; a wrong or
 *   dead hint falls back to the lookup, so the hint changes speed only, never an answer. An entry
 *   that dies drops its hint, so a hint keeps at most one dead entry alive.
 * Invariant: an entry with holders is the one in `holders` for its block; one without is dead.
 */

/**
 * One block's holders, three numbers each in one flat array (one allocation per block, which
 * matters when full workers evict and new blocks arrive on every request): the worker's number,
 * when it was last routed the block, and its touch number for the block.
 */
class Holders {
  readonly slots: number[] = [];
  /** The entry of the block that followed this one when it was last recorded (a hint, checked before use). */
  next: Holders | undefined = undefined;
  constructor(readonly block: string) {}
}

/** Numbers per holder in `Holders.slots`, and their offsets. */
const SLOT = 3;
const AT = 1;
const TOUCH = 2;

/** Where a worker's three numbers start in a block's holder slots, or -1. */
function slotOf(h: Holders, id: number): number {
  const s = h.slots;
  for (let j = 0; j < s.length; j += SLOT) if (s[j] === id) return j;
  return -1;
}

/** One worker's share of the index: how many blocks it holds, bounded by capacity, in recency order. */
class WorkerBlocks {
  size = 0;
  /** Touches so far: each record of a block gives it the next number. */
  touches = 0;
  /** The recency queue, oldest first from `head`: a block's holders entry and the touch that queued it. */
  readonly qBlock: Holders[] = [];
  readonly qTouch: number[] = [];
  head = 0;
  sweptAt: number | undefined;
  constructor(public capacity: number) {}
}

export class PrefixIndex {
  /** block hash → its holders */
  private readonly holders = new Map<string, Holders>();
  /** worker id → its number; `names` is the reverse */
  private readonly numbers = new Map<string, number>();
  private readonly names: string[] = [];
  /** worker number → its blocks (undefined for a worker never recorded since the last clear) */
  private workers: Array<WorkerBlocks | undefined> = [];
  /** Bumped by every change to the holders (record, forget, clear), for the memo below. */
  private version = 0;
  /**
   * The last match: a decision matches its chain for the view it decides on and again, in the
   * same synchronous step, when the commit checks its prefix precondition. Same chain and worker
   * set (the same objects), same index version, same millisecond: the same answer, no second walk.
   */
  private memo:
    | { blocks: readonly string[]; among: readonly string[] | undefined; version: number; now: number; depth: ReadonlyMap<string, number> }
    | undefined;
  /** Scratch for walks: each worker's last block index still held (as `stamp` + block index), and the live workers. */
  private mark = new Float64Array(16);
  private stamp = 0;
  private alive = new Int32Array(16);

  constructor(
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * For each worker, how many leading blocks of the chain it holds (the longest consecutive run
   * from block 0, as engines only reuse a prefix). Stops at the first block nobody holds. With
   * `among`, only those workers count (the pool's configured ones: a removed worker's blocks stay
   * until they expire, and nothing may weigh them). Callers pass the pool's own worker list, the
   * same array every time, so its mask is built once and the memo below can hit.
   */
  match(blocks: readonly string[], among?: readonly string[]): Map<string, number> {
    // A copy: callers own the map they get.
    return new Map(this.depths(blocks, among));
  }

  /**
   * `match`'s answer without the copy, for callers that only read it (a store's snapshot): the
   * memo's own map, never changed after it is made, so it may be kept.
   */
  depths(blocks: readonly string[], among?: readonly string[]): ReadonlyMap<string, number> {
    const now = this.now();
    const m = this.memo;
    if (m !== undefined && m.blocks === blocks && m.among === among && m.version === this.version && m.now === now) return m.depth;
    const depth = this.walk(blocks, now, among === undefined ? undefined : this.maskOf(among));
    this.memo = { blocks, among, version: this.version, now, depth };
    return depth;
  }

  /** Which worker numbers a worker list names, built once per list and numbering (the pools' lists live as long as their config). */
  private readonly masks = new WeakMap<readonly string[], { known: number; mask: Uint8Array }>();

  private maskOf(workers: readonly string[]): Uint8Array {
    let m = this.masks.get(workers);
    if (!m || m.known !== this.names.length) {
      const mask = new Uint8Array(this.names.length);
      for (const w of workers) {
        const n = this.numbers.get(w);
        if (n !== undefined) mask[n] = 1;
      }
      this.masks.set(workers, (m = { known: this.names.length, mask }));
    }
    return m.mask;
  }

  private walk(blocks: readonly string[], now: number, among: Uint8Array | undefined): Map<string, number> {
    const depth = new Map<string, number>();
    const first = blocks.length > 0 ? this.holders.get(blocks[0]!) : undefined;
    if (!first) return depth;
    if (this.mark.length < this.names.length) {
      this.mark = new Float64Array(this.names.length * 2);
      this.alive = new Int32Array(this.names.length * 2);
    }
    const mark = this.mark;
    const alive = this.alive;
    // mark[w] === base + i: worker w holds blocks 0..i (live). Stamps only grow, so no clearing.
    const base = this.stamp;
    this.stamp += blocks.length + 1;
    const ttl = this.ttlMs;
    let n = 0;
    // Block 0's live holders, in holder order: the map's order.
    const s0 = first.slots;
    for (let j = 0; j < s0.length; j += SLOT) {
      const w = s0[j]!;
      if (now - s0[j + AT]! <= ttl && (among === undefined || among[w] === 1)) {
        mark[w] = base;
        alive[n++] = w;
        depth.set(this.names[w]!, 1);
      }
    }
    if (n === 0) return depth;
    let i = 1;
    for (let prevH = first; i < blocks.length; i++) {
      const h = this.follow(prevH, blocks[i]!);
      if (!h) break;
      prevH = h;
      const prev = base + i - 1;
      const cur = base + i;
      const s = h.slots;
      for (let j = 0; j < s.length; j += SLOT) {
        const w = s[j]!;
        if (mark[w] === prev && now - s[j + AT]! <= ttl) mark[w] = cur;
      }
      // Keep the workers that held this block too; the rest stop at depth i.
      let kept = 0;
      for (let j = 0; j < n; j++) {
        const w = alive[j]!;
        if (mark[w] === cur) alive[kept++] = w;
        else depth.set(this.names[w]!, i);
      }
      n = kept;
      if (n === 0) return depth;
    }
    for (let j = 0; j < n; j++) depth.set(this.names[alive[j]!]!, i);
    return depth;
  }

  /**
   * The worker now holds these blocks (e.g. it was just sent this prompt). `capacityBlocks` sizes
   * the worker's share of the index; without it an existing size is kept (or a default used).
   */
  record(worker: string, blocks: readonly string[], capacityBlocks?: number): void {
    this.version++;
    const id = this.numberOf(worker);
    let wb = this.workers[id];
    if (!wb) this.workers[id] = wb = new WorkerBlocks(Math.max(1, capacityBlocks ?? DEFAULT_CAPACITY_BLOCKS));
    else if (capacityBlocks !== undefined && wb.capacity !== Math.max(1, capacityBlocks)) {
      // A smaller capacity keeps the newest blocks.
      wb.capacity = Math.max(1, capacityBlocks);
      while (wb.size > wb.capacity) this.evictOldest(id, wb);
    }
    const now = this.now();
    // The chain's entries as they stand, found front to back along the hints.
    // (Written in order from 0, so it grows packed; never shrunk: setting an array's length is V8's slow path.)
    const found = this.found;
    for (let i = 0, prev: Holders | undefined; i < blocks.length; i++) found[i] = prev = i === 0 || prev === undefined ? this.holders.get(blocks[i]!) : this.follow(prev, blocks[i]!);
    // Deepest block first, so the root of the chain is the most recent and the last to go: an
    // engine evicts a prefix from its tail, and a root without its tail is still a useful match.
    let after: Holders | undefined;
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      let h = found[i];
      // An eviction earlier in this loop may have emptied it (then it is dead).
      if (h === undefined || h.slots.length === 0) {
        h = this.holders.get(b);
        if (!h) this.holders.set(b, (h = new Holders(b)));
      }
      if (after !== undefined) h.next = after;
      after = h;
      const touch = ++wb.touches;
      const j = slotOf(h, id);
      if (j >= 0) {
        h.slots[j + AT] = now;
        h.slots[j + TOUCH] = touch;
      } else {
        h.slots.push(id, now, touch);
        wb.size++;
      }
      wb.qBlock.push(h);
      wb.qTouch.push(touch);
      if (wb.size > wb.capacity) this.evictOldest(id, wb);
    }
    // Stale entries pile up behind the live ones (blocks routed again), consumed ones before the
    // head (evictions): either way the queue is rebuilt once the waste outgrows what it holds.
    if (wb.qBlock.length - wb.head > 2 * wb.size + QUEUE_SLACK || wb.head > wb.size + QUEUE_SLACK) compact(id, wb);
    this.sweep(id, wb, now);
  }

  /** The worker dropped these blocks (an engine's eviction event). */
  forget(worker: string, blocks: readonly string[]): void {
    this.version++;
    const id = this.numbers.get(worker);
    const wb = id === undefined ? undefined : this.workers[id];
    if (id === undefined || !wb) return;
    for (const b of blocks) {
      const h = this.holders.get(b);
      const j = h ? slotOf(h, id) : -1;
      // Its queue entry goes stale with it (the worker is no longer among the block's holders).
      if (j >= 0) this.unhold(h!, j, wb);
    }
  }

  /** Blocks the index holds for a worker (for tests and the debug endpoint). */
  size(worker: string): number {
    const id = this.numbers.get(worker);
    return id === undefined ? 0 : (this.workers[id]?.size ?? 0);
  }

  clear(): void {
    this.version++;
    this.workers = [];
    this.holders.clear();
    this.memo = undefined;
  }

  /** Scratch for `record`: the chain's entries (only the first blocks.length are this record's; it may keep a few dead entries alive until the next one). */
  private readonly found: Array<Holders | undefined> = [];

  /** The live entry of `block`, which follows `prev` in the chain: `prev`'s hint when it is that, else a lookup. */
  private follow(prev: Holders, block: string): Holders | undefined {
    const h = prev.next;
    return h !== undefined && h.slots.length > 0 && h.block === block ? h : this.holders.get(block);
  }

  private numberOf(worker: string): number {
    let id = this.numbers.get(worker);
    if (id === undefined) {
      id = this.names.length;
      this.numbers.set(worker, id);
      this.names.push(worker);
    }
    return id;
  }

  /**
   * The worker's least recently routed block still held, as the slot of its holder numbers in the
   * entry at the head of its queue (`wb.qBlock[wb.head]`), once stale entries (blocks routed again
   * since, forgotten, evicted or expired) are skipped; -1 when it holds none.
   */
  private oldest(id: number, wb: WorkerBlocks): number {
    while (wb.head < wb.qBlock.length) {
      const h = wb.qBlock[wb.head]!;
      const j = slotOf(h, id);
      if (j >= 0 && h.slots[j + TOUCH] === wb.qTouch[wb.head]) return j;
      wb.head++;
    }
    return -1;
  }

  private evictOldest(id: number, wb: WorkerBlocks): void {
    const j = this.oldest(id, wb);
    if (j >= 0) this.unhold(wb.qBlock[wb.head]!, j, wb);
  }

  /** Now and then, drops the worker's expired blocks: the least recently routed ones, from the old end. */
  private sweep(id: number, wb: WorkerBlocks, now: number): void {
    if (wb.sweptAt === undefined) {
      wb.sweptAt = now;
      return;
    }
    if (now - wb.sweptAt < Math.min(this.ttlMs, SWEEP_INTERVAL_MS)) return;
    wb.sweptAt = now;
    for (let j = this.oldest(id, wb); j >= 0; j = this.oldest(id, wb)) {
      const h = wb.qBlock[wb.head]!;
      if (now - h.slots[j + AT]! <= this.ttlMs) break;
      this.unhold(h, j, wb);
    }
  }

  /**
   * The worker no longer holds the block: its slot out of the holders (the others keep their
   * order), and the block out of the index with its last holder.
   */
  private unhold(h: Holders, j: number, wb: WorkerBlocks): void {
    const s = h.slots;
    for (let k = j + SLOT; k < s.length; k++) s[k - SLOT] = s[k]!;
    // pop, not `length -=`: setting an array's length leaves V8's fast path.
    s.pop();
    s.pop();
    s.pop();
    wb.size--;
    if (s.length === 0) {
      // It is the block's entry (the invariant above), and now dead.
      this.holders.delete(h.block);
      h.next = undefined;
    }
  }
}

/** Drops a worker's stale and consumed queue entries, in place (no new arrays: this runs on the request path). */
function compact(id: number, wb: WorkerBlocks): void {
  const qBlock = wb.qBlock;
  const qTouch = wb.qTouch;
  let out = 0;
  for (let j = wb.head; j < qBlock.length; j++) {
    const h = qBlock[j]!;
    const k = slotOf(h, id);
    if (k >= 0 && h.slots[k + TOUCH] === qTouch[j]) {
      qBlock[out] = h;
      qTouch[out++] = qTouch[j]!;
    }
  }
  qBlock.length = out;
  qTouch.length = out;
  wb.head = 0;
}
