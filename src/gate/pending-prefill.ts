/**
 * The prefill work this gate has sent each worker and not yet seen start answering: for every
 * lease it holds, the prompt blocks the chosen worker did not hold (the prefix index's view when
 * it was placed). A lease ends at the first token, so this is the work queued ahead of a new
 * request on that worker, in blocks of prompt, which the in-flight count (requests) cannot tell:
 * 16 queued chat turns are a fraction of a second, 16 long documents many seconds.
 *
 * Local to this gate process: the store keeps counts of leases, not their sizes. With several
 * replicas each sees its own share of every worker's queue, which still ranks the workers (the
 * policy compares workers, and each replica's traffic is a sample of the whole).
 */
import type { Lease } from '../state/store.js';

export class PendingPrefill {
  private readonly byLease = new Map<string, { worker: string; blocks: number }>();
  private readonly byWorker = new Map<string, number>();

  /** A routed request: `blocks` of prompt `lease.worker` must compute before its first token. */
  add(lease: Lease, blocks: number): void {
    if (!(blocks > 0) || this.byLease.has(lease.id)) return;
    this.byLease.set(lease.id, { worker: lease.worker, blocks });
    this.byWorker.set(lease.worker, (this.byWorker.get(lease.worker) ?? 0) + blocks);
  }

  /** The lease ended (first token, error or abort). Unknown leases are ignored. */
  remove(lease: Lease): void {
    const p = this.byLease.get(lease.id);
    if (!p) return;
    this.byLease.delete(lease.id);
    const left = (this.byWorker.get(p.worker) ?? 0) - p.blocks;
    if (left > 0) this.byWorker.set(p.worker, left);
    else this.byWorker.delete(p.worker);
  }

  /** Blocks of prompt queued on `worker` by this gate (0 when none). */
  of(worker: string): number {
    return this.byWorker.get(worker) ?? 0;
  }
}
