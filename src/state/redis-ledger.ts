/**
 * The Redis store's ledger of what this replica holds or decided that Redis may not know: its
 * leases in their three states, and the affinities it decided while Redis was unreachable. The
 * store's timers and its reconnect handler act on it; this module only keeps it consistent.
 * docs/DESIGN.md "The Redis store's ledger" has the state diagram.
 *
 * A lease is in exactly one of:
 *   local       taken while Redis was unreachable; counted only in this process
 *   shared      in Redis's in-flight set; renewed until released
 *   releasing   released, or written by a commit whose reply came too late (the replica decided
 *               locally); its removal from Redis rides on this replica's next command to the pool
 *               (a commit or read), or goes on its own when the store's short flush timer fires
 *   unreleased  released, but the removal failed; retried on each refresh, until Redis has
 *               lapsed it on its own (a lease TTL after it left `shared`)
 * and leaves the ledger when released (local), removed from Redis (releasing, unreleased), lapsed
 * (unreleased) or when the store closes. A local lease becomes shared once a resync has re-added it to Redis; a
 * releasing one is taken out while a command carries its removal, and comes back as unreleased
 * if that command fails.
 */
import { LRUCache } from 'lru-cache';
import type { Lease } from './store.js';

/** An affinity decided while Redis was unreachable, to be written back when it returns. */
export interface UnsyncedAffinity {
  pool: string;
  key: string;
  worker: string;
  expiresAt: number;
}

export class RedisLedger {
  private readonly local = new Map<string, Lease>();
  private readonly shared = new Map<string, Lease>();
  private readonly releasing = new Map<string, Lease>();
  private readonly unreleased = new Map<string, Lease>();
  /** Keyed like the store's affinity cache (pool and key). */
  private readonly unsynced: LRUCache<string, UnsyncedAffinity>;
  /**
   * When each lease Redis may count though no request holds it left `shared` (released, taken
   * back, added back by a renewal): Redis wrote its expiry last before then, so it lapses there one
   * lease TTL later at the latest. By the lease object, which goes with the lease from state to
   * state (the store hands back what `takeReleasing` gave it) and takes its entry with it when it goes.
   */
  private readonly leftShared = new WeakMap<Lease, number>();

  /** `leaseTtlMs`: Redis drops a lease no renewal reached for this long. */
  constructor(
    maxUnsyncedAffinities: number,
    private readonly leaseTtlMs: number,
  ) {
    this.unsynced = new LRUCache({ max: maxUnsyncedAffinities });
  }

  /** A commit Redis accepted. */
  addShared(lease: Lease): void {
    this.shared.set(lease.id, lease);
  }

  /** A commit made on local state while Redis was unreachable. */
  addLocal(lease: Lease): void {
    this.local.set(lease.id, lease);
  }

  /**
   * Ends a lease. 'shared': Redis counts it, so it is now releasing: the caller sends its removal
   * (`takeReleasing`) and reports a failure with `releaseFailed`; 'local': nothing to tell Redis;
   * undefined: already released.
   */
  release(id: string): 'local' | 'shared' | undefined {
    if (this.local.delete(id)) return 'local';
    const lease = this.shared.get(id);
    if (lease === undefined) return undefined;
    this.shared.delete(id);
    this.releasing.set(id, lease);
    this.leftShared.set(lease, Date.now());
    return 'shared';
  }

  /**
   * Releasing leases whose removal a command is about to carry, taken out of the ledger: of one
   * pool and only on `workers` (a command names only its pool's workers' keys), at most `max`; or,
   * without a pool, all of them.
   */
  takeReleasing(pool?: string, workers?: ReadonlySet<string>, max = Infinity): Lease[] {
    const out: Lease[] = [];
    if (this.releasing.size === 0) return out;
    for (const [id, l] of this.releasing) {
      if (out.length >= max) break;
      if (pool !== undefined && (l.pool !== pool || (workers !== undefined && !workers.has(l.worker)))) continue;
      out.push(l);
      this.releasing.delete(id);
    }
    return out;
  }

  get releasingCount(): number {
    return this.releasing.size;
  }

