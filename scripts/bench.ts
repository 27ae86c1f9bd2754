/**
 * `npm run bench`: every benchmark in one command, results written into docs/BENCHMARKS.md.
 *
 *   1. micro-benchmarks (scripts/bench-micro.ts): keying, hashing, decisions, store, Gate.route;
 *   2. `kvgate bench`: ext_proc load against kvgate (memory, Redis) and the no-op ceiling; then
 *      the same on the memory store in both body modes, buffered and Envoy's FULL_DUPLEX_STREAMED
 *      (step `duplex`);
 *   3. `kvgate sim` on every synthetic workload, then on the shared traces when they are present
 *      (--traces DIR, $KVGATE_TRACES, or ../shared/data/traces beside the repo), read in place;
 *   4. `kvgate sim --sweep`: every policy at offered loads 0.2-1.6 on the report's workloads and,
 *      condensed, on the held-out set the defaults were tuned on (src/bench/sweeps.ts).
 *
 * Each step runs in its own process, one after another, so no step's heap or threads disturb the
 * next one's timings. The generated sections of docs/BENCHMARKS.md are replaced; the prose stays.
 *
 *   --quick        seconds instead of minutes: tiny runs that check the pipeline, not the numbers
 *   --only LIST    micro,gate,duplex,sim,sweep (default all); sections not run keep their previous content
 *   --traces DIR   where the shared traces are
 *   --out FILE     the markdown to update (default docs/BENCHMARKS.md)
 *   --no-write     print the sections instead of writing them
 */
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { replaceSection, simSection, type SimResult } from '../src/bench/docs.js';
import { heldOutSection, sweepSection, type SweepResult } from '../src/bench/sweep-docs.js';
import { HELD_OUT_SWEEPS, REPORT_SWEEPS, sweepArgs, type SweepSpec } from '../src/bench/sweeps.js';
import type { SweepRow } from '../src/sim/sweep.js';
import { describeMachine, machineLine } from '../src/bench/machine.js';
import { markdownMicro } from '../src/bench/micro/format.js';
import type { MicroRow } from '../src/bench/micro/suite.js';
import { anomalies, markdownRuns, markdownTargets } from '../src/bench/report.js';
import type { BenchReport } from '../src/bench/run.js';
import { findTracesDir, traceReplays } from '../src/bench/traces.js';
import type { ResultRow } from '../src/sim/metrics.js';
import { SYNTHETIC_WORKLOADS } from '../src/sim/workloads/synthetic.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const ALL_STEPS = 'micro,gate,duplex,sim,sweep';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string', default: ALL_STEPS },
    traces: { type: 'string' },
    out: { type: 'string', default: join(root, 'docs', 'BENCHMARKS.md') },
    'no-write': { type: 'boolean', default: false },
  },
});
const steps = new Set(values.only.split(',').map((s) => s.trim()));
const quick = values.quick;

/**
 * Runs a command from the repo root; returns stdout. Progress goes to our stderr. `kvgate …`
 * commands (src/cli/main.ts) run the compiled build, as `kvgate serve` does in production: under
 * tsx every closure the gate creates is wrapped in a naming call (esbuild's keepNames), which the
 * shipped code does not pay. Scripts run through tsx.
 */
function node(args: string[]): Promise<string> {
  const argv = args[0] === 'src/cli/main.ts' ? ['bin/kvgate.js', ...args.slice(1)] : ['--import', 'tsx', ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
    const out: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(Buffer.concat(out).toString('utf8')) : reject(new Error(`${args.join(' ')} exited with ${code}`))));
  });
}

function log(line: string): void {
  process.stderr.write(`bench: ${line}\n`);
}

function gitCommit(): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: root, encoding: 'utf8' }).trim() !== '';
    return dirty ? `${sha} with uncommitted changes` : sha;
  } catch {
    return 'unknown';
  }
}

