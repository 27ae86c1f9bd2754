/**
 * `kvgate sim`: replays a trace or a synthetic workload on a simulated GPU fleet under kvgate's
 * real routing (through `Gate`) and under the baselines users would otherwise pick, and prints one
 * row per policy (or `--json`), optionally writing a markdown report with charts.
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { nonNegativeInt, nonNegativeNumber, positiveInt, positiveNumber } from './arg-parsers.js';
import cliProgress from 'cli-progress';
import { stepProgress } from '../bench/progress.js';
import { DEFAULTS } from '../config/defaults.js';
import { parseConfig, parseConfigYaml, readConfigText } from '../config/load.js';
import { initHashing } from '../request/hashing.js';
import { adapterTable, DEFAULT_ADAPTER_MIX, runAdapterComparison } from '../sim/adapters.js';
import { classTable, runClassMix } from '../sim/classes.js';
import { DEFAULT_COST_MODEL, DEFAULT_FLEET } from '../sim/cost-model.js';
import { ALL_POLICIES, checkPolicyNames, POLICY_FACTORIES, POOLED_BOUND } from '../sim/policies/registry.js';
import { writeReport } from '../sim/report.js';
import { runSimulation, type Progress } from '../sim/run.js';
import { hasSessions } from '../sim/scale.js';
import { DEFAULT_GOODPUT_MAX_LOAD, DEFAULT_GOODPUT_RESOLUTION, DEFAULT_LOADS, DEFAULT_SLO_TTFT_S, runSweep, sweepJsonRows, type SweepProgress } from '../sim/sweep.js';
import { formatSweep, writeSweepReport } from '../sim/sweep-report.js';
import { formatTable, pct } from '../sim/table.js';
import type { Workload } from '../sim/workload.js';
import { loadTrace } from '../sim/workloads/trace.js';
import { isSyntheticName, SYNTHETIC_DESCRIPTIONS, SYNTHETIC_WORKLOADS, syntheticWorkload } from '../sim/workloads/synthetic.js';

/** Requests a synthetic run generates unless `--requests` says otherwise: seconds on two cores. */
const DEFAULT_SYNTHETIC_REQUESTS = 2000;
/** Requests measured at each load of a sweep unless `--requests` says otherwise. */
const DEFAULT_SWEEP_REQUESTS = 2000;

