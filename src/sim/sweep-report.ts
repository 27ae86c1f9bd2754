/**
 * What `kvgate sim --sweep` prints and writes: a table per load, goodput at the SLO per policy,
 * and with `--report DIR` a markdown report with the TTFT-against-load chart of serving benchmarks.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TopLevelSpec } from 'vega-lite';
import { renderSvg } from './report.js';
import type { Goodput, SweepReport, SweepRow } from './sweep.js';
import { formatTable, markdownTable, pct, secs } from './table.js';

function byLoad(r: SweepReport): Array<[number, SweepRow[]]> {
  return r.loads.map((l) => [l, r.rows.filter((x) => x.load === l)]);
}

/** A goodput as read: "at least" when the policy met the SLO at every load run (no upper bound found). */
export function goodputText(g: Pick<Goodput, 'load' | 'missedAt'>, digits = 2): string {
  return `${g.missedAt === null && g.load > 0 ? '≥' : ''}${g.load.toFixed(digits)}`;
}

/**
 * One goodput against another (kvgate's against the best baseline's), as read: a goodput met at
 * every load run is only a lower bound, so the ratio is then one too (`mine`'s), an upper bound
 * (`best`'s), or unknown (both). Undefined when `best` is 0.
 */
export function goodputRatioText(mine: Pick<Goodput, 'load' | 'missedAt'>, best: Pick<Goodput, 'load' | 'missedAt'>): string | undefined {
  if (!(best.load > 0)) return undefined;
  const mineOpen = mine.missedAt === null && mine.load > 0;
  const bestOpen = best.missedAt === null;
  if (mineOpen && bestOpen) return 'both met the SLO at every load run';
  return `${mineOpen ? '≥' : bestOpen ? '≤' : ''}${(mine.load / best.load).toFixed(2)}x`;
}

export function goodputLines(r: SweepReport): string[] {
  const baselines = r.goodput.filter((g) => g.policy !== 'kvgate');
  const best = baselines.reduce<Goodput | undefined>((b, g) => (b === undefined || g.load > b.load ? g : b), undefined);
  return r.goodput.map((g) => {
    const text = g.policy === 'kvgate' && best ? goodputRatioText(g, best) : undefined;
    const ratio = text === undefined ? '' : text.endsWith('x') ? ` (${text} the best baseline)` : ' (so did the best baseline)';
    const missed = g.missedAt === null ? 'met the SLO at every load run' : `missed it at ${g.missedAt.toFixed(3)}`;
    return `${g.policy.padEnd(20)} ${goodputText(g)} of capacity, ${g.rps.toFixed(2)} req/s; ${missed}${ratio}`;
  });
}

function header(r: SweepReport): string {
  const c = r.capacity;
  return (
    `${r.workload.name}: capacity ${c.capacityRps.toFixed(2)} req/s on ${r.fleet.workers} workers × ${r.fleet.cacheTokens.toLocaleString('en-US')} KV tokens ` +
    `(pooled-cache hit ${pct(c.pooledHitRate)}, ${secs(c.meanServiceS)} of compute per request; natural rate ${c.naturalRps.toFixed(2)} req/s)`
  );
}

export function formatSweep(r: SweepReport): string {
  const parts = [header(r), ''];
  for (const [load, rows] of byLoad(r)) {
    const copies = rows[0]?.copies ?? 1;
    parts.push(`load ${load.toFixed(2)}: ${(rows[0]?.offered_rps ?? 0).toFixed(2)} req/s, ${rows[0]?.requests ?? 0} requests${copies > 1 ? `, ${copies} session copies` : ''}`);
    parts.push(formatTable(rows), '');
  }
  parts.push(`goodput at p99 TTFT ≤ ${r.sloTtftS} s (shed requests count as misses):`, ...goodputLines(r), '');
  return parts.join('\n');
}

