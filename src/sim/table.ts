/** The per-policy table `kvgate sim` prints for people (the JSON is for programs). */
import type { ResultRow } from './metrics.js';

const COLUMNS: Array<{ head: string; cell: (r: ResultRow) => string }> = [
  { head: 'policy', cell: (r) => r.policy },
  { head: 'hit', cell: (r) => pct(r.hit_rate) },
  { head: 'of bound', cell: (r) => (r.bound_fraction === null ? '-' : pct(r.bound_fraction)) },
  { head: 'ttft p50', cell: (r) => secs(r.ttft_p50_s) },
  { head: 'p90', cell: (r) => secs(r.ttft_p90_s) },
  { head: 'p99', cell: (r) => secs(r.ttft_p99_s) },
  { head: 'e2e p50', cell: (r) => secs(r.e2e_p50_s) },
  { head: 'p99', cell: (r) => secs(r.e2e_p99_s) },
  { head: 'tok/s', cell: (r) => (r.throughput_tok_s === null ? '-' : Math.round(r.throughput_tok_s).toLocaleString('en-US')) },
  { head: 'imbalance', cell: (r) => (r.imbalance === null ? '-' : r.imbalance.toFixed(2)) },
  { head: 'migrations', cell: (r) => (r.policy === 'pooled-bound' ? '-' : `${r.migrations}/${r.continuations}`) },
  { head: 'shed', cell: (r) => (r.policy === 'pooled-bound' ? '-' : String(r.shed)) },
];

export function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

export function secs(x: number | null): string {
  if (x === null) return '-';
  return x < 1 ? `${(x * 1000).toFixed(0)}ms` : `${x.toFixed(2)}s`;
}

/** Plain text, columns padded; the policy column left-aligned, numbers right-aligned. */
export function formatTable(rows: readonly ResultRow[]): string {
  const cells = [COLUMNS.map((c) => c.head), ...rows.map((r) => COLUMNS.map((c) => c.cell(r)))];
  const widths = COLUMNS.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  return cells.map((row) => row.map((v, i) => (i === 0 ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join('  ')).join('\n');
}

/** The same table as GitHub markdown. */
export function markdownTable(rows: readonly ResultRow[]): string {
  const head = `| ${COLUMNS.map((c) => c.head).join(' | ')} |`;
  const rule = `|${COLUMNS.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`;
  return [head, rule, ...rows.map((r) => `| ${COLUMNS.map((c) => c.cell(r)).join(' | ')} |`)].join('\n');
}
