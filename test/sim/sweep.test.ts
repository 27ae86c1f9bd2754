import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import { registerSimCommand } from '../../src/cli/sim-command.js';
import { initHashing } from '../../src/request/hashing.js';
import { goodputLines, ttftPoints } from '../../src/sim/sweep-report.js';
import { DEFAULT_LOADS, goodputs, runSweep, searchGoodput, type Goodput, type SweepReport, type SweepRow } from '../../src/sim/sweep.js';
import { syntheticWorkload } from '../../src/sim/workloads/synthetic.js';

before(() => initHashing());

async function sim(args: string[]): Promise<string> {
  const chunks: string[] = [];
  const program = new Command('kvgate').exitOverride().configureOutput({ writeErr: () => {} });
  registerSimCommand(program, { write: (s) => chunks.push(s) });
  await program.parseAsync(['sim', ...args], { from: 'user' });
  return chunks.join('');
}

/** An agent-session trace folder: 3 sessions of 4 turns sharing a long instruction prefix. */
function traceDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-sweep-trace-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, 'agent'));
  const instructions = 'You are a careful agent. '.repeat(80); // ~2 KB, 31 blocks of 64 bytes
  for (let s = 0; s < 3; s++) {
    let prompt = instructions;
    const lines: string[] = [];
    for (let t = 0; t < 4; t++) {
      prompt += `session ${s} tool result ${t}: ${'output line. '.repeat(40)}`;
      lines.push(JSON.stringify({ timestamp: (s * 3 + t * 2) * 1e6, input: prompt, output: 'ok '.repeat(20), session_id: `s${s}` }));
    }
    writeFileSync(join(dir, 'agent', `s${s}.jsonl`), lines.join('\n') + '\n');
  }
  return dir;
}

