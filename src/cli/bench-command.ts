/**
 * `kvgate bench`: what the gate costs on the request path. Many concurrent Envoy-like ext_proc
 * streams against an in-process kvgate (memory store and Redis) and, in the same run, against a
 * no-op ext_proc server that answers CONTINUE at once, so every number reads as a ratio to that
 * ceiling. Prints a table (or one JSON object with `--json`).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { nonNegativeInt, positiveInt, secondsUpTo } from './arg-parsers.js';
import { parseSize } from '../bench/bodies.js';
import { formatReport } from '../bench/report.js';
import { stepProgress, type ProgressSink } from '../bench/progress.js';
import { benchPlan, runBench, type BenchOptions } from '../bench/run.js';
import { isBenchBodyMode, type BenchBodyMode } from '../bench/load-client.js';

/**
 * The default run takes about 70 s: 3 sizes × 3 servers × (0.5 s warm-up + 3 rounds of 1.2 s +
 * 3.2 s at half load), plus set-up. Rounds, not one long run, because a shared machine's noise
 * comes in bursts: interleaved rounds give every server the same weather, and the median drops it.
 */
const DEFAULT_SIZES = '2k,32k,400k';
const DEFAULT_DURATION_S = 1;
const DEFAULT_WARMUP_S = 0.5;
const DEFAULT_ROUNDS = 3;
/** Streams in flight at saturation: a busy Envoy's ext_proc load, far below Envoy's own limits. */
const DEFAULT_CONCURRENCY = 64;
/** Fleet size in the bench gate's config; decisions scan every worker, so it is part of the cost. */
const DEFAULT_WORKERS = 16;

function sizeList(value: string): number[] {
  const parts = value.split(',').map((s) => s.trim()).filter(Boolean);
  if (parts.length === 0) throw new InvalidArgumentError('name at least one size');
  try {
    return parts.map(parseSize);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

function bodyModeList(value: string): BenchBodyMode[] {
  const parts = [...new Set(value.split(',').map((s) => s.trim()).filter(Boolean))];
  const bad = parts.filter((p) => !isBenchBodyMode(p));
  if (bad.length > 0) throw new InvalidArgumentError(`unknown body modes: ${bad.join(', ')} (buffered, full_duplex)`);
  if (parts.length === 0) throw new InvalidArgumentError('name at least one body mode');
  return parts as BenchBodyMode[];
}

function storeList(value: string): Array<'memory' | 'redis'> {
  const parts = value.split(',').map((s) => s.trim()).filter(Boolean);
  const bad = parts.filter((p) => p !== 'memory' && p !== 'redis');
  if (bad.length > 0) throw new InvalidArgumentError(`unknown stores: ${bad.join(', ')} (memory, redis)`);
  if (parts.length === 0) throw new InvalidArgumentError('name at least one store');
  return [...new Set(parts)] as Array<'memory' | 'redis'>;
}

function redisUrl(value: string): string {
  if (!/^rediss?:\/\//.test(value)) throw new InvalidArgumentError('must be a redis:// or rediss:// URL');
  return value;
}

interface BenchFlags {
  sizes: number[];
  bodyModes: BenchBodyMode[];
  stores: Array<'memory' | 'redis'>;
  duration: number;
  warmup: number;
  rounds: number;
  concurrency: number;
  clientThreads: number;
  workers: number;
  redis?: string;
  half: boolean;
  seed: number;
  minCompleted: number;
  json?: boolean;
}

/** Where results go: stdout in the CLI; tests pass their own sink. */
export interface BenchOutput {
  write(text: string): void;
}

export function registerBenchCommand(program: Command, out: BenchOutput = process.stdout, err: ProgressSink = process.stderr): void {
  program
    .command('bench')
    .description('measure what the gate costs per request: ext_proc load against kvgate (memory, Redis) and a no-op ceiling')
    .addOption(new Option('--sizes <list>', 'request body sizes, comma-separated (e.g. 2k,32k,400k)').argParser(sizeList).default(sizeList(DEFAULT_SIZES), DEFAULT_SIZES))
    .addOption(
      new Option('--body-modes <list>', 'Envoy request body modes to play: buffered, full_duplex (FULL_DUPLEX_STREAMED)')
        .argParser(bodyModeList)
        .default(['buffered'], 'buffered'),
    )
    .addOption(new Option('--stores <list>', 'kvgate stores to load: memory, redis').argParser(storeList).default(['memory', 'redis'], 'memory,redis'))
    .addOption(new Option('--duration <s>', 'measured seconds per saturation round (the half-load run lasts rounds × this)').argParser(secondsUpTo(3600)).default(DEFAULT_DURATION_S))
    .addOption(new Option('--warmup <s>', 'unmeasured seconds of load on each server at each size before measuring').argParser(secondsUpTo(3600)).default(DEFAULT_WARMUP_S))
    .addOption(new Option('--rounds <n>', 'saturation rounds per server and size, interleaved; the median is reported').argParser(positiveInt).default(DEFAULT_ROUNDS))
    .addOption(new Option('--concurrency <n>', 'streams in flight in the saturation runs').argParser(positiveInt).default(DEFAULT_CONCURRENCY))
    .addOption(new Option('--client-threads <n>', 'threads generating load (the gate keeps the main thread)').argParser(positiveInt).default(1))
    .addOption(new Option('--workers <n>', 'workers in the bench gate config').argParser(positiveInt).default(DEFAULT_WORKERS))
    .addOption(new Option('--redis <url>', 'use this Redis instead of starting a redis-server on a free port').argParser(redisUrl))
    .addOption(new Option('--no-half', 'skip the runs at half of saturation'))
    .addOption(new Option('--seed <n>', 'seed for bodies and arrivals').argParser(positiveInt).default(1))
    .addOption(
      new Option('--min-completed <n>', 'keep each measured window open until n requests completed in it (at most 10 s longer): for a loaded machine, where a short window can see none')
        .argParser(nonNegativeInt)
        .default(0),
    )
    .addOption(new Option('--json', 'print one JSON object (machine, options, runs, targets) on stdout and nothing else'))
    .action(async (o: BenchFlags) => {
      if (o.duration <= 0) throw new InvalidArgumentError('--duration must be above 0');
      const opts: BenchOptions = {
        sizes: o.sizes,
        bodyModes: o.bodyModes,
        stores: o.stores,
        durationMs: Math.round(o.duration * 1000),
        warmupMs: Math.round(o.warmup * 1000),
        rounds: o.rounds,
        concurrency: o.concurrency,
        clientThreads: o.clientThreads,
        workers: o.workers,
        ...(o.redis !== undefined ? { redisUrl: o.redis } : {}),
        halfSaturation: o.half,
        seed: o.seed,
        minCompleted: o.minCompleted,
      };
      // Progress on stderr in every case (stdout carries the table or the JSON): redrawn with the
      // time left on a terminal, a line per step otherwise.
      const plan = benchPlan(opts);
      const progress = stepProgress('bench', plan.steps, plan.plannedMs, err);
      let report;
      try {
        report = await runBench(opts, (line, plannedMs) => progress.step(line, plannedMs));
      } finally {
        progress.done();
      }
      out.write(o.json ? `${JSON.stringify(report)}\n` : formatReport(report));
    });
}
