/**
 * `kvgate demo`, run briefly: fake workers, the real gate and Envoy-like ext_proc exchanges in one
 * process. The report must show sessions staying on their workers and prefix-cache hits, and the
 * demo must end by itself (after its turns, or at --duration).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Command } from 'commander';
import { registerDemoCommand } from '../../src/cli/demo-command.js';
import { runDemo, type DemoSummary } from '../../src/demo/run.js';
import { startTestGate } from '../helpers/gate.js';

/**
 * A busy test machine can take longer than Envoy's 500 ms to answer a first decision, and the demo
 * would then rightly route by the fallback route; the tests are about placement, so they wait longer.
 */
const PATIENT = ['--message-timeout-ms', '10000'];

async function demo(args: string[], isTTY = false): Promise<string> {
  let out = '';
  const program = new Command('kvgate').exitOverride();
  registerDemoCommand(program, { write: (s) => (out += s), isTTY });
  await program.parseAsync(['node', 'kvgate', 'demo', ...PATIENT, ...args]);
  return out;
}

describe('kvgate demo', () => {
  test('the header counts in words: one session, one turn, one worker', async () => {
    const out = await demo(['--workers', '1', '--sessions', '1', '--turns', '1', '--think-ms', '0']);
    assert.match(out, /^kvgate demo: 1 fake worker, 1 session × 1 turn \(at most \d+ s\), 3 shared system prompts$/m);
  });

  test('plain output (not a terminal): a line per turn, sessions sticking to their workers, a non-zero hit rate', async () => {
    const out = await demo(['--workers', '2', '--sessions', '4', '--turns', '3', '--think-ms', '0']);
    assert.doesNotMatch(out, /\x1b\[/, 'no terminal control codes in plain output');
    assert.match(out, /^kvgate demo: 2 fake workers, 4 sessions × 3 turns/m);
    assert.match(out, /admin http:\/\/127\.0\.0\.1:\d+/);
    const turns = out.split('\n').filter((l) => /^\[\s*[\d.]+s\] s\d+ \(prompt [ABC]\) turn \d → worker_\d (placed|stayed|MOVED)/.test(l));
    assert.equal(turns.length, 12);
    for (const s of ['s01', 's02', 's03', 's04']) {
      const workers = new Set(turns.filter((l) => l.includes(` ${s} `)).map((l) => /→ (worker_\d)/.exec(l)![1]));
      assert.equal(workers.size, 1, `${s} stays on one worker: ${[...workers].join(', ')}`);
    }
    assert.match(out, /^done in [\d.]+ s: 12 requests, 0 shed, 0 failed$/m);
    assert.match(out, /^sticky: 8\/8 follow-up turns stayed on their session's worker \(100\.0%\)$/m);
    const hit = Number(/^KV hit rate: ([\d.]+)%/m.exec(out)?.[1]);
    assert.ok(hit > 30, `prefix-cache hits on follow-up turns and shared system prompts (${hit}%)`);
  });

  test('--json at --duration: ends by itself with a summary of what ran', async () => {
    const out = await demo(['--workers', '2', '--sessions', '2', '--turns', '1000', '--duration', '1.5', '--think-ms', '0', '--json']);
    const sum = JSON.parse(out) as DemoSummary;
    assert.ok(sum.requests >= 2 && sum.requests < 2000, `stopped at the deadline (${sum.requests} requests)`);
    assert.ok(sum.sessions.every((s) => s.turns < 1000), "sum.sessions.every((s) => s.turns < 1000)");
    assert.equal(sum.errors, 0);
    assert.equal(sum.stayed, sum.follow_ups);
    assert.equal(sum.workers.length, 2);
    assert.ok(sum.elapsed_s < 1.5 + 5, 'turns running at the deadline finish within the grace period');
  });

  test('on a terminal: a frame redrawn in place, then the summary', async () => {
    const out = await demo(['--workers', '2', '--sessions', '2', '--turns', '2', '--think-ms', '0'], true);
    assert.match(out, /\x1b\[\d+F\x1b\[0J/, 'moves back up and clears to redraw');
    assert.match(out, /WORKER\s+RUN\s+WAIT\s+KV USE/);
    assert.match(out, /^s01\s+A\s+2\/2\s+\d \d$/m);
    assert.match(out, /^sticky: 2\/2/m);
  });

  test('its gate scrapes the fake workers, and sessions spread over all three workers', async () => {
    // It used to leave one of three workers idle in every run: two system prompts for three
    // workers, and a gate without the workers' metrics, whose own in-flight counts end at each
    // request's first token, so the fair-share term never saw the decoding conversations and
    // every session followed its prompt to one of two workers.
    let seen: Promise<Array<{ signals?: { running?: number } }>> | undefined;
    const sum = await runDemo({
      workers: 3,
      sessions: 8,
      turns: 3,
      durationS: 60,
      thinkMs: 300,
      messageTimeoutMs: 10_000,
      onEvent: (_e, state) => {
        seen ??= fetch(`${state.adminUrl}/workers`)
          .then((r) => r.json() as Promise<{ workers: Array<{ signals?: { running?: number } }> }>)
          .then((b) => b.workers);
      },
    });
    const workers = await seen!;
    assert.ok(workers.every((w) => typeof w.signals?.running === 'number'), `the gate reads every worker's metrics: ${JSON.stringify(workers)}`);
    assert.equal(sum.errors, 0);
    for (const w of sum.workers) assert.ok(w.requests > 0, `${w.id} got requests: ${JSON.stringify(sum.workers)}`);
    assert.equal(sum.stayed, sum.follow_ups, 'spreading is done when placing sessions, never by moving them');
  });

  test('--target drives a running gate, with a fake worker for each of its clusters', async () => {
    const gate = await startTestGate({ workers: [{ id: 'gpu_a', cluster: 'gpu_a' }, { id: 'gpu_b', cluster: 'gpu_b' }] });
    try {
      const out = await demo(['--target', gate.target, '--admin', gate.admin, '--sessions', '2', '--turns', '2', '--think-ms', '0', '--json']);
      const sum = JSON.parse(out) as DemoSummary;
      assert.deepEqual(sum.workers.map((w) => w.id).sort(), ['gpu_a', 'gpu_b']);
      assert.equal(sum.requests, 4);
      assert.equal(sum.errors, 0);
      assert.equal(sum.unrouted, 0);
      // The running gate made the decisions (the warm-up request is one more).
      assert.ok(gate.results.length >= 4, `${gate.results.length} decisions on the running gate`);
      // snake_case like every JSON kvgate prints
      assert.ok(!/"[a-z]+[A-Z]\w*":/.test(out), out.slice(0, 200));
    } finally {
      await gate.close(100);
    }
  });

  test('--target at an address where no gate runs: a clear error', async () => {
    const gate = await startTestGate({ workers: [{ id: 'w', cluster: 'w' }] });
    const dead = gate.target;
    const admin = gate.admin;
    await gate.close(100);
    await assert.rejects(demo(['--target', dead, '--upstream', 'w=http://127.0.0.1:1', '--sessions', '1', '--turns', '1']), /no gate answers ext_proc at 127\.0\.0\.1:\d+: is it running/);
    await assert.rejects(demo(['--target', dead, '--admin', admin, '--sessions', '1', '--turns', '1']), /cannot read the gate's workers from its admin API/);
  });

  test('bad flags are refused before anything starts', async () => {
    for (const args of [['--workers', '0'], ['--sessions', 'many'], ['--duration', '-1'], ['--think-ms', 'x'], ['--message-timeout-ms', '0'], ['--target', 'nohost'], ['--upstream', 'w1'], ['--log-level', 'verbose']]) {
      const program = new Command('kvgate').exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
      registerDemoCommand(program, { write: () => assert.fail('nothing may run') });
      await assert.rejects(program.parseAsync(['node', 'kvgate', 'demo', ...args]), { name: 'CommanderError' });
    }
  });
});
