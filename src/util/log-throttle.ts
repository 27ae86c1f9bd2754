/**
 * At most one log line per distinct problem per interval. A misconfigured route repeats the same
 * mistake on every request; the first occurrence is logged at once, the repeats are counted and
 * the count rides on the next line that gets through.
 */
export class LogThrottle {
  private readonly seen = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly intervalMs: number,
    /** Distinct problems remembered; past this the oldest are forgotten (and may log again). */
    private readonly maxKeys = 1000,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Whether to log `key` now. Returns undefined to stay quiet, else how many repeats were
   * swallowed since the last line for it.
   */
  take(key: string): number | undefined {
    const t = this.now();
    const entry = this.seen.get(key);
    if (entry && t - entry.at < this.intervalMs) {
      entry.suppressed++;
      return undefined;
    }
    const suppressed = entry?.suppressed ?? 0;
    this.seen.delete(key);
    if (this.seen.size >= this.maxKeys) {
      const oldest = this.seen.keys().next().value;
      if (oldest !== undefined) this.seen.delete(oldest);
    }
    this.seen.set(key, { at: t, suppressed: 0 });
    return suppressed;
  }
}