describe('kvgate sim --sweep', () => {
  test('every policy at every load, offered rate proportional to load, TTFT growing with it', async () => {
    const base = syntheticWorkload('chat', { requests: 150, seed: 2 });
    const r = await runSweep(base, {
      policies: ['kvgate', 'round-robin', 'llm-d', 'pooled-bound'],
      fleet: { workers: 2 },
      loads: [0.2, 1.2],
      requests: 150,
      copySessions: false,
    });
    assert.deepEqual(
      r.rows.map((x) => `${x.load}:${x.policy}`),
      ['0.2:kvgate', '0.2:round-robin', '0.2:llm-d', '1.2:kvgate', '1.2:round-robin', '1.2:llm-d'],
    );
    const at = (l: number, p: string) => r.rows.find((x) => x.load === l && x.policy === p)!;
    assert.ok(Math.abs(at(1.2, 'kvgate').offered_rps / at(0.2, 'kvgate').offered_rps - 6) < 1e-9);
    assert.ok(Math.abs(at(1.0 * 1.2, 'kvgate').offered_rps - 1.2 * r.capacity.capacityRps) < 1e-9);
    assert.ok(at(1.2, 'round-robin').ttft_p99_s! > at(0.2, 'round-robin').ttft_p99_s!);
    assert.equal(r.goodput.length, 3);
  });

  test('goodput: the highest load up to which every load met the SLO; a shed-heavy load fails it', () => {
    const row = (policy: string, load: number, meets: boolean) => ({ policy, load, meets_slo: meets }) as SweepRow;
    const rows = [row('a', 0.2, true), row('a', 0.4, true), row('a', 0.6, false), row('a', 0.8, true), row('b', 0.2, false), row('b', 0.4, true)];
    assert.deepEqual(goodputs(rows, ['a', 'b'], 10), [
      { policy: 'a', load: 0.4, rps: 4, missedAt: 0.6, probes: [] },
      { policy: 'b', load: 0, rps: 0, missedAt: 0.2, probes: [] },
    ]);
  });

  /** A policy that meets the SLO below `limit` (p99 = load / limit seconds against a 1 s SLO), and the loads it was run at. */
  function policyUpTo(limit: number): { run: (load: number) => Promise<SweepRow>; ran: number[] } {
    const ran: number[] = [];
    const run = (load: number) => {
      ran.push(load);
      return Promise.resolve({ policy: 'p', load, ttft_p99_offered_s: load / limit, meets_slo: load / limit <= 1 } as SweepRow);
    };
    return { run, ran };
  }
  const fromGrid = (load: number, missedAt: number | null): Goodput => ({ policy: 'p', load, rps: 0, missedAt, probes: [] });

  test('goodput search: between the grid load met and the first missed, halved until the gap is the resolution', async () => {
    const { run, ran } = policyUpTo(1.37);
    const g = fromGrid(1.2, 1.4);
    await searchGoodput(g, 0.05, 4, run);
    // 1.3 met, 1.35 met: [1.35, 1.4) brackets 1.37, 0.05 wide. The grid alone said 1.2.
    assert.deepEqual(ran, [1.3, 1.35]);
    assert.equal(g.load, 1.35);
    assert.equal(g.missedAt, 1.4);
    assert.deepEqual(g.probes.map((p) => p.meetsSlo), [true, true]);
    assert.ok(Math.abs(g.probes[0]!.ttftP99OfferedS! - 1.3 / 1.37) < 1e-12, "Math.abs(g.probes[0]!.ttftP99OfferedS! - 1.3 / 1.37) < 1e-12");
  });

  test('goodput search: a policy within the SLO at the grid\'s top load is run higher until it misses, then bisected', async () => {
    const { run, ran } = policyUpTo(2.3);
    const g = fromGrid(1.6, null);
    await searchGoodput(g, 0.05, 4, run);
    // Up: 2.0 met, 2.5 missed; then 2.25 met, 2.375 missed, 2.313 missed, 2.282 met: [2.282, 2.313).
    assert.deepEqual(ran, [2, 2.5, 2.25, 2.375, 2.313, 2.282]);
    assert.equal(g.load, 2.282);
    assert.equal(g.missedAt, 2.313);
    assert.ok(g.missedAt - g.load <= 0.05 + 1e-9, "g.missedAt - g.load <= 0.05 + 1e-9");
  });

  test('goodput search: stops at the highest load searched, still a lower bound (no load missed)', async () => {
    const { run, ran } = policyUpTo(100);
    const g = fromGrid(1.6, null);
    await searchGoodput(g, 0.05, 3, run);
    assert.deepEqual(ran, [2, 2.5, 3]);
    assert.equal(g.load, 3);
    assert.equal(g.missedAt, null);
  });

  test('goodput search: resolution 0 runs nothing; a policy that missed at the lightest load swept keeps 0, unsearched', async () => {
    const none = policyUpTo(1.37);
    const g = fromGrid(1.2, 1.4);
    await searchGoodput(g, 0, 4, none.run);
    assert.deepEqual(none.ran, []);
    assert.equal(g.load, 1.2);
    const low = policyUpTo(0.12);
    const z = fromGrid(0, 0.2);
    await searchGoodput(z, 0.05, 4, low.run);
    assert.deepEqual(low.ran, []);
    assert.equal(z.load, 0);
    assert.equal(z.missedAt, 0.2);
  });

  test('printed goodput: a policy that never missed is a lower bound, and so is the ratio it makes', () => {
    const report = (kvgate: [number, number | null], best: [number, number | null]) =>
      ({
        goodput: [
          { policy: 'kvgate', load: kvgate[0], rps: 0, missedAt: kvgate[1], probes: [] },
          { policy: 'dynamo-cost', load: best[0], rps: 0, missedAt: best[1], probes: [] },
        ],
      }) as unknown as SweepReport;
    assert.match(goodputLines(report([2.2, 2.25], [1.65, 1.7]))[0]!, /^kvgate +2\.20 of capacity, .*; missed it at 2\.250 \(1\.33x the best baseline\)$/);
    assert.match(goodputLines(report([4, null], [1.65, 1.7]))[0]!, /≥4\.00 of capacity, .*met the SLO at every load run \(≥2\.42x the best baseline\)$/);
    assert.match(goodputLines(report([2.2, 2.25], [4, null]))[0]!, /\(≤0\.55x the best baseline\)$/);
    assert.match(goodputLines(report([4, null], [4, null]))[0]!, /met the SLO at every load run \(so did the best baseline\)$/);
  });

  test('the TTFT chart carries p99 at the goodput search\'s loads too, past the grid, and none where over 1% was shed', () => {
    const row = { policy: 'kvgate', load: 1.6, ttft_p50_s: 0.1, ttft_p99_offered_s: 0.4 } as SweepRow;
    const probes = [
      { load: 2, ttftP99OfferedS: 1.03, meetsSlo: true },
      { load: 2.5, ttftP99OfferedS: null, meetsSlo: false },
    ];
    const points = ttftPoints({ rows: [row], goodput: [{ policy: 'kvgate', load: 2, rps: 0, missedAt: 2.5, probes }] });
    assert.deepEqual(
      points.map((p) => `${p.quantile}@${p.load}=${p.ttft_s}`),
      ['p50@1.6=0.1', 'p99@1.6=0.4', 'p99@2=1.03'],
    );
  });

  test('runSweep searches each policy alone: its goodput lies between a load it met and one it missed, and the runs it made are the grid\'s', async () => {
    const base = syntheticWorkload('agent', { requests: 150, seed: 3 });
    const cfg = { policies: ['kvgate', 'round-robin'], fleet: { workers: 2 }, loads: [0.4, 1.6], requests: 150, copySessions: false };
    const r = await runSweep(base, { ...cfg, sloTtftS: 1 });
    for (const g of r.goodput) {
      const grid = goodputs(r.rows, [g.policy], r.capacity.capacityRps)[0]!;
      assert.ok(g.load >= grid.load, `${g.policy}: ${g.load} below the grid's ${grid.load}`);
      assert.ok(g.probes.length > 0, `${g.policy}: searched nothing`);
      if (g.missedAt !== null) assert.ok(g.missedAt - g.load <= 0.05 + 1e-9 && g.missedAt > g.load, "g.missedAt - g.load <= 0.05 + 1e-9 && g.missedAt > g.load");
      assert.ok(Math.abs(g.rps - g.load * r.capacity.capacityRps) < 1e-9, "Math.abs(g.rps - g.load * r.capacity.capacityRps) < 1e-9");
    }
    // A probe at a grid load gives the grid's row: one policy's run does not depend on the others'.
    const probe = r.goodput.find((g) => g.policy === 'round-robin')!.probes[0]!;
    const alone = await runSweep(base, { ...cfg, policies: ['round-robin'], loads: [probe.load], sloTtftS: 1, goodputResolution: 0 });
    assert.equal(alone.rows[0]!.ttft_p99_offered_s, probe.ttftP99OfferedS);
  });

  test('shed requests count as misses: the article policy, refusing at 10 in flight, misses an SLO it meets on what it serves', async () => {
    const base = syntheticWorkload('agent', { requests: 200, seed: 1 });
    const r = await runSweep(base, { policies: ['article'], fleet: { workers: 1 }, loads: [1.2], requests: 200, copySessions: false });
    const row = r.rows[0]!;
    assert.ok(row.shed > 2, `shed ${row.shed}`);
    assert.equal(row.ttft_p99_offered_s, null);
    assert.equal(row.meets_slo, false);
  });

  test('`kvgate sim --trace DIR --sweep --json` runs with the default loads and policies; rows gain load and goodput', async () => {
    const dir = traceDir();
    const rows = JSON.parse(await sim(['--trace', dir, '--sweep', '--json', '--requests', '40', '--workers', '2'])) as Array<Record<string, unknown>>;
    const loads = [...new Set(rows.map((x) => x['load']))];
    assert.deepEqual(loads, [...DEFAULT_LOADS]);
    assert.ok(rows.every((x) => typeof x['goodput_load'] === 'number' && typeof x['ttft_p99_s'] === 'number' && Array.isArray(x['goodput_probes']) && 'goodput_missed_at' in x), "rows.every((x) => typeof x['goodput_load'] === 'number' && typeof x['ttft_p99_s'] === 'number' && Array.isArray(x['goodput_probes']) && 'goodput_missed_at' in x)");
    assert.ok(!rows.some((x) => x['policy'] === 'pooled-bound'), "!rows.some((x) => x['policy'] === 'pooled-bound')");
    assert.ok(rows.some((x) => x['policy'] === 'llm-d-session'), "rows.some((x) => x['policy'] === 'llm-d-session')");
    // Three sessions cannot make load 1.2: copies of them do.
    assert.ok((rows.find((x) => x['load'] === 1.2)!['copies'] as number) > 1, "(rows.find((x) => x['load'] === 1.2)!['copies'] as number) > 1");
  });

  test('--report draws TTFT against load per policy', async () => {
    const out = mkdtempSync(join(tmpdir(), 'kvgate-sweep-report-'));
    after(() => rmSync(out, { recursive: true, force: true }));
    const text = await sim(['--workload', 'rag', '--sweep', '--loads', '0.3,0.9', '--requests', '60', '--workers', '2', '--policies', 'kvgate,round-robin', '--report', out]);
    assert.match(text, /goodput at p99 TTFT ≤ 2 s/);
    assert.ok(existsSync(join(out, 'ttft-vs-load.svg')));
    assert.match(readFileSync(join(out, 'ttft-vs-load.svg'), 'utf8'), /^<svg/);
    assert.match(readFileSync(join(out, 'report.md'), 'utf8'), /## Goodput at p99 TTFT ≤ 2 s/);
  });
});
