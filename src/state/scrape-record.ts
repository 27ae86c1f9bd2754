/**
 * A worker's latest scrape as a store keeps it, and the record it reads back: one rule for the
 * memory store and for a collector judging on its own scrapes while the shared store is away.
 */
import type { SignalRecord, WorkerSignals } from '../routing/health.js';

export interface KeptScrape {
  signals: WorkerSignals;
  /** When the last successful scrape was kept; -Infinity if none was. */
  t: number;
  failures: number;
  error?: string;
}

/** The scrape kept after `update`: a failure keeps the last figures and counts itself. */
export function keepScrape(prev: KeptScrape | undefined, update: { signals: WorkerSignals } | { error: string }, now: number): KeptScrape {
  if ('signals' in update) return { signals: update.signals, t: now, failures: 0 };
  return { signals: prev?.signals ?? {}, t: prev?.t ?? -Infinity, failures: (prev?.failures ?? 0) + 1, error: update.error };
}

/** The record read back at `now`, aged since the last successful scrape. */
export function scrapeRecord(kept: KeptScrape, now: number): SignalRecord {
  return { signals: kept.signals, ageMs: now - kept.t, failures: kept.failures, ...(kept.error !== undefined ? { error: kept.error } : {}) };
}
