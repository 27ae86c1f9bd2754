/** The tables `kvgate sim` prints for people (the JSON is for programs). */
import type { ResultRow } from './metrics.js';

/** A column: its heading, its cell for a row, and whether numbers line up on the right. */
export interface Column<R> {
  head: string;
  cell: (r: R) => string;
  right?: boolean;
}

const COLUMNS: ReadonlyArray<Column<ResultRow>> = [
  { head: 'policy', cell: (r) => r.policy },
  { head: 'hit', cell: (r) => pct(r.hit_rate), right: true },
  { head: 'of bound', cell: (r) => (r.bound_fraction === null ? '-' : pct(r.bound_fraction)), right: true },
  { head: 'ttft p50', cell: (r) => secs(r.ttft_p50_s), right: true },
  { head: 'p90', cell: (r) => secs(r.ttft_p90_s), right: true },
  { head: 'p99', cell: (r) => secs(r.ttft_p99_s), right: true },
  { head: 'e2e p50', cell: (r) => secs(r.e2e_p50_s), right: true },
  { head: 'p99', cell: (r) => secs(r.e2e_p99_s), right: true },
  { head: 'tok/s', cell: (r) => (r.throughput_tok_s === null ? '-' : Math.round(r.throughput_tok_s).toLocaleString('en-US')), right: true },
  { head: 'imbalance', cell: (r) => (r.imbalance === null ? '-' : r.imbalance.toFixed(2)), right: true },
  { head: 'migrations', cell: (r) => (r.policy === 'pooled-bound' ? '-' : `${r.migrations}/${r.continuations}`), right: true },
  { head: 'shed', cell: (r) => (r.policy === 'pooled-bound' ? '-' : String(r.shed)), right: true },
];

export function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

export function secs(x: number | null): string {
  if (x === null) return '-';
  return x < 1 ? `${(x * 1000).toFixed(0)}ms` : `${x.toFixed(2)}s`;
}

/** Whole milliseconds, for the class and adapter tables ("-" for none). */
export function ms(x: number | null): string {
  return x === null ? '-' : `${Math.round(x * 1000)} ms`;
}

/** Plain text, columns padded; the policy column left-aligned, numbers right-aligned. */
export function formatTable(rows: readonly ResultRow[]): string {
  const cells = [COLUMNS.map((c) => c.head), ...rows.map((r) => COLUMNS.map((c) => c.cell(r)))];
  const widths = COLUMNS.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  return cells.map((row) => row.map((v, i) => (COLUMNS[i]!.right ? v.padStart(widths[i]!) : v.padEnd(widths[i]!))).join('  ')).join('\n');
}

/** The same table as GitHub markdown. */
export function markdownTable(rows: readonly ResultRow[]): string {
  return markdown(COLUMNS, rows);
}

/** Any rows as a GitHub markdown table. */
export function markdown<R>(columns: ReadonlyArray<Column<R>>, rows: readonly R[]): string {
  const head = `| ${columns.map((c) => c.head).join(' | ')} |`;
  const rule = `|${columns.map((c) => (c.right ? '---:' : '---')).join('|')}|`;
  return [head, rule, ...rows.map((r) => `| ${columns.map((c) => c.cell(r)).join(' | ')} |`)].join('\n');
}
