/**
 * The last N routing decisions with their explanations, for the admin debug endpoint. Holds only
 * hashes, worker ids and numbers: no prompt text and no raw session id ever reaches it.
 */
import type { Explanation, RouteOutcome } from '../routing/types.js';

export interface DecisionRecord {
  at: string;
  pool?: string;
  key_kind: 'session' | 'prefix' | undefined;
  key_hash: string | undefined;
  outcome: RouteOutcome | 'shed';
  worker?: string;
  from?: string;
  reason?: string;
  attempts?: number;
  degraded?: boolean;
  /** The request's class of service. */
  class?: string;
  explanation: Explanation;
}

/** A record as pushed: its time as epoch milliseconds, formatted only when someone reads the log. */
export type DecisionEntry = Omit<DecisionRecord, 'at'> & { atMs: number };

export class DecisionLog {
  private readonly ring: DecisionEntry[] = [];
  private next = 0;

  constructor(private readonly size: number) {}

  /** Every routed or shed request lands here, so nothing is formatted (an ISO date took ~1 µs). */
  push(r: DecisionEntry): void {
    if (this.ring.length < this.size) this.ring.push(r);
    else this.ring[this.next] = r;
    this.next = (this.next + 1) % this.size;
  }

  /** Newest first. */
  recent(limit = this.size): DecisionRecord[] {
    const ordered = this.ring.length < this.size ? [...this.ring] : [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
    return ordered
      .reverse()
      .slice(0, limit)
      .map(({ atMs, ...r }) => ({ at: new Date(atMs).toISOString(), ...r }));
  }
}
