#!/usr/bin/env node
/**
 * How long `kvgate serve` takes from process start to serving, as an operator starts it
 * (`node bin/kvgate.js serve`, the compiled build, the example config, the memory store).
 *
 *   npm run startup [-- --runs 9]
 *
 * Starts the gate `--runs` times, one after another, and reports for each run the time from
 * spawn to its "kvgate serving" log line and that line's `startup_ms` (the process's own clock, which
 * leaves out the parent's spawn cost), then the median of each. A measurement, not a test: a loaded
 * machine is slower, so compare runs on the same machine.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const runsAt = process.argv.indexOf('--runs');
const runs = runsAt > 0 ? Number(process.argv[runsAt + 1]) : 7;
if (!Number.isInteger(runs) || runs < 1) {
  process.stderr.write('--runs must be a positive integer\n');
  process.exit(2);
}

function once() {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(
      process.execPath,
      [path.join(root, 'bin/kvgate.js'), 'serve', '--config', path.join(root, 'envoy/kvgate.yaml'), '--grpc-port', '0', '--admin-port', '0'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      const line = buf.split('\n').find((l) => l.includes('"kvgate serving"'));
      if (!line) return;
      const wall = performance.now() - t0;
      const own = JSON.parse(line).startup_ms;
      child.kill('SIGKILL');
      resolve({ wall, own });
    });
    child.once('exit', (code) => reject(new Error(`kvgate exited with ${code} before serving`)));
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = [];
for (let i = 0; i < runs; i++) {
  const r = await once();
  results.push(r);
  process.stdout.write(`run ${i + 1}: serving ${Math.round(r.wall)} ms after spawn (${r.own === undefined ? '?' : Math.round(r.own)} ms by the process's own clock)\n`);
}
process.stdout.write(
  `median of ${runs}: ${Math.round(median(results.map((r) => r.wall)))} ms after spawn, ` +
    `${Math.round(median(results.map((r) => r.own ?? NaN)))} ms by the process's own clock (node ${process.version})\n`,
);
