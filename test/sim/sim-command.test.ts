import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, describe, test } from 'node:test';
import { Command } from 'commander';
import { registerSimCommand } from '../../src/cli/sim-command.js';
import { simGateConfig } from '../../src/sim/policies/kvgate.js';

/** Runs `kvgate sim …` in-process and returns what it wrote to stdout. */
async function sim(args: string[]): Promise<string> {
  return (await simStreams(args)).stdout;
}

/** Runs `kvgate sim …` in-process with its progress going to a stream that is not a terminal (a pipe, CI); returns both. */
async function simStreams(args: string[]): Promise<{ stdout: string; progress: string }> {
  const chunks: string[] = [];
  const progress: string[] = [];
  const progressOut = new Writable({
    write(chunk: Buffer, _enc, done) {
      progress.push(chunk.toString());
      done();
    },
  });
  const program = new Command('kvgate').exitOverride().configureOutput({ writeErr: () => {} });
  registerSimCommand(program, { write: (s) => chunks.push(s) }, progressOut);
  await program.parseAsync(['sim', ...args], { from: 'user' });
  return { stdout: chunks.join(''), progress: progress.join('') };
}

describe('kvgate sim', () => {
  test('--json prints exactly one JSON array, one object per policy, with the required fields', async () => {
    const out = await sim(['--workload', 'chat', '--requests', '120', '--workers', '4', '--json']);
    const rows = JSON.parse(out) as Array<Record<string, unknown>>;
    assert.deepEqual(
      rows.map((r) => r['policy']),
      ['kvgate', 'round-robin', 'least-loaded', 'consistent-hash', 'article', 'sglang-cache-aware', 'dynamo-cost', 'llm-d', 'llm-d-session', 'pooled-bound'],
    );
    for (const r of rows) {
      for (const k of ['policy', 'hit_rate', 'ttft_p50_s', 'ttft_p99_s', 'throughput_tok_s', 'imbalance', 'migrations', 'shed']) {
        assert.ok(k in r, `${String(r['policy'])} lacks ${k}`);
      }
      assert.ok((r['hit_rate'] as number) >= 0 && (r['hit_rate'] as number) <= 1, "(r['hit_rate'] as number) >= 0 && (r['hit_rate'] as number) <= 1");
    }
    assert.equal(typeof rows[0]!['ttft_p99_s'], 'number');
  });

  test('--classes: each class of the mix with its shed rate; under overload the lowest class is shed most', async () => {
    const rows = JSON.parse(await sim(['--classes', '--requests', '3000', '--rate-scale', '10', '--workers', '4', '--max-inflight', '8', '--json'])) as Array<{ class: string; requests: number; shedRate: number }>;
    assert.deepEqual(rows.map((r) => r.class), ['critical', 'standard', 'sheddable']);
    assert.equal(rows.reduce((n, r) => n + r.requests, 0), 3000);
    const rate = (c: string) => rows.find((r) => r.class === c)!.shedRate;
    assert.ok(rate('standard') > 0.1, `the fleet is overloaded: standard shed ${rate('standard')}`);
    assert.ok(rate('sheddable') > rate('standard') && rate('standard') > rate('critical'), `shed rates ${rows.map((r) => `${r.class} ${r.shedRate}`).join(', ')}`);
    assert.match(await sim(['--classes', '--requests', '200', '--workers', '4']), /critical/);
  });

  test('--adapters: kvgate with adapter affinity loads fewer adapters than with it off, every request routed', async () => {
    const rows = JSON.parse(await sim(['--adapters', '8', '--max-loras', '2', '--requests', '600', '--seed', '3', '--json'])) as Array<{ policy: string; routed: number; requests: number; loadsPerRequest: number }>;
    assert.deepEqual(rows.map((r) => r.policy), ['kvgate', 'kvgate (adapter affinity off)', 'round-robin', 'least-loaded']);
    for (const r of rows) assert.equal(r.routed, r.requests, `${r.policy} routed everything`);
    assert.ok(rows[0]!.loadsPerRequest < rows[1]!.loadsPerRequest, `on ${rows[0]!.loadsPerRequest} vs off ${rows[1]!.loadsPerRequest}`);
    await assert.rejects(sim(['--adapters', '4', '--sweep']), /cannot be used with option '--sweep'/);
    // Options these modes do not use are refused, not silently dropped.
    await assert.rejects(sim(['--adapters', '4', '--report', 'out']), /cannot be used with option '--report/);
    await assert.rejects(sim(['--classes', '--gate-config', 'x.yaml']), /cannot be used with option '--gate-config/);
    await assert.rejects(sim(['--adapters', '4', '--policies', 'kvgate']), /cannot be used with option '--policies/);
  });

  test('--sweep reports progress as the non-sweep path does: a line per run when piped, nothing with --json', async () => {
    const args = ['--sweep', '--workload', 'chat', '--requests', '60', '--workers', '4', '--loads', '0.5,1', '--policies', 'kvgate,round-robin,pooled-bound', '--goodput-resolution', '0'];
    const piped = await simStreams(args);
    // One line per policy at each load, in the order they run; the pooled bound is not simulated.
    const lines = piped.progress.split('\n').filter(Boolean);
    assert.deepEqual(
      lines.map((l) => l.replace(/ · .*/, '')),
      ['sim --sweep [1/4] load 0.5: kvgate, 60 requests', 'sim --sweep [2/4] load 0.5: round-robin, 60 requests', 'sim --sweep [3/4] load 1: kvgate, 60 requests', 'sim --sweep [4/4] load 1: round-robin, 60 requests'],
      piped.progress,
    );
    assert.doesNotMatch(piped.stdout, /sim --sweep \[/, 'progress stays off stdout');
    const json = await simStreams([...args, '--json']);
    assert.equal(json.progress, '', 'no progress with --json');
    assert.match(json.stdout, /^\[.*\]\n$/s, 'stdout is the JSON array and nothing else');
    const rows = JSON.parse(json.stdout) as Array<{ policy: string; load: number }>;
    assert.deepEqual(rows.map((r) => `${r.load} ${r.policy}`), ['0.5 kvgate', '0.5 round-robin', '1 kvgate', '1 round-robin']);
  });

  test('--sweep: each run of the goodput search gets a line of its own, after the grid\'s counted runs', async () => {
    const piped = await simStreams(['--sweep', '--workload', 'chat', '--requests', '60', '--workers', '4', '--loads', '0.5', '--policies', 'kvgate', '--goodput-max-load', '0.7']);
    const lines = piped.progress.split('\n').filter(Boolean);
    assert.equal(lines[0]!.replace(/ · .*/, ''), 'sim --sweep [1/1] load 0.5: kvgate, 60 requests', piped.progress);
    assert.ok(lines.length > 1 && lines.slice(1).every((l) => /^sim --sweep goodput search: load 0\.\d+: kvgate, 60 requests$/.test(l)), piped.progress);
  });

  test('without --sweep, piped: a line as each policy starts; nothing with --json', async () => {
    const args = ['--workload', 'chat', '--requests', '60', '--workers', '4', '--policies', 'kvgate,round-robin'];
    const piped = await simStreams(args);
    assert.deepEqual(piped.progress.split('\n').filter(Boolean).map((l) => l.replace(/ · .*/, '')), ['sim [1/2] kvgate: 60 requests', 'sim [2/2] round-robin: 60 requests']);
    const json = await simStreams([...args, '--json']);
    assert.equal(json.progress, '');
    assert.equal(JSON.parse(json.stdout).length, 2);
  });

  test('--report onto an existing file fails before the run', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-sim-report-'));
    try {
      const file = join(dir, 'report.md');
      writeFileSync(file, 'x');
      const started = performance.now();
      await assert.rejects(sim(['--workload', 'rag', '--requests', '2000', '--report', file]), /report\.md is a file: name a directory/);
      assert.ok(performance.now() - started < 5000, 'refused at once, not after simulating');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('--trace naming nothing fails at once, saying what to pass', async () => {
    await assert.rejects(sim(['--trace', '/agent-sessions/miniswe']), /--trace \/agent-sessions\/miniswe: no such file or folder \(is a variable in the path unset\?\); pass a Mooncake trace/);
  });

  test('--policies chooses; the table and --report DIR write a markdown report with SVG charts', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-sim-report-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const out = await sim(['--workload', 'rag', '--requests', '80', '--policies', 'kvgate,round-robin,pooled-bound', '--report', dir]);
    assert.match(out, /kvgate/);
    assert.match(out, /round-robin/);
    assert.doesNotMatch(out, /dynamo-cost/);
    const md = readFileSync(join(dir, 'report.md'), 'utf8');
    for (const f of ['hit-rate.svg', 'ttft.svg', 'load-over-time.svg']) {
      assert.ok(md.includes(`](${f})`), `report links ${f}`);
      assert.ok(existsSync(join(dir, f)));
      assert.match(readFileSync(join(dir, f), 'utf8'), /^<svg/);
    }
    // Each bar carries its value, to a tenth of a percent, as the table has it.
    const bars = readFileSync(join(dir, 'hit-rate.svg'), 'utf8');
    const table = [...out.matchAll(/(\d+\.\d)%/g)].map((m) => `${m[1]}%`);
    const labels = [...bars.matchAll(/>(\d+\.\d%)</g)].map((m) => m[1]!);
    assert.equal(labels.length, 3, 'a label per policy');
    for (const l of labels) assert.ok(table.includes(l), `${l} is a hit rate of the table (${table.join(' ')})`);
    assert.match(readFileSync(join(dir, 'ttft.svg'), 'utf8'), />p50 [\d.]+ s · p99 [\d.]+ s</);
    assert.match(readFileSync(join(dir, 'load-over-time.svg'), 'utf8'), /busiest worker/);
  });

  test('--gate-config runs the simulated gate with a kvgate config; a typo in it is refused before any run', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-sim-gate-config-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'gate.yaml');
    const run = async (): Promise<unknown> => JSON.parse(await sim(['--workload', 'chat', '--requests', '60', '--workers', '2', '--policies', 'kvgate', '--gate-config', file, '--json']));
    writeFileSync(file, 'scoring:\n  balance_weight: 2\n');
    assert.equal((await run() as unknown[]).length, 1);
    // Read as kvgate serve reads a config: YAML merge keys too.
    writeFileSync(file, 'scoring: {<<: {balance_weight: 2}}\n');
    assert.equal((await run() as unknown[]).length, 1);
    writeFileSync(file, 'scoring:\n  balanse_weight: 2\n');
    await assert.rejects(run(), /balanse_weight/);
    writeFileSync(file, 'workers: [{id: a, cluster: b}]\n');
    await assert.rejects(run(), /the simulator sets the workers/);
    // What the gate is built with: the user's settings, the simulator's workers and limit.
    const cfg = simGateConfig({ workers: 3, blockTokens: 16, seed: 1, maxInflight: 9, gateConfig: { scoring: { balance_weight: 2 }, limits: { max_inflight: 99 } } });
    assert.equal(cfg.scoring.balance_weight, 2);
    assert.equal(cfg.limits.max_inflight, 9);
    assert.equal(cfg.workers.length, 3);
  });

  test('bad flags are refused', async () => {
    await assert.rejects(sim(['--policies', 'kvgate,nope', '--json']), /unknown policies/);
    await assert.rejects(sim(['--workers', '0', '--json']), /positive integer/);
  });
});
