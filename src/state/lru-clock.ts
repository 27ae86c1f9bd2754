/**
 * The options that time an lru-cache's TTLs by a store's own clock (milliseconds), so that one
 * clock decides every expiry in the store: the wall clock in production, the simulated one in the
 * simulator (where a run covers hours of simulated time in seconds of real time).
 */
import type { LRUCache } from 'lru-cache';

export function lruClock(now: () => number): Pick<LRUCache.OptionsBase<string, string, unknown>, 'perf' | 'ttlResolution'> {
  return {
    // lru-cache takes an entry stamped at time 0 for one without a TTL (it tests the stamp for
    // truth), and a simulated clock starts at 0: shifted by 1 ms, which no difference sees.
    perf: { now: () => now() + 1 },
    // Its default (1 ms) caches a reading for a millisecond of real time, by a timer: a simulated
    // clock moves far more in that millisecond. Read the clock each time (no timer either).
    ttlResolution: 0,
  };
}
