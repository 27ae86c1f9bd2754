/**
 * `kvgate fake-worker` as tests and scripts run it: a separate process on a free port that says
 * where it listens in one JSON line, takes its test hooks as flags, and exits 0 on SIGTERM.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { Command } from 'commander';
import { registerFakeWorkerCommand } from '../../src/cli/fake-worker-command.js';
import { scrape, value } from './prometheus.js';
import { KVGATE } from '../helpers/kvgate-cli.js';


describe('kvgate fake-worker', () => {
  test('prints its port when ready, serves with the hooks its flags set, exits 0 on SIGTERM', async () => {
    const proc = spawn(process.execPath, [...KVGATE, 'fake-worker', '--port', '0', '--id', 'cli-w', '--dcgm', '--kv-usage', '0.9', '--gpu-temp', '90', '--decode-ms', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let buf = '';
        const timer = setTimeout(() => reject(new Error(`no readiness line: ${stderr}`)), 15_000);
        proc.stdout.on('data', (d: Buffer) => {
          buf += d.toString();
          const nl = buf.indexOf('\n');
          if (nl >= 0) {
            clearTimeout(timer);
            resolve(buf.slice(0, nl));
          }
        });
        proc.once('exit', (code) => reject(new Error(`exited with ${code}: ${stderr}`)));
      });
      const ready = JSON.parse(line) as { msg: string; port: number; url: string; id: string };
      assert.equal(ready.msg, 'fake-worker listening');
      assert.ok(Number.isInteger(ready.port) && ready.port > 0, "Number.isInteger(ready.port) && ready.port > 0");
      assert.equal(ready.id, 'cli-w');
      const url = `http://127.0.0.1:${ready.port}`;
      const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-fake-worker-id'), 'cli-w');
      const f = await scrape(url);
      assert.equal(value(f, 'vllm:kv_cache_usage_perc'), 0.9);
      assert.equal(value(f, 'DCGM_FI_DEV_GPU_TEMP'), 90);
      proc.kill('SIGTERM');
      assert.equal(await exited, 0);
    } finally {
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
  });

  test('bad flags are refused with a message, before anything starts', async () => {
    for (const [args, message] of [
      [['--metrics', 'sometimes'], /--metrics.*sometimes/s],
      [['--port', '70000'], /port number/],
      [['--kv-usage', 'high'], /must be a number/],
      [['--max-batch', '0'], /positive integer/],
    ] as Array<[string[], RegExp]>) {
      let err = '';
      const program = new Command('kvgate').exitOverride().configureOutput({ writeErr: (s) => (err += s), writeOut: () => {} });
      registerFakeWorkerCommand(program, { write: () => assert.fail('nothing may start') });
      await assert.rejects(program.parseAsync(['node', 'kvgate', 'fake-worker', ...args]), { name: 'CommanderError' });
      assert.match(err, message);
    }
  });
});
