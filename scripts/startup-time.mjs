#!/usr/bin/env node
/**
 * How long `kvgate serve` takes from process start to serving, as an operator starts it
 * (`node bin/kvgate.js serve`, the compiled build, the example config, the memory store), next to
 * two baselines measured in the same run, interleaved:
 *   - node:  a bare `node` process that does nothing (the floor no Node service goes under);
 *   - tsx:   the same `kvgate serve` from the TypeScript sources through tsx (how it ran before it
 *            was compiled: every module transpiled at start).
 *
 *   npm run startup [-- --runs 7]
 *
 * For each: the wall time from spawn to serving, and the CPU time the process had used by then
 * (`startup_cpu_ms` of the "kvgate serving" line; less sensitive to a machine shared with other
 * work). Medians, and the gate's as a ratio to the baselines.
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

const serveArgs = ['serve', '--config', path.join(root, 'envoy/kvgate.yaml'), '--grpc-port', '0', '--admin-port', '0'];
const SUBJECTS = {
  node: [
    '-e',
    'const { user, system } = process.cpuUsage(); console.log(JSON.stringify({ msg: "kvgate serving", startup_ms: performance.now(), startup_cpu_ms: (user + system) / 1000 }))',
  ],
  compiled: [path.join(root, 'bin/kvgate.js'), ...serveArgs],
  tsx: ['--import', 'tsx', path.join(root, 'src/cli/main.ts'), ...serveArgs],
};

function once(args) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    let done = false;
    child.stdout.on('data', (d) => {
      buf += d;
      const line = buf.split('\n').find((l) => l.includes('"kvgate serving"'));
      if (!line || done) return;
      done = true;
      const wall = performance.now() - t0;
      const rec = JSON.parse(line);
      child.kill('SIGKILL');
      resolve({ wall, own: rec.startup_ms, cpu: rec.startup_cpu_ms });
    });
    child.once('exit', (code) => {
      if (!done) reject(new Error(`${args.join(' ')} exited with ${code} before serving`));
    });
  });
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = Object.fromEntries(Object.keys(SUBJECTS).map((k) => [k, []]));
for (let i = 0; i < runs; i++) {
  // Interleaved, so a burst of load elsewhere falls on every subject alike.
  for (const [name, args] of Object.entries(SUBJECTS)) results[name].push(await once(args));
}
const m = (name, field) => median(results[name].map((r) => r[field]));
const row = (name) => `${name.padEnd(9)} ${String(Math.round(m(name, 'wall'))).padStart(7)} ${String(Math.round(m(name, 'own'))).padStart(10)} ${String(Math.round(m(name, 'cpu'))).padStart(7)}`;
process.stdout.write(
  [
    `kvgate serve start-up, median of ${runs} interleaved runs (node ${process.version}; ${Math.round(1000 * (await import('node:os')).loadavg()[0]) / 1000} load average at the end)`,
    'subject   wall ms  own-clock ms  CPU ms',
    row('node'),
    row('compiled'),
    row('tsx'),
    `compiled serve: ${(m('compiled', 'cpu') / m('tsx', 'cpu')).toFixed(2)} × the CPU of the tsx start, ` +
      `${Math.round(m('compiled', 'own') - m('node', 'own'))} ms past a bare node process by its own clock`,
  ].join('\n') + '\n',
);
