/**
 * The discrete-event engine: a clock and a queue of timed callbacks. Events at the same instant run
 * in the order they were scheduled, so runs are deterministic. A callback may return a promise
 * (kvgate's Gate is async); the loop awaits it before the next event, so simulated time never
 * moves while a routing decision is being made.
 */
import { PriorityQueue } from '@datastructures-js/priority-queue';

interface SimEvent {
  time: number;
  seq: number;
  fire: () => void | Promise<void>;
}

export class EventLoop {
  private readonly queue = new PriorityQueue<SimEvent>((a, b) => a.time - b.time || a.seq - b.seq);
  private seq = 0;
  private readonly pending: Promise<void>[] = [];
  /** Simulated seconds. */
  now = 0;

  /** Runs `fire` at simulated time `time` (never earlier than now). */
  at(time: number, fire: () => void | Promise<void>): void {
    this.queue.enqueue({ time: Math.max(time, this.now), seq: this.seq++, fire });
  }

  /** Lets synchronous handlers hand over a promise the loop must settle before going on. */
  settle(p: void | Promise<void>): void {
    if (p) this.pending.push(p);
  }

  get size(): number {
    return this.queue.size();
  }

  async run(): Promise<void> {
    for (;;) {
      const ev = this.queue.dequeue();
      if (ev === null) return;
      this.now = ev.time;
      const r = ev.fire();
      if (r) await r;
      while (this.pending.length > 0) await this.pending.shift();
    }
  }
}
