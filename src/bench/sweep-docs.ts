/**
 * The load-sweep sections of docs/BENCHMARKS.md (`npm run bench -- --only sweep`): for each
 * workload the two tables readers compare policies by (p99 TTFT over offered requests by load,
 * then hit rate / tokens/s / imbalance / shed by load) and the issue's four targets checked on the
 * rows, so the verdicts under each table come from the same run as the table.
 */
import { goodputs, type Goodput, type SweepJsonRow, type SweepRow } from '../sim/sweep.js';
import { goodputRatioText, goodputText } from '../sim/sweep-report.js';
import { pct, secs } from '../sim/table.js';

/**
 * A sweep's row as the docs read it: `kvgate sim --sweep --json`'s (SweepJsonRow), or a plain
 * row whose goodput is then read off the grid (rows from before the search).
 */
type DocsRow = SweepRow & Partial<Pick<SweepJsonRow, 'goodput_load' | 'goodput_missed_at' | 'goodput_probes'>>;

/** One sweep as the docs show it. */
export interface SweepResult {
  /** Heading: `synthetic: chat (seed 1)`, `trace: …`. */
  name: string;
  /** The command a reader runs to reproduce it (`kvgate sim … --sweep … --json`). */
  command: string;
  rows: DocsRow[];
}

/** The targets (docs/BENCHMARKS.md, "Under load"); the report states them, no test asserts them. */
export const SWEEP_TARGETS = {
  /** kvgate's goodput at the SLO against the best baseline's. */
  goodputRatio: 1.3,
  /** kvgate's tokens/s against round robin's, at every load. */
  tokensVsRoundRobin: 0.98,
  /** Busiest worker's work over the mean… */
  imbalance: 1.25,
  /** …at loads of at least this. */
  imbalanceFromLoad: 0.5,
} as const;

const KVGATE = 'kvgate';
const ROUND_ROBIN = 'round-robin';

const load1 = (l: number) => l.toFixed(1);

/** p99 TTFT over offered requests, as the table shows it: a shed share past 1% has no p99. */
function p99Cell(r: SweepRow | undefined): string {
  if (!r) return '-';
  return r.ttft_p99_offered_s === null ? 'shed>1%' : secs(r.ttft_p99_offered_s);
}

function outcomeCell(r: SweepRow | undefined): string {
  if (!r) return '-';
  const tokens = r.throughput_tok_s === null ? '-' : `${Math.round(r.throughput_tok_s / 1000)}k`;
  const imbalance = r.imbalance === null ? '-' : r.imbalance.toFixed(2);
  return `${pct(r.hit_rate)} / ${tokens} / ${imbalance} / ${r.shed}`;
}

function policiesOf(rows: readonly SweepRow[]): string[] {
  return [...new Set(rows.map((r) => r.policy))];
}

function loadsOf(rows: readonly SweepRow[]): number[] {
  return [...new Set(rows.map((r) => r.load))].sort((a, b) => a - b);
}

