/**
 * Rendezvous (highest-random-weight) scores for tie-breaking: deterministic across processes and
 * spread evenly over workers for different keys, so replicas agree and ties do not pile up.
 */
import { xxh } from '../util/xxhash.js';

export function rendezvousScore(key: string, worker: string): number {
  return xxh().h32(`${key}\u0000${worker}`, 0);
}
