/**
 * Which load sweeps the benchmark report shows, and which it keeps for tuning. The report's set is
 * never tuned on; the held-out set (other seeds, another Mooncake trace) is where routing defaults
 * are chosen, and is shown condensed so a reader can check that the two agree.
 */
import { join } from 'node:path';

export interface SweepSpec {
  /** Heading in docs/BENCHMARKS.md. */
  name: string;
  /** A synthetic workload and its seed… */
  workload?: string;
  seed?: number;
  /** …or a trace path relative to the shared traces folder. */
  trace?: string;
  /** p99 TTFT SLO in seconds, where the workload's prompts make 2 s meaningless (Mooncake's). */
  sloS?: number;
}

/** The loads every sweep runs: light, to the knee, and past it. */
export const SWEEP_LOADS = '0.2,0.4,0.6,0.8,1,1.2,1.4,1.6';

/**
 * Mooncake's prompts are thousands of tokens with little sharing: a single prefill takes seconds,
 * so its sweeps are read at a 5 s SLO (the 2 s default would fail every policy at every load).
 */
const MOONCAKE_SLO_S = 5;

export const REPORT_SWEEPS: readonly SweepSpec[] = [
  { name: 'synthetic: chat (seed 1)', workload: 'chat' },
  { name: 'synthetic: agent (seed 1)', workload: 'agent' },
  { name: 'trace: mooncake/conversation_trace.jsonl (first 2,000 requests, SLO 5 s)', trace: 'mooncake/conversation_trace.jsonl', sloS: MOONCAKE_SLO_S },
  { name: 'trace: agent-sessions/miniswe/ (session copies)', trace: 'agent-sessions/miniswe' },
  { name: 'trace: agent-sessions/taubench/ (session copies)', trace: 'agent-sessions/taubench' },
];

export const HELD_OUT_SWEEPS: readonly SweepSpec[] = [
  { name: 'synthetic: chat, seed 101', workload: 'chat', seed: 101 },
  { name: 'synthetic: agent, seed 101', workload: 'agent', seed: 101 },
  { name: 'trace: mooncake/synthetic_trace.jsonl (first 2,000 requests, SLO 5 s)', trace: 'mooncake/synthetic_trace.jsonl', sloS: MOONCAKE_SLO_S },
];

/**
 * `kvgate sim` arguments for one sweep (without the `kvgate`). `traces` is the shared traces
 * folder: its path to run, or `TRACES` for the command the docs print.
 */
export function sweepArgs(spec: SweepSpec, traces: string, quick = false): string[] {
  const source = spec.trace !== undefined ? ['--trace', join(traces, spec.trace)] : ['--workload', spec.workload ?? 'chat'];
  return [
    'sim',
    ...source,
    ...(spec.seed !== undefined ? ['--seed', String(spec.seed)] : []),
    '--sweep',
    '--loads',
    quick ? '0.4,1' : SWEEP_LOADS,
    ...(spec.sloS !== undefined ? ['--slo-ttft', String(spec.sloS)] : []),
    ...(quick ? ['--requests', '60'] : []),
    '--json',
  ];
}
