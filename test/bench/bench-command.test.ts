import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import { Redis } from 'ioredis';
import { registerBenchCommand } from '../../src/cli/bench-command.js';
import { formatReport } from '../../src/bench/report.js';
import type { BenchReport } from '../../src/bench/run.js';
import { findRedisServer, startBenchRedis } from '../../src/bench/redis-server.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

/** Runs `kvgate bench …` in-process and returns what it wrote to stdout. */
async function bench(args: string[]): Promise<string> {
  const chunks: string[] = [];
  const program = new Command('kvgate').exitOverride().configureOutput({ writeErr: () => {} });
  registerBenchCommand(program, { write: (s) => chunks.push(s) }, { write: () => {} });
  await program.parseAsync(['bench', ...args], { from: 'user' });
  return chunks.join('');
}

/**
 * As short as a run can be and still route requests; the numbers mean nothing, the shape does.
 * On a loaded machine a 0.3 s window once saw no request complete (the no-op at half load): each
 * window stays open until 20 have (at most 10 s more), so every run's assertions weigh requests.
 */
const TINY = ['--sizes', '2k', '--duration', '0.3', '--warmup', '0.1', '--rounds', '1', '--concurrency', '8', '--workers', '4', '--min-completed', '20'];

describe('kvgate bench', () => {
  let redis: TestRedis;
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    await redis.stop();
  });

  test('--json: the no-op ceiling and kvgate on memory and Redis, at saturation and half of it, all decided without errors', async () => {
    const report = JSON.parse(await bench([...TINY, '--redis', redis.url, '--json'])) as BenchReport;
    assert.equal(report.tool, 'kvgate bench');
    assert.ok(report.machine.cpus > 0 && report.machine.node.startsWith('v'), "report.machine.cpus > 0 && report.machine.node.startsWith('v')");
    assert.deepEqual(report.skipped, []);
    assert.deepEqual(
      report.runs.map((r) => `${r.target}/${r.size}/${r.load}`),
      ['noop/2k/saturation', 'memory/2k/saturation', 'redis/2k/saturation', 'noop/2k/half', 'memory/2k/half', 'redis/2k/half'],
    );
    for (const r of report.runs) {
      const what = `${r.target} ${r.load}`;
      assert.ok(r.completed > 0, `${what}: requests completed`);
      assert.equal(r.errors, 0, `${what}: ${r.error_samples.join('; ')}`);
      assert.equal(r.shed, 0, `${what}: nothing shed`);
      // Half load never offers more streams than the fleet holds (4 workers at 16 each): a stall
      // then drops arrivals at the client instead of shedding them at the gate.
      if (r.load === 'half') assert.equal(r.concurrency, 64, `${what}: at most 4 × 16 outstanding`);
      assert.equal(r.routed, r.completed, `${what}: every answer carried the routing decision`);
      assert.ok(r.body_bytes > 1900 && r.body_bytes < 2300, `${what}: ~2 KB bodies (${r.body_bytes})`);
      assert.ok(r.decisions_per_s > 0 && r.added.samples > 0 && r.decision.samples > 0, "r.decisions_per_s > 0 && r.added.samples > 0 && r.decision.samples > 0");
      assert.ok(r.added.p50_ms! <= r.added.p99_ms! && r.added.p99_ms! <= r.added.max_ms!, "r.added.p50_ms! <= r.added.p99_ms! && r.added.p99_ms! <= r.added.max_ms!");
      assert.ok(r.rss_peak_mb > 0, "r.rss_peak_mb > 0");
      if (r.target === 'noop') {
        assert.equal(r.gate, null);
        assert.equal(r.ratio_to_noop, null);
      } else {
        assert.ok(r.gate, `${what}: gate outcomes counted`);
        const decided = Object.entries(r.gate.outcomes).filter(([k]) => !k.startsWith('rejected_')).reduce((n, [, v]) => n + v, 0);
        assert.ok(decided >= r.completed, `${what}: the gate decided every completed request (${decided} ≥ ${r.completed})`);
        assert.equal(typeof r.ratio_to_noop, 'number');
      }
    }
    // Each store has its three targets, measured or said not to be.
    for (const store of ['memory', 'redis']) {
      const t = report.targets.filter((x) => x.store === store);
      assert.equal(t.length, 3, `${store}: ratio, 32 KB p99 and 400 KB p50 targets`);
      assert.equal(t.find((x) => x.unit === 'ratio')!.met !== null, true);
      assert.ok(t.filter((x) => x.unit === 'ms').every((x) => x.met === null), 'sizes not run are reported as not measured');
    }
    // The table for people names every server and the targets.
    const table = formatReport(report);
    for (const server of ['noop', 'memory', 'redis']) assert.match(table, new RegExp(`^${server}\\s+2k\\s+8 streams`, 'm'));
    assert.match(table, /^targets:$/m);
    // Units in every header; the table fits 120 columns (the rest is in --json).
    assert.match(table, /decisions\/s\s+× no-op\s+busy µs\/req\s+added p50 ms\s+p99 ms\s+p99\.9 ms\s+decide p50 ms$/m);
    for (const line of table.split('\n')) assert.ok(line.length <= 120, `${line.length} columns: ${line}`);
    assert.match(table, /not measured\s+memory\s+32k/);
    // A Redis it was given is left as found: every key the bench gate wrote is gone.
    const client = new Redis(redis.url);
    try {
      assert.deepEqual(await client.keys('*'), []);
    } finally {
      client.disconnect();
    }
  });

  test('--stores memory --no-half runs the ceiling and the memory store at saturation only', async () => {
    const out = await bench([...TINY, '--duration', '0.1', '--warmup', '0', '--stores', 'memory', '--no-half']);
    assert.match(out, /^kvgate bench: /);
    assert.deepEqual(
      out.split('\n').filter((l) => /^(noop|memory|redis)\s/.test(l)).map((l) => l.split(/\s+/).slice(0, 4).join(' ')),
      ['noop 2k 8 streams', 'memory 2k 8 streams'],
    );
  });

  test('--body-modes buffered,full_duplex: the same load in FULL_DUPLEX_STREAMED, each body echoed back whole, ratios to the no-op in the same mode', async () => {
    const report = JSON.parse(await bench([...TINY, '--stores', 'memory', '--no-half', '--body-modes', 'buffered,full_duplex', '--json'])) as BenchReport;
    assert.deepEqual(
      report.runs.map((r) => `${r.target}/${r.body_mode}`),
      ['noop/buffered', 'memory/buffered', 'noop/full_duplex', 'memory/full_duplex'],
    );
    for (const r of report.runs.filter((x) => x.body_mode === 'full_duplex')) {
      const what = `${r.target} full_duplex`;
      assert.ok(r.completed > 0, `${what}: requests completed`);
      // An error is also a body not echoed byte for byte in length, or a reply out of order.
      assert.equal(r.errors, 0, `${what}: ${r.error_samples.join('; ')}`);
      assert.equal(r.routed, r.completed, `${what}: every headers reply carried the routing decision`);
      if (r.target === 'memory') {
        assert.equal(typeof r.ratio_to_noop, 'number');
        assert.ok(r.gate && Object.values(r.gate.outcomes).reduce((n, v) => n + v, 0) >= r.completed, `${what}: the gate decided them`);
      }
    }
    // The ceiling ratio targets stay about BUFFERED (one for memory, not two); full duplex gets
    // its own: its rate against buffered's at the same size.
    assert.equal(report.targets.filter((t) => t.store === 'memory' && t.target.startsWith('decisions/s')).length, 1);
    const duplex = report.targets.filter((t) => t.store === 'memory' && t.target.startsWith('full duplex'));
    assert.equal(duplex.length, 1);
    assert.equal(typeof duplex[0]!.value, 'number');
    assert.match(formatReport(report), /^memory\s+2k\s+8 streams\s+full_duplex/m);
  });

  test('bad flags are refused', async () => {
    await assert.rejects(bench(['--body-modes', 'streamed']), /unknown body modes: streamed/);
    await assert.rejects(bench(['--stores', 'memory,postgres']), /unknown stores: postgres/);
    await assert.rejects(bench(['--sizes', '2k,12']), /too small/);
    await assert.rejects(bench(['--sizes', 'big']), /not a size/);
    await assert.rejects(bench(['--redis', 'http://localhost:6379']), /redis:\/\//);
    await assert.rejects(bench(['--concurrency', '0']), /positive integer/);
    await assert.rejects(bench(['--duration', '0']), /above 0/);
    await assert.rejects(bench(['--min-completed', '-1']), /--min-completed/);
  });

  test('without --redis the bench starts its own redis-server on a free port and stops it', async () => {
    const bin = findRedisServer();
    assert.ok(bin, 'redis-server is on PATH (.ci/run installs it)');
    const r = await startBenchRedis(bin);
    const client = new Redis(r.url);
    try {
      assert.equal(await client.ping(), 'PONG');
    } finally {
      client.disconnect();
    }
    await r.stop();
    const probe = new Redis(r.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    // The refusal is the point; without a listener ioredis also prints it as an unhandled error event.
    probe.on('error', () => undefined);
    await assert.rejects(probe.connect());
    probe.disconnect();
  });
});

