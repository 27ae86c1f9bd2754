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

export class DecisionLog {
  private readonly ring: DecisionRecord[] = [];
  private next = 0;

  constructor(private readonly size: number) {}

  push(r: DecisionRecord): void {
    if (this.ring.length < this.size) this.ring.push(r);
    else this.ring[this.next] = r;
    this.next = (this.next + 1) % this.size;
  }

  /** Newest first. */
  recent(limit = this.size): DecisionRecord[] {
    const ordered = this.ring.length < this.size ? [...this.ring] : [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
    return ordered.reverse().slice(0, limit);
  }
}