function policyList(value: string): string[] {
  const names = value.split(',').map((s) => s.trim()).filter(Boolean);
  try {
    checkPolicyNames(names);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  if (names.length === 0) throw new InvalidArgumentError('name at least one policy');
  return names;
}

interface SimFlags {
  trace?: string;
  workload?: string;
  policies: string[];
  workers: number;
  cacheTokens: number;
  offloadTokens: number;
  maxBatch: number;
  maxInflight: number;
  prefillTokS: number;
  rateScale: number;
  requests?: number;
  seed: number;
  json?: boolean;
  report?: string;
  sweep?: boolean;
  gateConfig?: string;
  loads: number[];
  sloTtft: number;
  goodputResolution: number;
  goodputMaxLoad: number;
  classes?: boolean;
  adapters?: number;
  maxLoras: number;
  adapterLoadMs: number;
}

function loadList(value: string): number[] {
  const loads = value.split(',').map((s) => Number(s.trim()));
  if (loads.length === 0 || loads.some((x) => !(x > 0) || !Number.isFinite(x))) throw new InvalidArgumentError('must be a comma-separated list of positive numbers');
  return [...new Set(loads)].sort((a, b) => a - b);
}

/** Where results go: stdout in the CLI; tests pass their own sink. */
export interface SimOutput {
  write(text: string): void;
}

/** Where progress goes: stderr in the CLI (a bar on a terminal, lines otherwise); tests pass their own. */
export type ProgressStream = NodeJS.WritableStream & { isTTY?: boolean };

export function registerSimCommand(program: Command, out: SimOutput = process.stdout, progressOut: ProgressStream = process.stderr): void {
  const policyHelp = [...Object.entries(POLICY_FACTORIES).map(([k, v]) => `${k} (${v.describe})`), `${POOLED_BOUND} (one LRU cache of the fleet's total size)`];
  program
    .command('sim')
    .description('simulate a GPU fleet with prefix KV caches and compare kvgate with baseline routing policies')
    .addOption(new Option('--trace <file|dir>', 'replay a Mooncake trace (.jsonl with hash_ids) or a folder of agent-session .jsonl files'))
    .addOption(
      new Option('--workload <name>', `synthetic workload when no --trace: ${SYNTHETIC_WORKLOADS.map((n) => `${n} (${SYNTHETIC_DESCRIPTIONS[n]})`).join('; ')}`).choices(SYNTHETIC_WORKLOADS),
    )
    .addOption(new Option('--policies <list>', `comma-separated: ${policyHelp.join('; ')}`).argParser(policyList).default(ALL_POLICIES, ALL_POLICIES.join(',')))
    .addOption(new Option('--workers <n>', 'workers in the fleet').argParser(positiveInt).default(DEFAULT_FLEET.workers))
    .addOption(new Option('--cache-tokens <n>', 'GPU KV cache per worker, in tokens').argParser(positiveInt).default(DEFAULT_FLEET.cacheTokens))
    .addOption(new Option('--offload-tokens <n>', 'CPU offload tier per worker, in tokens (0: none)').argParser(nonNegativeInt).default(DEFAULT_FLEET.offloadTokens))
    .addOption(new Option('--max-batch <n>', 'most sequences in a worker batch').argParser(positiveInt).default(DEFAULT_FLEET.maxBatch))
    .addOption(new Option('--max-inflight <n>', "kvgate's limits.max_inflight per worker").argParser(positiveInt).default(DEFAULTS.maxInflight))
    .addOption(new Option('--prefill-tok-s <n>', 'prefill throughput per worker, uncached tokens/s').argParser(positiveNumber).default(DEFAULT_COST_MODEL.prefillTokensPerS))
    .addOption(new Option('--rate-scale <x>', 'speed up arrivals by this factor (0.5 = half the rate)').argParser(positiveNumber).default(1))
    .addOption(new Option('--requests <n>', `replay only the first N requests (synthetic default ${DEFAULT_SYNTHETIC_REQUESTS}); with --sweep, the requests measured at each load (default ${DEFAULT_SWEEP_REQUESTS})`).argParser(positiveInt))
    .addOption(new Option('--seed <n>', 'seed for synthetic workloads and random tie-breaks').argParser(nonNegativeInt).default(1))
    .addOption(new Option('--json', 'print one JSON array (one object per policy) on stdout and nothing else'))
    .addOption(new Option('--report <dir>', 'write report.md and SVG charts into DIR (created if missing)').argParser(reportDir))
    .addOption(new Option('--gate-config <file>', "kvgate config YAML for the simulated gate (routing weights, thresholds, signals); the simulator sets its workers and limits.max_inflight"))
    .addOption(new Option('--sweep', 'run every policy at each offered load of --loads (a share of the fleet\'s capacity) and report goodput at --slo-ttft'))
    .addOption(new Option('--loads <list>', 'offered loads for --sweep, as shares of capacity').argParser(loadList).default([...DEFAULT_LOADS], DEFAULT_LOADS.join(',')))
    .addOption(new Option('--slo-ttft <s>', 'p99 TTFT SLO for goodput in --sweep, seconds').argParser(positiveNumber).default(DEFAULT_SLO_TTFT_S))
    .addOption(new Option('--goodput-resolution <load>', 'with --sweep, run each policy at more loads until its goodput is known this closely (0: read it off --loads)').argParser(nonNegativeNumber).default(DEFAULT_GOODPUT_RESOLUTION))
    .addOption(new Option('--goodput-max-load <load>', 'with --sweep, search goodput no higher than this load').argParser(positiveNumber).default(DEFAULT_GOODPUT_MAX_LOAD))
    .addOption(new Option('--classes', 'classes of service: a critical/standard/sheddable mix through the gate, each class\'s shed rate and TTFT (overload it with --rate-scale)').conflicts(['sweep', 'trace', 'adapters', 'report', 'gateConfig', 'policies']))
    .addOption(new Option('--adapters <n>', 'LoRA adapters: requests name one of N adapters (Zipf), workers hold --max-loras at once; kvgate with and without adapter affinity against round robin and least loaded').argParser(positiveInt).conflicts(['sweep', 'trace', 'report', 'gateConfig', 'policies']))
    .addOption(new Option('--max-loras <n>', 'adapter slots per worker with --adapters (vLLM --max-loras)').argParser(positiveInt).default(4))
    .addOption(new Option('--adapter-load-ms <ms>', 'time to load an adapter that is not resident, with --adapters').argParser(positiveNumber).default(50))
    .action(async (o: SimFlags) => {
      if (o.trace !== undefined && o.workload !== undefined) throw new InvalidArgumentError('pass --trace or --workload, not both');
      // Said plainly rather than as a bare ENOENT: an unset variable in the path ($KVGATE_TRACES/…) is the usual cause.
      if (o.trace !== undefined && !existsSync(o.trace)) throw new InvalidArgumentError(`--trace ${o.trace}: no such file or folder (is a variable in the path unset?); pass a Mooncake trace (.jsonl with hash_ids) or a folder of agent-session .jsonl files`);
      await initHashing();
      const gateConfig = o.gateConfig !== undefined ? readGateConfig(o.gateConfig) : undefined;
      if (o.sweep && o.rateScale !== 1) throw new InvalidArgumentError('--sweep sets the arrival rate itself (--loads); drop --rate-scale');
      if (o.sweep) return sweep(o, out, progressOut, gateConfig);
      if (o.classes || o.adapters !== undefined) return classesOrAdapters(o, out);
      const workload = loadWorkload(o);
      // On a terminal a bar with the time left; piped, a line as each policy starts.
      const bar = o.json ? undefined : progressOut.isTTY ? progressBar(workload, o.policies, progressOut) : progressLines(workload, o.policies, progressOut);
      let report;
      try {
        report = await runSimulation(
          workload,
          {
            policies: o.policies,
            fleet: {
              workers: o.workers,
              cacheTokens: o.cacheTokens,
              offloadTokens: o.offloadTokens,
              maxBatch: o.maxBatch,
            },
            cost: { prefillTokensPerS: o.prefillTokS },
            seed: o.seed,
            maxInflight: o.maxInflight,
            ...(gateConfig ? { gateConfig } : {}),
          },
          bar?.update,
        );
      } finally {
        bar?.stop();
      }
      if (o.json) {
        out.write(`${JSON.stringify(report.rows)}\n`);
      } else {
        const w = report.workload;
        out.write(
          `${w.name}: ${w.requests.toLocaleString('en-US')} requests over ${w.spanS.toFixed(0)} s on ${o.workers} workers × ` +
            `${o.cacheTokens.toLocaleString('en-US')} KV tokens\n\n${formatTable(report.rows)}\n`,
        );
        if (report.kvgateOutcomes) {
          out.write(`\nkvgate decisions: ${Object.entries(report.kvgateOutcomes).map(([k, v]) => `${k} ${v}`).join(', ')}\n`);
        }
        const bound = report.rows.find((r) => r.policy === POOLED_BOUND);
        if (bound) out.write(`pooled-cache bound: ${pct(bound.hit_rate)} hit rate\n`);
      }
      if (o.report !== undefined) {
        const files = await writeReport(o.report, report, `kvgate ${process.argv.slice(2).join(' ')}`);
        process.stderr.write(`report: ${files.markdown}\n`);
      }
    });
}

/**
 * `--report` is checked before the run (which can take minutes), not after it: a path that is a
 * file, or a directory that cannot be created, fails at once.
 */
function reportDir(value: string): string {
  if (existsSync(value) && !statSync(value).isDirectory()) throw new InvalidArgumentError(`${value} is a file: name a directory (report.md and the charts go into it)`);
  // The directory itself is made when the report is written; here only that it could be: the
  // nearest existing ancestor is a directory we may write into.
  let at = path.resolve(value);
  while (!existsSync(at)) at = path.dirname(at);
  try {
    if (!statSync(at).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
    accessSync(at, constants.W_OK);
  } catch (err) {
    throw new InvalidArgumentError(`cannot write into ${value}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message} at ${at}`);
  }
  return value;
}

/** The YAML of `--gate-config`, checked as `kvgate serve` would check it. */
function readGateConfig(file: string): Record<string, unknown> {
  const raw = parseConfigYaml(readConfigText(file), file);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new InvalidArgumentError(`${file}: not a kvgate config (a YAML mapping)`);
  const cfg = raw as Record<string, unknown>;
  if ('workers' in cfg || 'pools' in cfg) throw new InvalidArgumentError(`${file}: the simulator sets the workers; remove workers/pools`);
  // Checked now, with one stand-in worker, so a typo fails before any simulation runs.
  parseConfig({ ...cfg, workers: [{ id: 'w0', cluster: 'sim_w0' }] }, file);
  return cfg;
}

async function sweep(o: SimFlags, out: SimOutput, progressOut: ProgressStream, gateConfig: Record<string, unknown> | undefined): Promise<void> {
  const n = o.requests ?? DEFAULT_SWEEP_REQUESTS;
  // A session trace is loaded whole and replicated up to the load (scale.ts); anything else is
  // cut to its first N requests and re-timed.
  let base: Workload;
  let copySessions = false;
  if (o.trace !== undefined) {
    base = loadTrace(o.trace);
    copySessions = hasSessions(base);
    if (!copySessions) base = loadTrace(o.trace, { maxRequests: n });
  } else {
    const name = o.workload ?? 'mixed';
    if (!isSyntheticName(name)) throw new InvalidArgumentError(`unknown workload ${name}`);
    base = syntheticWorkload(name, { requests: n, seed: o.seed });
  }
  // As without --sweep: on a terminal a bar with the time left; piped, a line as each run starts; nothing with --json.
  const bar = o.json ? undefined : progressOut.isTTY ? sweepProgressBar(o.loads, o.policies, progressOut) : sweepProgressLines(o.loads, o.policies, progressOut);
  let report;
  try {
    report = await runSweep(
      base,
      {
        policies: o.policies,
        fleet: { workers: o.workers, cacheTokens: o.cacheTokens, offloadTokens: o.offloadTokens, maxBatch: o.maxBatch },
        cost: { prefillTokensPerS: o.prefillTokS },
        seed: o.seed,
        maxInflight: o.maxInflight,
        ...(gateConfig ? { gateConfig } : {}),
        loads: o.loads,
        sloTtftS: o.sloTtft,
        goodputResolution: o.goodputResolution,
        goodputMaxLoad: o.goodputMaxLoad,
        requests: n,
        copySessions,
      },
      bar?.update,
    );
  } finally {
    bar?.stop();
  }
  if (o.json) {
    out.write(`${JSON.stringify(sweepJsonRows(report))}\n`);
  } else {
    out.write(formatSweep(report));
  }
  if (o.report !== undefined) {
    const files = await writeSweepReport(o.report, report, `kvgate ${process.argv.slice(2).join(' ')}`);
    process.stderr.write(`report: ${files.markdown}\n`);
  }
}

function loadWorkload(o: SimFlags): Workload {
  const common = { rateScale: o.rateScale, ...(o.requests !== undefined ? { maxRequests: o.requests } : {}) };
  if (o.trace !== undefined) return loadTrace(o.trace, common);
  const name = o.workload ?? 'mixed';
  if (!isSyntheticName(name)) throw new InvalidArgumentError(`unknown workload ${name}`);
  return syntheticWorkload(name, { requests: o.requests ?? DEFAULT_SYNTHETIC_REQUESTS, seed: o.seed, rateScale: o.rateScale });
}

/** Not a terminal: a line on stderr as each policy starts, with the time left. */
function progressLines(w: Workload, policies: readonly string[], stream: ProgressStream): { update: Progress; stop: () => void } {
  const simulated = policies.filter((p) => p !== POOLED_BOUND);
  const n = w.requests.length;
  const lines = stepProgress('sim', simulated.length, simulated.length * n, stream, undefined, false);
  let current: string | undefined;
  return {
    update: (policy) => {
      if (policy === current) return;
      current = policy;
      lines.step(`${policy}: ${n.toLocaleString('en-US')} requests`, n);
    },
    stop: () => lines.done(),
  };
}

/** One bar across all policies, on stderr, redrawn at most every 1% of a policy's requests. */
function progressBar(w: Workload, policies: readonly string[], stream: ProgressStream): { update: Progress; stop: () => void } {
  const simulated = policies.filter((p) => p !== POOLED_BOUND);
  const n = w.requests.length;
  const bar = new cliProgress.SingleBar(
    { stream, format: 'sim {policy} [{bar}] {percentage}% | {value}/{total} requests | {duration_formatted} elapsed, ~{eta_formatted} left', hideCursor: true, clearOnComplete: true },
    cliProgress.Presets.shades_classic,
  );
  bar.start(simulated.length * n, 0, { policy: simulated[0] ?? '' });
  const step = Math.max(1, Math.floor(n / 100));
  return {
    update: (policy, routed) => {
      if (routed % step === 0 || routed === n) bar.update(simulated.indexOf(policy) * n + routed, { policy: policy.padEnd(18) });
    },
    stop: () => bar.stop(),
  };
}

/**
 * `--sweep`, not a terminal: a line as each run (a policy at a load) starts. A run's length depends
 * on its load (a session replay adds warm-up copies), so the time left is paced by runs done.
 */
function sweepProgressLines(loads: readonly number[], policies: readonly string[], stream: ProgressStream): { update: SweepProgress; stop: () => void } {
  const runs = loads.length * policies.filter((p) => p !== POOLED_BOUND).length;
  const lines = stepProgress('sim --sweep', runs, runs, stream, undefined, false);
  let current: string | undefined;
  return {
    update: (load, policy, _routed, total, search) => {
      const run = `${load} ${policy}`;
      if (run === current) return;
      current = run;
      // The search's runs are not among the runs counted: how many it takes depends on the results.
      if (search) stream.write(`sim --sweep goodput search: load ${load}: ${policy}, ${total.toLocaleString('en-US')} requests\n`);
      else lines.step(`load ${load}: ${policy}, ${total.toLocaleString('en-US')} requests`, 1);
    },
    stop: () => lines.done(),
  };
}

/** `--sweep` on a terminal: one bar across every run, each run an equal part, redrawn at most every 1% of a run. */
function sweepProgressBar(loads: readonly number[], policies: readonly string[], stream: ProgressStream): { update: SweepProgress; stop: () => void } {
  const simulated = policies.filter((p) => p !== POOLED_BOUND);
  const runs = loads.length * simulated.length;
  const bar = new cliProgress.SingleBar(
    { stream, format: 'sim --sweep load {load} {policy} [{bar}] {percentage}% | run {run}/{runs} | {duration_formatted} elapsed, ~{eta_formatted} left', hideCursor: true, clearOnComplete: true },
    cliProgress.Presets.shades_classic,
  );
  const labels = (load: number | undefined, policy: string | undefined) => ({ load: String(load ?? '').padEnd(4), policy: (policy ?? '').padEnd(18) });
  bar.start(runs * 100, 0, { ...labels(loads[0], simulated[0]), run: 1, runs });
  return {
    update: (load, policy, routed, total, search) => {
      // The goodput search's runs, after the grid's: the bar stays full while they run.
      if (search) return;
      const step = Math.max(1, Math.floor(total / 100));
      if (routed % step !== 0 && routed !== total) return;
      const run = loads.indexOf(load) * simulated.length + simulated.indexOf(policy);
      bar.update(run * 100 + Math.floor((100 * routed) / total), { ...labels(load, policy), run: run + 1, runs });
    },
    stop: () => bar.stop(),
  };
}

/**
 * `--classes` and `--adapters`: the same workload through the real gate with a class mix or with
 * adapters named in `model`, reporting what those features change (shed rate and TTFT per class;
 * adapter loads, hit rate and TTFT per policy).
 */
async function classesOrAdapters(o: SimFlags, out: SimOutput): Promise<void> {
  const name = o.workload ?? 'chat';
  if (!isSyntheticName(name)) throw new InvalidArgumentError(`unknown workload ${name}`);
  const workload = syntheticWorkload(name, { requests: o.requests ?? DEFAULT_SYNTHETIC_REQUESTS, seed: o.seed, rateScale: o.rateScale });
  const fleet = { ...DEFAULT_FLEET, workers: o.workers, cacheTokens: o.cacheTokens, offloadTokens: o.offloadTokens, maxBatch: o.maxBatch };
  const cost = { ...DEFAULT_COST_MODEL, prefillTokensPerS: o.prefillTokS };
  const head = `${workload.name}, ${workload.requests.length} requests at ${o.rateScale}× its rate, ${o.workers} workers, max_inflight ${o.maxInflight}, seed ${o.seed}`;
  if (o.classes) {
    const rows = await runClassMix(workload, { fleet, cost, maxInflight: o.maxInflight, seed: o.seed });
    out.write(o.json ? `${JSON.stringify(rows)}\n` : `${head}\n${classTable(rows)}\n`);
    return;
  }
  const mix = { ...DEFAULT_ADAPTER_MIX, adapters: o.adapters! };
  const rows = await runAdapterComparison(workload, { fleet, cost, maxInflight: o.maxInflight, seed: o.seed, mix, maxLoras: o.maxLoras, loadS: o.adapterLoadMs / 1000 });
  out.write(
    o.json
      ? `${JSON.stringify(rows)}\n`
      : `${head}, ${mix.adapters} adapters (Zipf ${mix.zipfS}), max_loras ${o.maxLoras}, load ${o.adapterLoadMs} ms\n${adapterTable(rows)}\n`,
  );
}
