/**
 * A pool's live sessions: each session's worker, the weight its last commit gave it and when it was
 * last routed, with each worker's total weight kept as sessions come, move and lapse. A session is
 * live while it was routed within the window a snapshot asks about; older ones are dropped from the
 * front of the routing order, so a snapshot costs what lapsed since the last one, not a pass over
 * every session.
 */
interface LiveEntry {
  worker: string;
  weight: number;
  at: number;
}

export class LiveSessions {
  /** Session key → its entry, in routing order (re-inserted when routed again): the oldest first. */
  private readonly entries = new Map<string, LiveEntry>();
  private readonly totals = new Map<string, number>();

  /** The session was routed to `worker` at `at`, weighing `weight` there from now on. */
  record(key: string, worker: string, weight: number, at: number): void {
    const e = this.entries.get(key);
    if (e !== undefined) {
      this.entries.delete(key);
      this.add(e.worker, -e.weight);
    }
    if (!(weight > 0)) return;
    this.entries.set(key, { worker, weight, at });
    this.add(worker, weight);
  }

  /** The session's affinity moved to `to` (migration): it weighs there, with the time it had. */
  moved(key: string, to: string): void {
    const e = this.entries.get(key);
    if (e === undefined || e.worker === to) return;
    this.add(e.worker, -e.weight);
    e.worker = to;
    this.add(to, e.weight);
  }

  /** Each of `workers`' live weight: sessions routed at or after `since`; older ones are dropped. */
  totalsSince(since: number, workers: readonly string[]): Map<string, number> {
    for (const [key, e] of this.entries) {
      if (e.at >= since) break;
      this.entries.delete(key);
      this.add(e.worker, -e.weight);
    }
    const out = new Map<string, number>();
    for (const w of workers) {
      const t = this.totals.get(w);
      if (t !== undefined) out.set(w, t);
    }
    return out;
  }

  clear(): void {
    this.entries.clear();
    this.totals.clear();
  }

  private add(worker: string, weight: number): void {
    const t = (this.totals.get(worker) ?? 0) + weight;
    // Sums of fractions leave dust: below a millionth of a session, none is left.
    if (t > 1e-6) this.totals.set(worker, t);
    else this.totals.delete(worker);
  }
}