/** The TTFT-against-load chart's points: p50 and p99 at every swept load, and p99 at every load of the goodput search. */
export function ttftPoints(r: Pick<SweepReport, 'rows' | 'goodput'>): Array<{ policy: string; quantile: 'p50' | 'p99'; load: number; ttft_s: number }> {
  const values = r.rows.flatMap((row) =>
    (
      [
        ['p50', row.ttft_p50_s],
        ['p99', row.ttft_p99_offered_s],
      ] as const
    )
      .filter(([, v]) => v !== null)
      .map(([q, v]) => ({ policy: row.policy, quantile: q, load: row.load, ttft_s: Math.max(v!, 1e-3) })),
  );
  // The goodput search's runs carry p99 only: each policy's p99 line goes on through them, to where it crosses the SLO.
  for (const g of r.goodput) {
    for (const p of g.probes) if (p.ttftP99OfferedS !== null) values.push({ policy: g.policy, quantile: 'p99', load: p.load, ttft_s: Math.max(p.ttftP99OfferedS, 1e-3) });
  }
  return values;
}

function ttftChart(r: SweepReport): TopLevelSpec {
  const values = ttftPoints(r);
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: `Time to first token against offered load (log scale; dashed: the ${r.sloTtftS} s SLO; p99 also at the goodput search's loads)`,
    width: 560,
    height: 320,
    layer: [
      {
        data: { values },
        mark: { type: 'line', point: true },
        encoding: {
          x: { field: 'load', type: 'quantitative', title: 'offered load (share of capacity)' },
          y: { field: 'ttft_s', type: 'quantitative', scale: { type: 'log' }, title: 'TTFT seconds' },
          color: { field: 'policy', type: 'nominal' },
          strokeDash: { field: 'quantile', type: 'nominal', sort: ['p99', 'p50'] },
        },
      },
      {
        data: { values: [{ slo: r.sloTtftS }] },
        mark: { type: 'rule', strokeDash: [4, 4], color: '#888' },
        encoding: { y: { field: 'slo', type: 'quantitative' } },
      },
    ],
  };
}

export async function writeSweepReport(dir: string, r: SweepReport, command: string): Promise<{ markdown: string; charts: string[] }> {
  mkdirSync(dir, { recursive: true });
  const chart = join(dir, 'ttft-vs-load.svg');
  writeFileSync(chart, await renderSvg(ttftChart(r)));
  const lines = [
    `# kvgate sim --sweep: ${r.workload.name}`,
    '',
    `Command: \`${command}\``,
    '',
    `Workload: ${r.workload.description}.`,
    '',
    `${header(r)}. Capacity is the rate that keeps every worker's compute busy if each request hit the cache as well as in the pooled bound (src/sim/scale.ts).`,
    '',
    '![TTFT against offered load](ttft-vs-load.svg)',
    '',
    `## Goodput at p99 TTFT ≤ ${r.sloTtftS} s`,
    '',
    'The highest load up to which p99 TTFT over every offered request (a shed request counts as a miss) stays within the SLO: the loads swept, then each policy alone at more loads, upwards while it meets the SLO and then halving the gap to the first load it missed. "≥": met at every load run.',
    '',
    '| policy | load | req/s | first load missed | loads searched (p99 TTFT) |',
    '|---|---:|---:|---:|---|',
    ...r.goodput.map(
      (g) =>
        `| ${g.policy} | ${goodputText(g)} | ${g.rps.toFixed(2)} | ${g.missedAt === null ? '-' : g.missedAt.toFixed(3)} | ${
          g.probes.map((p) => `${p.load.toFixed(3)} (${p.ttftP99OfferedS === null ? 'shed>1%' : secs(p.ttftP99OfferedS)})`).join(', ') || '-'
        } |`,
    ),
    '',
  ];
  for (const [load, rows] of byLoad(r)) {
    lines.push(`## Load ${load.toFixed(2)} (${(rows[0]?.offered_rps ?? 0).toFixed(2)} req/s)`, '', markdownTable(rows), '');
  }
  const markdown = join(dir, 'report.md');
  writeFileSync(markdown, lines.join('\n'));
  return { markdown, charts: [chart] };
}
