/** Micro-benchmark results as a plain-text or markdown table, grouped, each row against its baseline. */
import type { MicroRow } from './suite.js';

function ns(x: number): string {
  if (x >= 1e6) return `${(x / 1e6).toFixed(2)} ms`;
  if (x >= 1e3) return `${(x / 1e3).toFixed(x >= 1e5 ? 0 : 1)} µs`;
  return `${x.toFixed(0)} ns`;
}

const COLUMNS: Array<{ head: string; cell: (r: MicroRow) => string; left?: boolean }> = [
  { head: 'group', cell: (r) => r.group, left: true },
  { head: 'task', cell: (r) => (r.baseline ? `${r.task} (baseline)` : r.task), left: true },
  { head: 'per op', cell: (r) => ns(r.ns_per_op) },
  { head: 'per KB', cell: (r) => (r.ns_per_kb === null ? '' : ns(r.ns_per_kb)) },
  { head: 'per worker', cell: (r) => (r.ns_per_candidate === null ? '' : ns(r.ns_per_candidate)) },
  { head: '× baseline', cell: (r) => (r.baseline ? '1' : r.ratio.toFixed(2)) },
  { head: '±', cell: (r) => `${r.rme_pct.toFixed(1)}%` },
  { head: 'samples', cell: (r) => String(r.samples) },
];

export function formatMicro(rows: readonly MicroRow[]): string {
  const cells = [COLUMNS.map((c) => c.head), ...rows.map((r) => COLUMNS.map((c) => c.cell(r)))];
  const widths = COLUMNS.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  const lines = cells.map((row) => row.map((v, i) => (COLUMNS[i]!.left ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join('  '));
  // A blank line between groups keeps each comparison together.
  const out: string[] = [lines[0]!];
  rows.forEach((r, i) => {
    if (i > 0 && rows[i - 1]!.group !== r.group) out.push('');
    out.push(lines[i + 1]!);
  });
  return out.join('\n');
}

export function markdownMicro(rows: readonly MicroRow[]): string {
  return [
    `| ${COLUMNS.map((c) => c.head).join(' | ')} |`,
    `|${COLUMNS.map((c) => (c.left ? '---' : '---:')).join('|')}|`,
    ...rows.map((r) => `| ${COLUMNS.map((c) => c.cell(r)).join(' | ')} |`),
  ].join('\n');
}
