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
 * every worker. The walk is bound by memory latency (each block's data was written by an earlier
 * request, and the request's own garbage has pushed it out of the caches since), so the layout
 * is about how many separate places a block's data lives in:
 *
 * - Each block has one *entry*, a small integer. What the walk reads of an entry lives in typed
 *   arrays indexed by it (its next-block hint, where its holders are, how many) and in one flat
 *   Float64Array of holder slots; its block id in one array of strings. Entries of a chain are
 *   made one after the other, so a walk reads those arrays nearly in order. It used to read an
 *   object per block, the JS array of its slots and that array's backing store: three scattered
 *   reads per block before its id.
 * - Workers are numbered (small integers, in order of first record). A block's holders are three
 *   numbers each (the worker's number, when it was last routed the block, and its touch number
 *   for the block) in a region of the slot array sized for 1, 2, 4... holders; a full region is
 *   moved to one twice its size. Freed regions and entries are reused, so the arrays grow to the
 *   most blocks held at once and stay there.
 * - A worker's recency (for capacity, LRU) is a queue of (entry, touch number) pairs it appends to
 *   on every record; a pair is current only while the worker's touch number in that entry still
 *   equals the queued one, so routing a block again costs two array pushes, and eviction pops from
 *   the head past the stale pairs. This is an exact LRU (the same evictions, in the same order, as
 *   the linked list of lru-cache it once replaced). Touch numbers only grow, so a pair whose entry
 *   died and was reused for another block is stale too: the worker's touch there is newer, or the
 *   worker does not hold it.
 * - Holder order within a block is the order workers first took it (removal keeps the order), so
 *   `match`'s map lists block 0's holders in the same order as the per-block Maps it replaces.
 * - Each entry remembers the entry of the block that followed it in the last chain recorded
 *   through it. Prompts that share a prefix share it block for block (chained hashes), so a walk
 *   or record usually finds block i+1's entry there and checks it (live, same block id) with one
 *   short string comparison instead of a hash lookup in a map of every block; a wrong, dead or
 *   reused hint falls back to the lookup, so the hint changes speed only, never an answer.
 * Invariant: an entry with holders is the one in `entries` for its block; one without is free.
 */

/** Numbers per holder in the slot array, and their offsets. */
const SLOT = 3;
const AT = 1;
const TOUCH = 2;
/** No entry (a hint or a lookup that found none). */
const NONE = -1;

/** One worker's share of the index: how many blocks it holds, bounded by capacity, in recency order. */
class WorkerBlocks {
  size = 0;
  /** Touches so far: each record of a block gives it the next number. */
  touches = 0;
  /**
   * The recency queue, oldest first from `head` up to `qLen`: a block's entry and the touch that
   * queued it. Typed arrays kept at their largest size: compaction rewrites them in place, where
   * JS arrays truncated by compaction grew back by reallocation every few records (~7.7 KB of
   * garbage a request at 32 KB).
   */
  qBlock = new Int32Array(256);
  qTouch = new Float64Array(256);
  qLen = 0;
  head = 0;
  sweptAt: number | undefined;
  /** When it was last recorded: every block it holds was routed then or before. */
  lastAt = -Infinity;
  constructor(public capacity: number) {}

  enqueue(e: number, touch: number): void {
    if (this.qLen === this.qBlock.length) {
      const block = new Int32Array(this.qLen * 2);
      block.set(this.qBlock);
      this.qBlock = block;
      const t = new Float64Array(this.qLen * 2);
      t.set(this.qTouch);
      this.qTouch = t;
    }
    this.qBlock[this.qLen] = e;
    this.qTouch[this.qLen++] = touch;
  }
}

export class PrefixIndex {
  /** block hash → its entry */
  private readonly entries = new Map<string, number>();
  /** entry → its block id (undefined while free) */
  private eBlock: Array<string | undefined> = [];
  /** entry → the entry of the block that followed it when it was last recorded (a hint, checked before use) */
  private eNext = new Int32Array(256);
  /** entry → where its holder slots start in `slots` */
  private eOff = new Int32Array(256);
  /** entry → how many holders it has (0: free) */
  private eLen = new Int32Array(256);
  /** entry → its slot region's size class: room for 2^class holders */
  private eCls = new Uint8Array(256);
  /** Entries ever handed out (the arrays' used length) and the free ones among them. */
  private entryCount = 0;
  private freeEntries: number[] = [];
  /** Holder slots of every entry, `SLOT` numbers per holder; `slotsTop` is its used length. */
  private slots = new Float64Array(1024);
  private slotsTop = 0;
  /** Freed slot regions by size class, for reuse. */
  private freeRegions: number[][] = [];
  /** worker id → its number; `names` is the reverse (undefined for a released number) */
  private numbers = new Map<string, number>();
  private names: Array<string | undefined> = [];
  /** Numbers of released workers, handed out again before new ones. */
  private freeNumbers: number[] = [];
  /** Bumped whenever a number is given out or released: a worker list's mask holds for one numbering. */
  private numbering = 0;
  /**
   * The pool's configured workers as last told (`configure`), as a set; undefined until told, and
   * then no worker is ever released (an index on its own cannot know who is gone).
   */
  private configuredList: readonly string[] | undefined;
  private configured: Set<string> | undefined;
  /** When workers gone from the config were last looked for. */
  private releaseCheckedAt: number | undefined;
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
  /** Scratch for `record`: the chain's entries as they stood before it changed anything. */
  private found = new Int32Array(64);

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
    // Per numbering, not per count of numbers: a released number given to another worker must not
    // stay in a list that named its old one.
    if (!m || m.known !== this.numbering) {
      const mask = new Uint8Array(this.names.length);
      for (const w of workers) {
        const n = this.numbers.get(w);
        if (n !== undefined) mask[n] = 1;
      }
      this.masks.set(workers, (m = { known: this.numbering, mask }));
    }
    return m.mask;
  }

  private walk(blocks: readonly string[], now: number, among: Uint8Array | undefined): Map<string, number> {
    const depth = new Map<string, number>();
    const first = blocks.length > 0 ? (this.entries.get(blocks[0]!) ?? NONE) : NONE;
    if (first === NONE) return depth;
    if (this.mark.length < this.names.length) {
      this.mark = new Float64Array(this.names.length * 2);
      this.alive = new Int32Array(this.names.length * 2);
    }
    const mark = this.mark;
    const alive = this.alive;
    const slots = this.slots;
    const eOff = this.eOff;
    const eLen = this.eLen;
    // mark[w] === base + i: worker w holds blocks 0..i (live). Stamps only grow, so no clearing.
    const base = this.stamp;
    this.stamp += blocks.length + 1;
    const ttl = this.ttlMs;
    let n = 0;
    // Block 0's live holders, in holder order: the map's order.
    for (let j = eOff[first]!, end = j + SLOT * eLen[first]!; j < end; j += SLOT) {
      const w = slots[j]!;
      if (now - slots[j + AT]! <= ttl && (among === undefined || among[w] === 1)) {
        mark[w] = base;
        alive[n++] = w;
        depth.set(this.names[w]!, 1);
      }
    }
    if (n === 0) return depth;
    let i = 1;
    const eNext = this.eNext;
    const eBlock = this.eBlock;
    for (let prev = first; i < blocks.length; i++) {
      // Block i's live entry: the previous entry's hint when it is that (live, same block id),
      // else a lookup. (Written out here and in `record`: a method for it was not inlined.)
      const block = blocks[i]!;
      let e = eNext[prev]!;
      if (e === NONE || eLen[e] === 0 || eBlock[e] !== block) e = this.entries.get(block) ?? NONE;
      if (e === NONE) break;
      prev = e;
      const was = base + i - 1;
      const cur = base + i;
      for (let j = eOff[e]!, end = j + SLOT * eLen[e]!; j < end; j += SLOT) {
        const w = slots[j]!;
        if (mark[w] === was && now - slots[j + AT]! <= ttl) mark[w] = cur;
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
    this.recordChain(worker, blocks, capacityBlocks);
    if (this.configured !== undefined) this.releaseGone(this.now(), false);
  }

  /**
   * The pool's workers now (its configured list, the same array for as long as its config lives).
   * A worker the index numbered that is not among them is released, number and storage, once it
   * holds nothing live: at once if it holds nothing, else when the last block it was routed has
   * expired (looked for now and at most every `SWEEP_INTERVAL_MS` of records after). Its expired
   * blocks go with it; they matched nothing, so no answer changes. Without this, a fleet whose
   * worker ids churn (pods replaced) would number every id it ever saw, for the gate's life.
   */
  configure(workers: readonly string[]): void {
    if (workers === this.configuredList) return;
    const prev = this.configuredList;
    this.configuredList = workers;
    // A new array with the same workers (a reload that kept the pool) changes nothing.
    if (prev !== undefined && prev.length === workers.length && prev.every((w, i) => w === workers[i])) return;
    this.configured = new Set(workers);
    this.releaseGone(this.now(), true);
  }

  /**
   * Workers numbered (tests read it: no endpoint does): `workers` hold a number now; `numbers` is how
   * many numbers were ever needed at once, the length of every per-worker array.
   */
  numberedWorkers(): { workers: number; numbers: number } {
    return { workers: this.numbers.size, numbers: this.names.length };
  }

  /** Releases every numbered worker not configured whose blocks have all expired (or that holds none). */
  private releaseGone(now: number, force: boolean): void {
    const set = this.configured;
    if (set === undefined) return;
    if (!force && this.releaseCheckedAt !== undefined && now - this.releaseCheckedAt < SWEEP_INTERVAL_MS) return;
    this.releaseCheckedAt = now;
    for (let id = 0; id < this.names.length; id++) {
      const name = this.names[id];
      if (name === undefined || set.has(name)) continue;
      const wb = this.workers[id];
      if (!wb || wb.size === 0 || now - wb.lastAt > this.ttlMs) this.release(id);
    }
  }

  /** Drops a worker's remaining (expired) blocks and frees its number for reuse. */
  private release(id: number): void {
    this.version++;
    const wb = this.workers[id];
    if (wb) {
      // Every block it holds has its current pair in the queue: popping them all empties it.
      for (let j = this.oldest(id, wb); j >= 0; j = this.oldest(id, wb)) this.unhold(wb.qBlock[wb.head]!, j, wb);
      // Never expected; but a number reused while a slot still names it would hand the old
      // worker's blocks to the new one, so such a number is kept instead.
      if (wb.size !== 0) return;
    }
    this.workers[id] = undefined;
    this.numbers.delete(this.names[id]!);
    this.names[id] = undefined;
    this.freeNumbers.push(id);
    this.numbering++;
  }

  private recordChain(worker: string, blocks: readonly string[], capacityBlocks: number | undefined): void {
    const id = this.numberOf(worker);
    let wb = this.workers[id];
    if (!wb) this.workers[id] = wb = new WorkerBlocks(Math.max(1, capacityBlocks ?? DEFAULT_CAPACITY_BLOCKS));
    else if (capacityBlocks !== undefined && wb.capacity !== Math.max(1, capacityBlocks)) {
      // A smaller capacity keeps the newest blocks.
      wb.capacity = Math.max(1, capacityBlocks);
      while (wb.size > wb.capacity) this.evictOldest(id, wb);
    }
    const now = this.now();
    wb.lastAt = now;
    // The chain's entries as they stand, found front to back along the hints.
    if (this.found.length < blocks.length) this.found = new Int32Array(blocks.length * 2);
    const found = this.found;
    const eNext = this.eNext;
    const eLen = this.eLen;
    const eBlock = this.eBlock;
    for (let i = 0, prev = NONE; i < blocks.length; i++) {
      // As in the walk: the hint when it is block i's live entry, else a lookup.
      const block = blocks[i]!;
      let e = prev === NONE ? NONE : eNext[prev]!;
      if (e === NONE || eLen[e] === 0 || eBlock[e] !== block) e = this.entries.get(block) ?? NONE;
      found[i] = prev = e;
    }
    // Deepest block first, so the root of the chain is the most recent and the last to go: an
    // engine evicts a prefix from its tail, and a root without its tail is still a useful match.
    let after = NONE;
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      let e = found[i]!;
      // An eviction earlier in this loop may have emptied it (then it is dead), and a block made
      // since may have taken it over (then it has another block id): either way, a lookup.
      if (e === NONE || this.eLen[e] === 0 || this.eBlock[e] !== b) e = this.entries.get(b) ?? this.newEntry(b);
      if (after !== NONE) this.eNext[e] = after;
      after = e;
      const touch = ++wb.touches;
      const j = this.slotOf(e, id);
      if (j >= 0) {
        this.slots[j + AT] = now;
        this.slots[j + TOUCH] = touch;
      } else {
        this.addHolder(e, id, now, touch);
        wb.size++;
      }
      wb.enqueue(e, touch);
      if (wb.size > wb.capacity) this.evictOldest(id, wb);
    }
    // Stale entries pile up behind the live ones (blocks routed again), consumed ones before the
    // head (evictions): either way the queue is rebuilt once the waste outgrows what it holds.
    if (wb.qLen - wb.head > 2 * wb.size + QUEUE_SLACK || wb.head > wb.size + QUEUE_SLACK) this.compact(id, wb);
    this.sweep(id, wb, now);
  }

  /** The worker dropped these blocks (an engine's eviction event). */
  forget(worker: string, blocks: readonly string[]): void {
    this.version++;
    const id = this.numbers.get(worker);
    const wb = id === undefined ? undefined : this.workers[id];
    if (id === undefined || !wb) return;
    for (const b of blocks) {
      const e = this.entries.get(b);
      const j = e === undefined ? -1 : this.slotOf(e, id);
      // Its queue entry goes stale with it (the worker is no longer among the block's holders).
      if (j >= 0) this.unhold(e!, j, wb);
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
    this.entries.clear();
    this.eBlock = [];
    this.entryCount = 0;
    this.freeEntries = [];
    this.slotsTop = 0;
    this.freeRegions = [];
    this.memo = undefined;
    // Nobody holds anything: every number is free (and the numbering starts again).
    this.numbers = new Map();
    this.names = [];
    this.freeNumbers = [];
    this.numbering++;
  }

  /** Where a worker's three numbers start in an entry's holder slots, or -1. */
  private slotOf(e: number, id: number): number {
    const s = this.slots;
    for (let j = this.eOff[e]!, end = j + SLOT * this.eLen[e]!; j < end; j += SLOT) if (s[j] === id) return j;
    return -1;
  }

  /** A new entry for a block nobody holds, with room for one holder. */
  private newEntry(block: string): number {
    let e = this.freeEntries.pop();
    if (e === undefined) {
      e = this.entryCount++;
      if (e === this.eNext.length) this.growEntries();
    }
    this.eBlock[e] = block;
    this.eNext[e] = NONE;
    this.eLen[e] = 0;
    this.eCls[e] = 0;
    this.eOff[e] = this.region(0);
    this.entries.set(block, e);
    return e;
  }

  private growEntries(): void {
    const n = this.eNext.length * 2;
    const grow = <T extends Int32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(n);
      b.set(a);
      return b;
    };
    this.eNext = grow(this.eNext, (k) => new Int32Array(k));
    this.eOff = grow(this.eOff, (k) => new Int32Array(k));
    this.eLen = grow(this.eLen, (k) => new Int32Array(k));
    this.eCls = grow(this.eCls, (k) => new Uint8Array(k));
  }

  /** A free slot region of size class `cls` (room for 2^cls holders): a freed one, or new at the top. */
  private region(cls: number): number {
    const free = this.freeRegions[cls];
    const reused = free?.pop();
    if (reused !== undefined) return reused;
    const size = SLOT << cls;
    if (this.slotsTop + size > this.slots.length) {
      const bigger = new Float64Array(Math.max(this.slots.length * 2, this.slotsTop + size));
      bigger.set(this.slots.subarray(0, this.slotsTop));
      this.slots = bigger;
    }
    const off = this.slotsTop;
    this.slotsTop += size;
    return off;
  }

  private freeRegion(off: number, cls: number): void {
    while (this.freeRegions.length <= cls) this.freeRegions.push([]);
    this.freeRegions[cls]!.push(off);
  }

  /** Appends a holder to an entry, moving its slots to a region twice the size when full. */
  private addHolder(e: number, id: number, now: number, touch: number): void {
    const len = this.eLen[e]!;
    const cls = this.eCls[e]!;
    let off = this.eOff[e]!;
    if (len === 1 << cls) {
      const to = this.region(cls + 1);
      // (`region` may have replaced the array: read it after.)
      this.slots.copyWithin(to, off, off + SLOT * len);
      this.freeRegion(off, cls);
      this.eOff[e] = off = to;
      this.eCls[e] = cls + 1;
    }
    const s = this.slots;
    const j = off + SLOT * len;
    s[j] = id;
    s[j + AT] = now;
    s[j + TOUCH] = touch;
    this.eLen[e] = len + 1;
  }

  private numberOf(worker: string): number {
    let id = this.numbers.get(worker);
    if (id === undefined) {
      id = this.freeNumbers.pop() ?? this.names.length;
      this.numbers.set(worker, id);
      this.names[id] = worker;
      this.numbering++;
    }
    return id;
  }

  /**
   * The worker's least recently routed block still held, as the slot of its holder numbers in the
   * entry at the head of its queue (`wb.qBlock[wb.head]`), once stale pairs (blocks routed again
   * since, forgotten, evicted or expired) are skipped; -1 when it holds none.
   */
  private oldest(id: number, wb: WorkerBlocks): number {
    while (wb.head < wb.qLen) {
      const j = this.slotOf(wb.qBlock[wb.head]!, id);
      if (j >= 0 && this.slots[j + TOUCH] === wb.qTouch[wb.head]) return j;
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
      if (now - this.slots[j + AT]! <= this.ttlMs) break;
      this.unhold(wb.qBlock[wb.head]!, j, wb);
    }
  }

  /**
   * The worker no longer holds the block: its slot out of the entry's holders (the others keep
   * their order), and the entry freed with its last holder.
   */
  private unhold(e: number, j: number, wb: WorkerBlocks): void {
    const s = this.slots;
    const off = this.eOff[e]!;
    const len = this.eLen[e]! - 1;
    for (let k = j + SLOT, end = off + SLOT * (len + 1); k < end; k++) s[k - SLOT] = s[k]!;
    this.eLen[e] = len;
    wb.size--;
    if (len === 0) {
      // It is the block's entry (the invariant above), and now free.
      this.entries.delete(this.eBlock[e]!);
      this.eBlock[e] = undefined;
      this.eNext[e] = NONE;
      this.freeRegion(off, this.eCls[e]!);
      this.freeEntries.push(e);
    }
  }

  /** Drops a worker's stale and consumed queue pairs, in place (no new arrays: this runs on the request path). */
  private compact(id: number, wb: WorkerBlocks): void {
    const qBlock = wb.qBlock;
    const qTouch = wb.qTouch;
    let out = 0;
    for (let j = wb.head; j < wb.qLen; j++) {
      const e = qBlock[j]!;
      const k = this.slotOf(e, id);
      if (k >= 0 && this.slots[k + TOUCH] === qTouch[j]) {
        qBlock[out] = e;
        qTouch[out++] = qTouch[j]!;
      }
    }
    wb.qLen = out;
    wb.head = 0;
  }
}
