import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import { registerSimCommand } from '../../src/cli/sim-command.js';
import { initHashing } from '../../src/request/hashing.js';
import { DEFAULT_LOADS, goodputs, runSweep, type SweepRow } from '../../src/sim/sweep.js';
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
      { policy: 'a', load: 0.4, rps: 4 },
      { policy: 'b', load: 0, rps: 0 },
    ]);
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
    assert.ok(rows.every((x) => typeof x['goodput_load'] === 'number' && typeof x['ttft_p99_s'] === 'number'));
    assert.ok(!rows.some((x) => x['policy'] === 'pooled-bound'));
    assert.ok(rows.some((x) => x['policy'] === 'llm-d-session'));
    // Three sessions cannot make load 1.2: copies of them do.
    assert.ok((rows.find((x) => x['load'] === 1.2)!['copies'] as number) > 1);
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