// Every step runs the compiled build (the micro-benchmarks import it): bring dist/ up to date first.
if (steps.has('micro') || steps.has('gate') || steps.has('duplex') || steps.has('sim') || steps.has('sweep')) {
  log('npm run build');
  execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
}

const started = Date.now();
const machine = describeMachine();
const sections: Record<string, string> = {};
const commit = gitCommit();

/** A time as the docs show it: to the minute, in UTC ("2026-01-31 14:05 UTC"). */
function utcMinute(ms: number = Date.now()): string {
  return `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** Each section says when and on what it ran: sections can come from different runs (--only). */
function stamp(): string {
  const m = describeMachine();
  return `_Run ${utcMinute()} at commit ${commit}; load average ${m.load_avg}, fresh memory ${m.fresh_memory_mb_s.toLocaleString('en-US')} MB/s._`;
}

/** A simulation's stamp: its results are in simulated time, so the machine's load does not enter them. */
function simStamp(): string {
  return `_Run ${utcMinute()} at commit ${commit}; simulated time, the same on any machine._`;
}

const microArgs = ['scripts/bench-micro.ts', '--json', ...(quick ? ['--quick'] : [])];
/** `--quick`: one short round at 2 KB, enough to check the pipeline. */
const quickGate = ['--sizes', '2k', '--duration', '0.3', '--warmup', '0.1', '--rounds', '1', '--concurrency', '8'];
const gateArgs = ['src/cli/main.ts', 'bench', '--json', ...(quick ? quickGate : [])];
// Full duplex against buffered on the same store and sizes: its target compares the two modes, so
// both run in one process, interleaved, as the gate step's servers are.
const duplexArgs = [
  'src/cli/main.ts',
  'bench',
  '--json',
  '--body-modes',
  'buffered,full_duplex',
  '--stores',
  'memory',
  ...(quick ? quickGate : ['--sizes', '2k,32k,400k']),
];
const simExtra = quick ? ['--requests', '60'] : [];
const shown = (args: string[]) =>
  args[0] === 'src/cli/main.ts' ? `kvgate ${args.slice(1).join(' ')}` : `node --import tsx ${args.join(' ')}`;

if (steps.has('micro')) {
  log(`micro-benchmarks${quick ? ' (quick)' : ''}`);
  const at = stamp();
  const micro = JSON.parse(await node(microArgs)) as { rows: MicroRow[] };
  sections['micro'] = [at, '', `Command: \`npm run bench:micro\` (\`${shown(microArgs)}\`; the suite runs from the compiled build)`, '', markdownMicro(micro.rows)].join('\n');
}

/** A `kvgate bench` section: when and how it ran, its table and its targets. */
async function gateSection(args: string[]): Promise<string> {
  const at = stamp();
  const report = JSON.parse(await node(args)) as BenchReport;
  const notes = anomalies(report);
  return [
    at,
    '',
    `Command: \`${shown(args)}\` (${report.wall_s} s). ${report.options.concurrency} streams at saturation from ${report.options.clientThreads} client thread(s), ` +
      `${report.options.rounds} interleaved rounds of ${report.options.durationMs / 1000} s per server and size (median shown), ${report.options.workers} workers` +
      (report.redis ? `; Redis: ${report.redis}.` : '.'),
    '',
    markdownRuns(report.runs),
    '',
    '**Targets**',
    '',
    markdownTargets(report.targets),
    ...(notes.length > 0 ? ['', ...notes.map((n) => `- ${n}`)] : []),
  ].join('\n');
}

if (steps.has('gate')) {
  log(`kvgate bench${quick ? ' (quick)' : ''}`);
  sections['gate'] = await gateSection(gateArgs);
}

if (steps.has('duplex')) {
  log(`kvgate bench, buffered and full duplex${quick ? ' (quick)' : ''}`);
  sections['gate-duplex'] = await gateSection(duplexArgs);
}