  /** The command carrying the lease's removal failed (or never went): retried on each refresh. */
  releaseFailed(lease: Lease): void {
    this.releasing.delete(lease.id);
    this.unreleased.set(lease.id, lease);
  }

  /**
   * A lease Redis may count though this replica does not hold it (a renewal added it back after its
   * removal ran): removed like a release Redis did not take, unless its removal is still to be sent.
   */
  mustRemove(lease: Lease): void {
    if (this.shared.has(lease.id) || this.local.has(lease.id) || this.releasing.has(lease.id)) return;
    this.unreleased.set(lease.id, lease);
    this.leftShared.set(lease, Date.now());
  }

  /**
   * A lease a commit may have written though the replica gave up on its reply (it decided locally):
   * it is not held, so it is removed like a released one (releasing, then unreleased if that fails).
   */
  takeBack(lease: Lease): void {
    this.releasing.set(lease.id, lease);
    this.leftShared.set(lease, Date.now());
  }

  /**
   * Released leases Redis may still count, to remove again. Those that left `shared` a lease TTL
   * ago or more are dropped instead: Redis has lapsed them itself (no renewal names them), and
   * while Redis refuses the removals (a demoted master answering READONLY, a long outage) the list
   * would otherwise only grow, every entry resent on every refresh. At most `max`, oldest first.
   */
  unreleasedLeases(now = Date.now(), max = Infinity): Lease[] {
    const out: Lease[] = [];
    for (const [id, l] of this.unreleased) {
      if (out.length >= max) break;
      if (now - (this.leftShared.get(l) ?? now) >= this.leaseTtlMs) this.unreleased.delete(id);
      else out.push(l);
    }
    return out;
  }

  get unreleasedCount(): number {
    return this.unreleased.size;
  }

  removedFromRedis(ids: Iterable<string>): void {
    for (const id of ids) this.unreleased.delete(id);
  }

  /** Leases to keep alive in Redis. */
  sharedLeases(pool?: string): Lease[] {
    const all = [...this.shared.values()];
    return pool === undefined ? all : all.filter((l) => l.pool === pool);
  }

  localLeases(pool: string): Lease[] {
    return [...this.local.values()].filter((l) => l.pool === pool);
  }

  isShared(id: string): boolean {
    return this.shared.has(id);
  }

  /** Local leases this process holds on a worker (added to Redis's count, which lacks them). */
  localCount(pool: string, worker: string): number {
    let n = 0;
    for (const l of this.local.values()) if (l.pool === pool && l.worker === worker) n++;
    return n;
  }

  /** A resync re-added these local leases to Redis: they are shared now, unless released meanwhile. */
  shareLocal(leases: readonly Lease[]): void {
    for (const l of leases) if (this.local.delete(l.id)) this.shared.set(l.id, l);
  }

  decidedLocally(cacheKey: string, a: UnsyncedAffinity): void {
    this.unsynced.set(cacheKey, a);
  }

  /** Locally decided affinities of a pool still worth writing back. */
  unsyncedAffinities(pool: string, now: number): Array<[string, UnsyncedAffinity]> {
    return [...this.unsynced.entries()].filter(([, u]) => u.pool === pool && u.expiresAt > now);
  }

  /** Written back (or overtaken by another replica's): forgotten, unless decided again meanwhile. */
  affinityWritten(cacheKey: string, a: UnsyncedAffinity): void {
    if (this.unsynced.get(cacheKey) === a) this.unsynced.delete(cacheKey);
  }

  /** Something decided locally still needs writing back. */
  get behind(): boolean {
    return this.unsynced.size > 0 || this.local.size > 0;
  }

  /** Pools with something to write back. */
  poolsBehind(): Set<string> {
    const pools = new Set<string>();
    for (const u of this.unsynced.values()) pools.add(u.pool);
    for (const l of this.local.values()) pools.add(l.pool);
    return pools;
  }

  /** On close: every lease Redis may still count for this process; the ledger is emptied. */
  drainForClose(): Lease[] {
    const out = [...this.shared.values(), ...this.releasing.values(), ...this.unreleased.values()];
    this.shared.clear();
    this.releasing.clear();
    this.unreleased.clear();
    return out;
  }
}
