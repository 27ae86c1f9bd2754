/** `kvgate bench` results for people: a plain-text table for the terminal, markdown for the docs. */
import { machineLine } from './machine.js';
import type { BenchReport, RunRow } from './run.js';
import { MIN_SAMPLES, type TargetCheck } from './targets.js';

const ms = (x: number | null) => (x === null ? '-' : x < 10 ? x.toFixed(2) : x.toFixed(1));
const int = (x: number) => Math.round(x).toLocaleString('en-US');

/**
 * Every column names its unit. `terminal: false` columns are left out of the table people read
 * (it has to fit 120 columns); the markdown in docs and `--json` have everything.
 */
const COLUMNS: Array<{ head: string; cell: (r: RunRow) => string; left?: boolean; terminal?: boolean }> = [
  { head: 'server', cell: (r) => r.target, left: true },
  { head: 'body', cell: (r) => r.size, left: true },
  { head: 'load', cell: (r) => (r.load === 'saturation' ? `${r.concurrency} streams` : `${int(r.rate_per_s ?? 0)}/s`), left: true },
  { head: 'body mode', cell: (r) => r.body_mode, left: true },
  { head: 'decisions/s', cell: (r) => int(r.decisions_per_s) },
  { head: '× no-op', cell: (r) => (r.ratio_to_noop === null ? '-' : r.ratio_to_noop.toFixed(2)) },
  { head: '× range', cell: (r) => (r.ratio_range === null ? '-' : `${r.ratio_range[0].toFixed(2)}-${r.ratio_range[1].toFixed(2)}`), terminal: false },
  { head: 'busy µs/req', cell: (r) => int(r.server_busy_us) },
  { head: 'added p50 ms', cell: (r) => ms(r.added.p50_ms) },
  { head: 'p99 ms', cell: (r) => ms(r.added.p99_ms) },
  { head: 'p99.9 ms', cell: (r) => ms(r.added.p999_ms) },
  { head: 'decide p50 ms', cell: (r) => ms(r.decision.p50_ms) },
  { head: 'decide p99 ms', cell: (r) => ms(r.decision.p99_ms), terminal: false },
  // Errors and sheds are listed under the table when there are any (see `anomalies`).
  { head: 'errors', cell: (r) => String(r.errors), terminal: false },
  { head: 'shed', cell: (r) => String(r.shed), terminal: false },
  { head: 'degraded', cell: (r) => (r.gate ? String(r.gate.degraded) : '-'), terminal: false },
  { head: 'server ELU', cell: (r) => r.server_elu.toFixed(2), terminal: false },
  { head: 'client ELU', cell: (r) => r.client_elu.toFixed(2), terminal: false },
  { head: 'RSS MB', cell: (r) => String(r.rss_peak_mb), terminal: false },
];

/** The terminal table: the columns people compare; the rest are in `--json` and the docs' markdown. */
export function formatRuns(runs: readonly RunRow[]): string {
  const cols = COLUMNS.filter((c) => c.terminal !== false);
  const cells = [cols.map((c) => c.head), ...runs.map((r) => cols.map((c) => c.cell(r)))];
  const widths = cols.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  return cells.map((row) => row.map((v, i) => (cols[i]!.left ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join('  ')).join('\n');
}

export function markdownRuns(runs: readonly RunRow[]): string {
  const head = `| ${COLUMNS.map((c) => c.head).join(' | ')} |`;
  const rule = `|${COLUMNS.map((c) => (c.left ? '---' : '---:')).join('|')}|`;
  return [head, rule, ...runs.map((r) => `| ${COLUMNS.map((c) => c.cell(r)).join(' | ')} |`)].join('\n');
}

function verdict(t: TargetCheck): string {
  if (t.met === null) return t.samples !== undefined && t.samples < MIN_SAMPLES ? `too few samples (${t.samples})` : 'not measured';
  return t.met ? 'met' : 'MISSED';
}

function value(t: TargetCheck): string {
  if (t.value === null) return '-';
  return t.unit === 'ratio' ? `${(t.value * 100).toFixed(0)}%` : `${t.value.toFixed(2)} ms`;
}

export function formatTargets(targets: readonly TargetCheck[]): string {
  const w = Math.max(...targets.map((t) => verdict(t).length));
  return targets.map((t) => `  ${verdict(t).padEnd(w)} ${t.store.padEnd(6)} ${t.size.padEnd(5)} ${t.target}: ${value(t)}`).join('\n');
}

export function markdownTargets(targets: readonly TargetCheck[]): string {
  return [
    '| target | store | body | measured | verdict |',
    '|---|---|---|---:|---|',
    ...targets.map((t) => `| ${t.target} | ${t.store} | ${t.size} | ${value(t)} | ${t.met === false ? '**missed**' : verdict(t)} |`),
  ].join('\n');
}

/** Errors, sheds and degraded decisions, spelled out: a number is only as good as what it hides. */
export function anomalies(report: BenchReport): string[] {
  const out: string[] = [];
  for (const r of report.runs) {
    const what = `${r.target} ${r.size} ${r.load}`;
    if (r.errors > 0) out.push(`${what}: ${r.errors} errors (${r.error_samples.join('; ')})`);
    if (r.shed > 0) out.push(`${what}: ${r.shed} requests shed`);
    if (r.dropped > 0) out.push(`${what}: ${r.dropped} arrivals dropped (too many streams outstanding)`);
    if (r.gate && r.gate.degraded > 0) out.push(`${what}: ${r.gate.degraded} decisions routed on local state (Redis past store.timeout_ms)`);
  }
  for (const s of report.skipped) out.push(`skipped ${s}`);
  return out;
}

/** A header line cut at its `; ` separators to fit the 120 columns the table keeps to. */
function wrap(line: string, width = 120): string[] {
  const out: string[] = [];
  let current = '';
  for (const part of line.split('; ')) {
    const next = current ? `${current}; ${part}` : part;
    if (current && next.length > width) {
      out.push(`${current};`);
      current = `  ${part}`;
    } else current = next;
  }
  return [...out, current];
}

export function formatReport(report: BenchReport): string {
  const o = report.options;
  const lines = [
    ...wrap(`kvgate bench: ${machineLine(report.machine)}`),
    ...wrap(`${o.concurrency} streams at saturation from ${o.clientThreads} client thread(s); ${o.rounds} rounds of ${o.durationMs / 1000} s per server and size; ${o.workers} workers`),
    ...(report.redis ? [`Redis: ${report.redis}`] : []),
    `build: ${report.build}${report.build === 'compiled' ? '' : ' (closures cost more than in production: run the compiled `kvgate bench` for figures to publish)'}`,
    '',
    formatRuns(report.runs),
    '',
    'targets:',
    formatTargets(report.targets),
  ];
  const notes = anomalies(report);
  if (notes.length > 0) lines.push('', ...notes);
  lines.push(
    '',
    "added: latency the server adds to a request; decide: from the deciding message to the gate's answer",
    'busy: the server thread per request; errors and sheds are listed above when any; RSS, event-loop use: --json',
    `finished in ${report.wall_s} s`,
  );
  return `${lines.join('\n')}\n`;
}
