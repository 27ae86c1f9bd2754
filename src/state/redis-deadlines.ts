/**
 * The Redis store's per-decision deadlines (`store.timeout_ms`) on one timer. Every decision gets
 * the same timeout, so deadlines come due in the order they were set: a FIFO queue whose head is
 * the next to lapse, and one timer armed for that head, instead of a timer (and a racing promise)
 * per decision. Under load many decisions are pending at once and the timer is re-armed about once
 * per timeout, not once per decision.
 *
 * A deadline lapses no earlier than `timeoutMs` after it was set (measured on the monotonic clock,
 * as Node's own timers are), and about as promptly as a timer of its own would have fired.
 */
import { performance } from 'node:perf_hooks';

/** One pending deadline; `settle` it when the work it bounds finished in time. */
export interface Deadline {
  readonly at: number;
  /** Settled (finished in time) or lapsed: nothing more happens to it. */
  done: boolean;
  readonly onLapse: () => void;
}

export class DeadlineQueue {
  /** Pending deadlines in the order set (so by `at`); settled ones are skipped when reached. */
  private queue: Deadline[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly timeoutMs: number) {}

  /** A deadline `timeoutMs` from now; `onLapse` runs once if it is not settled by then. */
  add(onLapse: () => void): Deadline {
    const d: Deadline = { at: performance.now() + this.timeoutMs, done: false, onLapse };
    this.queue.push(d);
    this.timer ??= setTimeout(this.fire, this.timeoutMs);
    return d;
  }

  /** The work finished: the deadline will not lapse. False when it already had. */
  settle(d: Deadline): boolean {
    if (d.done) return false;
    d.done = true;
    return true;
  }

  /** Deadlines not yet settled or lapsed (for tests). */
  get pending(): number {
    let n = 0;
    for (let i = this.head; i < this.queue.length; i++) if (!this.queue[i]!.done) n++;
    return n;
  }

  private readonly fire = (): void => {
    this.timer = undefined;
    const now = performance.now();
    const q = this.queue;
    const lapsed: Deadline[] = [];
    while (this.head < q.length) {
      const d = q[this.head]!;
      if (!d.done) {
        if (d.at > now) break;
        d.done = true;
        lapsed.push(d);
      }
      this.head++;
    }
    // Drop what has been passed once it is most of the array (amortised O(1) per deadline).
    if (this.head === q.length) {
      this.queue = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > q.length) {
      this.queue = q.slice(this.head);
      this.head = 0;
    }
    if (this.head < this.queue.length) this.timer = setTimeout(this.fire, Math.max(1, this.queue[this.head]!.at - now));
    for (const d of lapsed) d.onLapse();
  };
}
