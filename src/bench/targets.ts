/**
 * The gate's performance targets, checked against a run. A target the run did not measure (a
 * size or store left out, half-saturation runs off) is reported as such, never as met.
 *
 * - memory store ≥ 70% of the no-op ceiling's decisions/s at ~2 KB and ~32 KB and ≥ 50% at ~400 KB
 *   (where reading the body is most of any server's work), Redis ≥ 50% at every size (at saturation);
 * - full duplex ≥ 80% of buffered's decisions/s for the same store and size (when both modes ran);
 * - added p99 ≤ 2 ms for ~32 KB bodies at half of saturation;
 * - a ~400 KB body decided in ≤ 3 ms at p50 (the body round trip, at half of saturation: at
 *   saturation a closed loop's latency is its queue, concurrency / throughput, not the gate's cost).
 *
 * A latency percentile from fewer than MIN_SAMPLES requests counts as not measured.
 */
import { parseSize } from './bodies.js';
import type { RunRow } from './run-row.js';

export interface TargetCheck {
  target: string;
  store: 'memory' | 'redis';
  size: string;
  value: number | null;
  limit: number;
  unit: 'ratio' | 'ms';
  /** null: not measured in this run (or too few samples to say). */
  met: boolean | null;
  samples?: number;
}

function latencyCheck(target: string, store: 'memory' | 'redis', size: string, run: RunRow | undefined, pick: (r: RunRow) => number | null, limit: number, samples: (r: RunRow) => number): TargetCheck {
  const n = run ? samples(run) : 0;
  const value = run && n >= MIN_SAMPLES ? pick(run) : null;
  return { target, store, size: run?.size ?? size, value, limit, unit: 'ms', met: value === null ? null : value <= limit, ...(run ? { samples: n } : {}) };
}

export const MIN_SAMPLES = 20;

const near = (size: string, bytes: number) => {
  const b = parseSize(size);
  return b >= bytes / 2 && b <= bytes * 2;
};

export function evaluateTargets(all: readonly RunRow[]): TargetCheck[] {
  // The targets were set for Envoy's BUFFERED mode; full-duplex rows are reported beside them.
  const runs = all.filter((r) => r.body_mode === 'buffered');
  const out: TargetCheck[] = [];
  for (const store of ['memory', 'redis'] as const) {
    const sat = runs.filter((r) => r.target === store && r.load === 'saturation');
    for (const r of sat) {
      const limit = store === 'redis' || near(r.size, 400 * 1024) ? 0.5 : 0.7;
      out.push({ target: `decisions/s ≥ ${limit * 100}% of the no-op ceiling`, store, size: r.size, value: r.ratio_to_noop, limit, unit: 'ratio', met: r.ratio_to_noop === null ? null : r.ratio_to_noop >= limit });
    }
    for (const d of all.filter((r) => r.body_mode === 'full_duplex' && r.target === store && r.load === 'saturation')) {
      const b = sat.find((r) => r.size === d.size);
      if (!b) continue;
      const value = b.decisions_per_s > 0 ? d.decisions_per_s / b.decisions_per_s : null;
      out.push({ target: 'full duplex decisions/s ≥ 80% of buffered', store, size: d.size, value, limit: 0.8, unit: 'ratio', met: value === null ? null : value >= 0.8 });
    }
    const half = runs.filter((r) => r.target === store && r.load === 'half');
    const storeRan = sat.length > 0;
    const p99 = half.find((r) => near(r.size, 32 * 1024));
    if (storeRan) {
      out.push(latencyCheck('added p99 ≤ 2 ms, ~32 KB bodies, half of saturation', store, '32k', p99, (r) => r.added.p99_ms, 2, (r) => r.added.samples));
      const big = half.find((r) => near(r.size, 400 * 1024));
      out.push(latencyCheck('decided ≤ 3 ms at p50, ~400 KB bodies, half of saturation', store, '400k', big, (r) => r.decision.p50_ms, 3, (r) => r.decision.samples));
    }
  }
  return out;
}
