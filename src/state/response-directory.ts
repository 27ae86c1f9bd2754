/**
 * Which worker produced each stored response (OpenAI Responses API). An engine keeps a stored
 * response in the memory of the instance that made it (vLLM does), so a request that continues it
 * with `previous_response_id` can only be served there. Ids arrive hashed (never in the clear) and
 * expire after a TTL; an entry is written once and never changes, so a lost or late write costs at
 * most one continuation routed by its other keys.
 *
 * Both stores keep one of these in process: the memory store as its record, the Redis store as
 * what this replica learned itself, answered when Redis is unreachable or lost its data.
 */
import { LRUCache } from 'lru-cache';
import { lruClock } from './lru-clock.js';

export class ResponseDirectory {
  private readonly entries: LRUCache<string, string>;

  /** `now` (ms) times the TTLs: the owning store's clock. */
  constructor(maxEntries: number, now: () => number = Date.now) {
    // Bounded by count through maxSize (every entry weighs 1), not `max`: lru-cache allocates
    // `max` slots (and, with TTLs, two timestamp arrays) up front, which for a million took
    // ~100 ms of every gate's start-up; this way they grow with use. Eviction is the same LRU.
    this.entries = new LRUCache<string, string>({ maxSize: maxEntries, sizeCalculation: () => 1, ttlAutopurge: false, ...lruClock(now) });
  }

  record(pool: string, responseHash: string, worker: string, ttlMs: number): void {
    this.entries.set(entryKey(pool, responseHash), worker, { ttl: ttlMs });
  }

  worker(pool: string, responseHash: string): string | undefined {
    return this.entries.get(entryKey(pool, responseHash));
  }
}

function entryKey(pool: string, responseHash: string): string {
  return `${pool}\u0000${responseHash}`;
}

/**
 * Most response ids one process remembers: a million entries is about 200 MB at worst, past the
 * TTL the least recently used go first.
 */
export const MAX_LOCAL_RESPONSES = 1_000_000;