function table(rows: readonly SweepRow[], cell: (r: SweepRow | undefined) => string, goodput: Map<string, Goodput> | undefined): string {
  const loads = loadsOf(rows);
  const head = ['policy', ...loads.map(load1), ...(goodput ? ['goodput'] : [])];
  const lines = [`| ${head.join(' | ')} |`, `|---|${head.slice(1).map(() => '---:').join('|')}|`];
  for (const p of policiesOf(rows)) {
    const cells = loads.map((l) => cell(rows.find((r) => r.policy === p && r.load === l)));
    if (goodput) cells.push(goodputCell(goodput.get(p)));
    lines.push(`| ${p} | ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

const goodputCell = (g: Goodput | undefined) => (g ? goodputText(g) : '-');

/**
 * Each policy's goodput: the one its run searched for (on every JSON row), else read off the
 * grid (rows from before the search, or with `--goodput-resolution 0`).
 */
function goodputByPolicy(rows: readonly DocsRow[]): Map<string, Goodput> {
  const capacity = rows[0]?.capacity_rps ?? 0;
  const grid = new Map(goodputs(rows, policiesOf(rows), capacity).map((g) => [g.policy, g]));
  for (const r of rows) {
    if (r.goodput_load === undefined) continue;
    grid.set(r.policy, { policy: r.policy, load: r.goodput_load, rps: r.goodput_load * capacity, missedAt: r.goodput_missed_at ?? null, probes: r.goodput_probes ?? [] });
  }
  return grid;
}

const verdict = (met: boolean) => (met ? 'met' : '**missed**');

/** The four targets, one line each, from one sweep's rows. */
export function sweepTargets(rows: readonly SweepRow[]): string[] {
  const policies = policiesOf(rows);
  if (!policies.includes(KVGATE)) return ['kvgate was not among the policies'];
  const baselines = policies.filter((p) => p !== KVGATE);
  const out: string[] = [];
  const goodput = goodputByPolicy(rows);

  const mine = goodput.get(KVGATE);
  if (baselines.length > 0 && mine) {
    const bestLoad = Math.max(...baselines.map((p) => goodput.get(p)?.load ?? 0));
    const leaders = baselines.filter((p) => goodput.get(p)?.load === bestLoad);
    const best = goodput.get(leaders[0]!)!;
    // Every baseline at 0: met only by a kvgate above 0 (at 0 too, no policy met the SLO at any load).
    const ratio = bestLoad > 0 ? mine.load / bestLoad : mine.load > 0 ? Infinity : 0;
    const shown = goodputRatioText(mine, best) ?? (mine.load > 0 ? 'every baseline at 0' : 'every policy at 0');
    out.push(
      `goodput ≥ ${SWEEP_TARGETS.goodputRatio}x the best baseline: ${verdict(ratio >= SWEEP_TARGETS.goodputRatio)} ` +
        `(kvgate ${goodputText(mine)}, best baseline ${goodputText(best)}: ${leaders.join(', ')}; ${shown})`,
    );
  }

  const at = (p: string, l: number) => rows.find((r) => r.policy === p && r.load === l);
  const loads = loadsOf(rows);
  if (policies.includes(ROUND_ROBIN)) {
    let lowest: { ratio: number; load: number } | undefined;
    for (const l of loads) {
      const k = at(KVGATE, l)?.throughput_tok_s;
      const rr = at(ROUND_ROBIN, l)?.throughput_tok_s;
      if (k == null || rr == null || rr <= 0) continue;
      const ratio = k / rr;
      if (!lowest || ratio < lowest.ratio) lowest = { ratio, load: l };
    }
    if (lowest) {
      out.push(
        `tokens/s ≥ ${SWEEP_TARGETS.tokensVsRoundRobin}x round robin at every load: ${verdict(lowest.ratio >= SWEEP_TARGETS.tokensVsRoundRobin)} ` +
          `(lowest ${lowest.ratio.toFixed(3)}x at load ${load1(lowest.load)})`,
      );
    }
  }

  let highest: { imbalance: number; load: number } | undefined;
  for (const l of loads.filter((x) => x >= SWEEP_TARGETS.imbalanceFromLoad)) {
    const imb = at(KVGATE, l)?.imbalance;
    if (imb == null) continue;
    if (!highest || imb > highest.imbalance) highest = { imbalance: imb, load: l };
  }
  if (highest) {
    out.push(
      `imbalance ≤ ${SWEEP_TARGETS.imbalance} at loads ≥ ${SWEEP_TARGETS.imbalanceFromLoad}: ${verdict(highest.imbalance <= SWEEP_TARGETS.imbalance)} ` +
        `(highest ${highest.imbalance.toFixed(2)} at load ${load1(highest.load)})`,
    );
  }

  if (baselines.length > 0) {
    let missedAt = 0;
    let worst: { gap: number; policy: string; load: number } | undefined;
    for (const l of loads) {
      const k = at(KVGATE, l);
      if (!k) continue;
      let above = false;
      for (const p of baselines) {
        const b = at(p, l);
        if (!b || b.hit_rate <= k.hit_rate) continue;
        above = true;
        const gap = (b.hit_rate - k.hit_rate) * 100;
        if (!worst || gap > worst.gap) worst = { gap, policy: p, load: l };
      }
      if (above) missedAt++;
    }
    out.push(
      worst
        ? `hit rate ≥ every baseline's: **missed** at ${missedAt} of ${loads.length} loads (largest gap ${worst.gap.toFixed(2)} points, ${worst.policy} at load ${load1(worst.load)})`
        : `hit rate ≥ every baseline's: met at every load`,
    );
  }
  return out;
}

/** A workload's full section: capacity, both tables, the targets. */
export function sweepSection(r: SweepResult): string {
  const first = r.rows[0];
  const perLoad = first ? `Capacity ${first.capacity_rps.toFixed(2)} req/s; ${first.requests} requests measured per load.` : 'No rows.';
  return [
    `#### ${r.name}`,
    '',
    `\`${r.command}\``,
    '',
    perLoad,
    '',
    'p99 TTFT over offered requests (shed = miss), by offered load:',
    '',
    table(r.rows, p99Cell, goodputByPolicy(r.rows)),
    '',
    'Hit rate / tokens/s (thousands) / imbalance / shed, by load:',
    '',
    table(r.rows, outcomeCell, undefined),
    '',
    ...sweepTargets(r.rows).map((v) => `- ${v}`),
  ].join('\n');
}

/** A held-out workload, condensed: goodput per policy and the targets (the tables are not shown). */
export function heldOutSection(r: SweepResult): string {
  const goodput = goodputByPolicy(r.rows);
  return [
    `#### ${r.name}`,
    '',
    `\`${r.command}\``,
    '',
    `goodput: ${policiesOf(r.rows)
      .map((p) => `${p} ${goodputCell(goodput.get(p))}`)
      .join(', ')}`,
    '',
    ...sweepTargets(r.rows).map((v) => `- ${v}`),
  ].join('\n');
}