describe('kvgate bench progress', () => {
  test('piped: a line per step with the step count and the time left; on a terminal: one line redrawn', async () => {
    const { stepProgress } = await import('../../src/bench/progress.js');
    const { benchPlan } = await import('../../src/bench/run.js');
    const plan = benchPlan({ sizes: [2048, 32768], stores: ['memory', 'redis'], rounds: 3, durationMs: 1000, warmupMs: 500, halfSaturation: true });
    // Per size: 3 servers × (warm-up + 3 rounds + half load).
    assert.equal(plan.steps, 2 * 3 * 5);
    let t = 0;
    let piped = '';
    const p = stepProgress('bench', plan.steps, plan.plannedMs, { write: (s) => (piped += s) }, () => t);
    p.step('2k: warming up noop', 500);
    t = 1000; // the first step took twice its plan: the estimate doubles the rest
    p.step('2k: noop at saturation, round 1/3', 1200);
    p.done();
    const lines = piped.trimEnd().split('\n');
    assert.equal(lines.length, 2);
    assert.match(lines[0]!, /^bench \[ 1\/30\] 2k: warming up noop · 0 s elapsed, ~\d+ s left$/);
    const left = (l: string) => Number(/~(?:(\d+) min )?(\d+) s left/.exec(l)!.slice(1).reduce((a, x, i) => (x === undefined ? a : a + Number(x) * (i === 0 ? 60 : 1)), 0));
    assert.ok(Math.abs(left(lines[1]!) - ((plan.plannedMs - 500) * 2) / 1000) <= 1, lines[1]);
    let tty = '';
    const q = stepProgress('bench', 3, 3000, { write: (s) => (tty += s), isTTY: true }, () => 0);
    q.step('a', 1000);
    q.step('b', 1000);
    q.done();
    assert.doesNotMatch(tty, /\n/, 'redrawn in place');
    assert.match(tty, /\r\x1b\[2Kbench \[2\/3\] b/);
    assert.ok(tty.endsWith('\r\x1b[2K'), 'cleared at the end');
  });
});
