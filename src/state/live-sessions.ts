/**
 * A pool's live sessions: each session's worker and when it was last routed, with each worker's
 * count kept as sessions come, move and lapse. A session is
 * live while it was routed within the window a snapshot asks about; older ones are dropped from the
 * front of the routing order, so a snapshot costs what lapsed since the last one, not a pass over
 * every session.
 */
interface LiveEntry {
  worker: string;
  at: number;
}

export class LiveSessions {
  /** Session key → its entry, in routing order (re-inserted when routed again): the oldest first. */
  private readonly entries = new Map<string, LiveEntry>();
  private readonly totals = new Map<string, number>();

  /** The session was routed to `worker` at `at`: counted there from now on (`live`), or nowhere. */
  record(key: string, worker: string, live: boolean, at: number): void {
    const e = this.entries.get(key);
    if (e !== undefined) {
      this.entries.delete(key);
      this.add(e.worker, -1);
    }
    if (!live) return;
    this.entries.set(key, { worker, at });
    this.add(worker, 1);
  }

  /** The session's affinity moved to `to` (migration): it counts there, with the time it had. */
  moved(key: string, to: string): void {
    const e = this.entries.get(key);
    if (e === undefined || e.worker === to) return;
    this.add(e.worker, -1);
    e.worker = to;
    this.add(to, 1);
  }

  /** Each of `workers`' live sessions: those routed at or after `since`; older ones are dropped. */
  totalsSince(since: number, workers: readonly string[]): Map<string, number> {
    for (const [key, e] of this.entries) {
      if (e.at >= since) break;
      this.entries.delete(key);
      this.add(e.worker, -1);
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

  private add(worker: string, by: 1 | -1): void {
    const t = (this.totals.get(worker) ?? 0) + by;
    if (t > 0) this.totals.set(worker, t);
    else this.totals.delete(worker);
  }
}
