/**
 * Writes benchmark results into docs/BENCHMARKS.md between generated-section markers, leaving the
 * hand-written text around them alone:
 *
 *   <!-- bench:NAME:start -->  …generated…  <!-- bench:NAME:end -->
 *
 * A section whose markers are missing is appended at the end, with its markers, so a fresh file
 * (or a renamed section) never loses results.
 */
import type { ResultRow } from '../sim/metrics.js';
import { markdownTable as simTable } from '../sim/table.js';

export function replaceSection(doc: string, name: string, content: string): string {
  const start = `<!-- bench:${name}:start -->`;
  const end = `<!-- bench:${name}:end -->`;
  const block = `${start}\n${content.trim()}\n${end}`;
  const i = doc.indexOf(start);
  const j = doc.indexOf(end);
  if (i === -1 || j === -1 || j < i) return `${doc.trimEnd()}\n\n${block}\n`;
  return doc.slice(0, i) + block + doc.slice(j + end.length);
}

export interface SimResult {
  /** What was replayed: a synthetic workload name or a trace path relative to the traces folder. */
  name: string;
  command: string;
  rows: ResultRow[];
}

/**
 * The simulator targets, checked per workload: kvgate at or above every baseline's hit
 * rate and at or below every baseline's p99 TTFT, imbalance ≤ 1.25, ≥ 90% of the pooled bound.
 */
export function simVerdicts(rows: readonly ResultRow[]): string[] {
  const k = rows.find((r) => r.policy === 'kvgate');
  if (!k) return ['kvgate was not among the policies'];
  const baselines = rows.filter((r) => r.policy !== 'kvgate' && r.policy !== 'pooled-bound');
  const out: string[] = [];
  const bestHit = baselines.reduce<ResultRow | undefined>((b, r) => (!b || r.hit_rate > b.hit_rate ? r : b), undefined);
  if (bestHit) {
    out.push(k.hit_rate >= bestHit.hit_rate - 1e-9 ? `hit rate ≥ every baseline: met` : `hit rate ≥ every baseline: **missed** (${bestHit.policy} ${pct(bestHit.hit_rate)} > ${pct(k.hit_rate)})`);
  }
  const withP99 = baselines.filter((r) => r.ttft_p99_s !== null);
  const bestP99 = withP99.reduce<ResultRow | undefined>((b, r) => (!b || r.ttft_p99_s! < b.ttft_p99_s! ? r : b), undefined);
  if (bestP99 && k.ttft_p99_s !== null) {
    out.push(k.ttft_p99_s <= bestP99.ttft_p99_s! + 1e-9 ? 'p99 TTFT ≤ every baseline: met' : `p99 TTFT ≤ every baseline: **missed** (${bestP99.policy} ${secs(bestP99.ttft_p99_s!)} < ${secs(k.ttft_p99_s)})`);
  }
  if (k.imbalance !== null) out.push(k.imbalance <= 1.25 ? `imbalance ${k.imbalance.toFixed(2)} ≤ 1.25: met` : `imbalance ${k.imbalance.toFixed(2)} ≤ 1.25: **missed**`);
  if (k.bound_fraction !== null) {
    out.push(k.bound_fraction >= 0.9 ? `${pct(k.bound_fraction)} of the pooled bound (≥ 90%): met` : `${pct(k.bound_fraction)} of the pooled bound (≥ 90%): **missed** (where load allows: see shed and TTFT)`);
  }
  return out;
}

export function simSection(results: readonly SimResult[]): string {
  if (results.length === 0) return '_Not run._';
  return results
    .map((r) => [`#### ${r.name}`, '', `\`${r.command}\``, '', simTable(r.rows), '', ...simVerdicts(r.rows).map((v) => `- ${v}`)].join('\n'))
    .join('\n\n');
}

/** One more digit than the tables show, so a miss by a hair does not read "82.3% > 82.3%". */
function pct(x: number): string {
  return `${(x * 100).toFixed(2)}%`;
}

function secs(x: number): string {
  return x < 1 ? `${(x * 1000).toFixed(1)} ms` : `${x.toFixed(3)} s`;
}