if (steps.has('sim')) {
  const at = stamp();
  const results: SimResult[] = [];
  for (const w of SYNTHETIC_WORKLOADS) {
    const args = ['src/cli/main.ts', 'sim', '--workload', w, '--json', ...simExtra];
    log(shown(args));
    results.push({ name: `synthetic: ${w}`, command: shown(args), rows: JSON.parse(await node(args)) as ResultRow[] });
  }
  const tracesDir = findTracesDir(root, values.traces);
  const traceResults: SimResult[] = [];
  if (tracesDir) {
    for (const t of traceReplays(tracesDir)) {
      const args = ['src/cli/main.ts', 'sim', '--trace', t.path, '--json', ...simExtra];
      log(shown(args));
      const rows = JSON.parse(await node(args)) as ResultRow[];
      // The path as a reader would type it from the repo root, not this machine's absolute path.
      const command = shown(args).replace(t.path, relative(root, t.path) || t.path);
      traceResults.push({ name: `trace: ${t.name}`, command, rows });
    }
  }
  sections['sim-synthetic'] = `${at}\n\n${simSection(results)}`;
  sections['sim-traces'] = tracesDir
    ? `${at} Traces from \`${relative(root, tracesDir)}\`.\n\n${simSection(traceResults)}`
    : '_The shared traces were not found (pass `--traces DIR` or set `KVGATE_TRACES`); nothing was replayed._';
}

if (steps.has('sweep')) {
  const tracesDir = findTracesDir(root, values.traces);
  const run = async (specs: readonly SweepSpec[]): Promise<SweepResult[]> => {
    const out: SweepResult[] = [];
    for (const spec of specs) {
      if (spec.trace && !tracesDir) continue;
      const args = ['src/cli/main.ts', ...sweepArgs(spec, tracesDir ?? '', quick)];
      log(shown(args));
      const rows = JSON.parse(await node(args)) as SweepRow[];
      // A trace's path as the docs write it: TRACES/… (the shared folder), not this machine's.
      const command = ['kvgate', ...sweepArgs(spec, 'TRACES', quick)].join(' ');
      out.push({ name: spec.name, command, rows });
    }
    return out;
  };
  const missing = tracesDir ? '' : '\n\n_The shared traces were not found (pass `--traces DIR` or set `KVGATE_TRACES`); only the synthetic workloads ran._';
  const at = simStamp();
  sections['sweep'] = `${at}${missing}\n\n${(await run(REPORT_SWEEPS)).map(sweepSection).join('\n\n')}`;
  sections['sweep-held-out'] = `${simStamp()}${missing}\n\n${(await run(HELD_OUT_SWEEPS)).map(heldOutSection).join('\n\n')}`;
}

const minutes = ((Date.now() - started) / 60000).toFixed(1);
const flags = [...(quick ? ['--quick'] : []), ...(values.only !== ALL_STEPS ? ['--only', values.only] : [])];
const benchCommand = flags.length > 0 ? `npm run bench -- ${flags.join(' ')}` : 'npm run bench';
sections['machine'] = [
  `- Last run: ${utcMinute(started)}, commit ${commit}, \`${benchCommand}\` (${minutes} min)`,
  `- Machine: ${machineLine(machine)}`,
  `- \`nproc\` ${machine.cpus}; CPU model from /proc/cpuinfo: ${machine.cpu_model}; memory ${machine.memory_gib} GiB; Node ${machine.node}`,
].join('\n');

if (values['no-write']) {
  for (const [name, text] of Object.entries(sections)) process.stdout.write(`\n## ${name}\n\n${text}\n`);
} else {
  let doc = existsSync(values.out) ? readFileSync(values.out, 'utf8') : '# Benchmarks\n';
  for (const [name, text] of Object.entries(sections)) doc = replaceSection(doc, name, text);
  writeFileSync(values.out, doc);
  log(`wrote ${relative(process.cwd(), values.out) || values.out} in ${minutes} min`);
}
