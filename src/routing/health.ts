/**
 * A worker's state from what it reports. Pure: the collector and every gate replica compute the
 * same state from the same shared signals.
 *
 *   down       no data yet, data older than stale_after (by the scrape's age, plus the age of
 *              the samples' own timestamps where the page has them), or the last `failures_down`
 *              scrapes failed
 *   pressured  KV use ≥ kv_pressure, queue > max_queue, temperature > max_temp_c, or (only where
 *              configured) GPU framebuffer use ≥ memory_pressure
 *   healthy    otherwise
 *
 * Framebuffer use is off by default: vLLM preallocates most GPU memory at start-up, so "90% used"
 * is normal there; KV-cache use and the queue are what approach out-of-memory.
 * An operator's state (draining, down, …) overrides all of this.
 */
import type { WorkerState } from './types.js';

/** What one scrape says about a worker. Absent fields were not reported (or were invalid). */
export interface WorkerSignals {
  running?: number;
  waiting?: number;
  /** KV-cache use in [0, 1]. */
  kvUsage?: number;
  /** GPU framebuffer used / free, MiB (DCGM). */
  fbUsedMiB?: number;
  fbFreeMiB?: number;
  /** GPU temperature, °C (DCGM). */
  gpuTempC?: number;
  blockSize?: number;
  numGpuBlocks?: number;
  /**
   * How old the engine's figures already were when scraped, ms: the age of the oldest explicit
   * sample timestamp on its page. Absent when the page has none (vLLM and SGLang stamp nothing:
   * their figures are as old as the scrape).
   */
  sampleAgeMs?: number;
  /** LoRA adapters (vLLM `vllm:lora_requests_info`), when the engine reports them. */
  lora?: LoraSignals;
}

/** The adapters a worker has: those of running requests, those of waiting ones, and how many fit at once. */
export interface LoraSignals {
  running: string[];
  waiting: string[];
  /** Most adapters one batch may hold (vLLM `--max-loras`). */
  maxLora: number;
}

export interface HealthThresholds {
  kvPressure: number;
  memoryPressure: number;
  maxQueue: number;
  maxTempC: number;
  staleAfterMs: number;
  failuresDown: number;
}

/** What the store holds about a worker's last scrapes. */
export interface SignalRecord {
  signals: WorkerSignals;
  /** Age of the last successful scrape, ms (by the shared store's clock); Infinity if none. */
  ageMs: number;
  /** Consecutive failed scrapes since it. */
  failures: number;
  /** Why the last scrape failed, if it did. */
  error?: string;
}

/** Why a worker is not healthy, as stable codes (offload events carry the first one). */
export type HealthCode = 'no_data' | 'scrape_failed' | 'stale' | 'kv_pressure' | 'queue' | 'temperature' | 'memory_pressure';

export interface HealthVerdict {
  state: Exclude<WorkerState, 'draining'>;
  codes: HealthCode[];
  /** The same, readable, with the values that triggered them. */
  reasons: string[];
}

export function assessHealth(rec: SignalRecord | undefined, t: HealthThresholds, useFramebuffer: boolean): HealthVerdict {
  if (!rec) return { state: 'down', codes: ['no_data'], reasons: ['no metrics yet'] };
  if (rec.failures >= t.failuresDown) {
    return { state: 'down', codes: ['scrape_failed'], reasons: [`${rec.failures} failed scrapes${rec.error ? `: ${rec.error}` : ''}`] };
  }
  // The figures' age: since the scrape, plus how old they already were then (their timestamps).
  const sampleAge = rec.signals.sampleAgeMs;
  const age = rec.ageMs + (typeof sampleAge === 'number' && sampleAge > 0 ? sampleAge : 0);
  if (!(age <= t.staleAfterMs)) {
    return Number.isFinite(rec.ageMs)
      ? { state: 'down', codes: ['stale'], reasons: [`metrics ${Math.round(age)} ms old`] }
      : { state: 'down', codes: ['no_data'], reasons: ['no successful scrape yet'] };
  }
  const s = rec.signals;
  const codes: HealthCode[] = [];
  const reasons: string[] = [];
  if (s.kvUsage !== undefined && s.kvUsage >= t.kvPressure) {
    codes.push('kv_pressure');
    reasons.push(`kv ${(s.kvUsage * 100).toFixed(0)}%`);
  }
  if (s.waiting !== undefined && s.waiting > t.maxQueue) {
    codes.push('queue');
    reasons.push(`queue ${s.waiting}`);
  }
  if (s.gpuTempC !== undefined && s.gpuTempC > t.maxTempC) {
    codes.push('temperature');
    reasons.push(`${s.gpuTempC} °C`);
  }
  const fb = framebufferUse(s, useFramebuffer);
  if (fb !== undefined && fb >= t.memoryPressure) {
    codes.push('memory_pressure');
    reasons.push(`gpu memory ${(fb * 100).toFixed(0)}%`);
  }
  return codes.length > 0 ? { state: 'pressured', codes, reasons } : { state: 'healthy', codes: [], reasons: [] };
}

/** The state a decision uses: an operator's word first, then the signals, else healthy. */
export function effectiveState(operator: WorkerState | undefined, fromSignals: HealthVerdict | undefined): WorkerState {
  if (operator !== undefined && operator !== 'healthy') return operator;
  return fromSignals?.state ?? 'healthy';
}

/**
 * The engine has the memory for more work: its scrape reports its memory (KV use, or GPU
 * framebuffer use where `useFramebuffer`), and it is healthy, or pressured by its queue alone. A
 * long queue is latency, which the score weighs; KV, memory or heat past their limits mean more
 * work would evict or throttle. What "full" means past the in-flight limit (overflow.ts). A page
 * without a memory figure (a Triton page with only scheduled and waiting counts) says nothing
 * about room: unknown is not room, and such a worker's limit stays hard, as without metrics.
 */
export function hasEngineRoom(v: HealthVerdict, s: WorkerSignals | undefined, useFramebuffer: boolean): boolean {
  return reportsMemory(s, useFramebuffer) && (v.state === 'healthy' || (v.state === 'pressured' && v.codes.every((c) => c === 'queue')));
}

/**
 * KV the engine reported free, in tokens, for a worker pressured by its KV use alone: its capacity
 * (its `cache_config_info`: vLLM's blocks × block size, SGLang's pages × page size) times what is
 * not in use. Undefined when the
 * page lacks either figure, or when anything else presses the worker (heat, GPU memory, a queue
 * past `max_queue`): then free KV is not room. Past pressure a worker takes no new sessions, but a
 * one-off request small enough to fit in what is left runs at once, where refusing it shed work the
 * engine had the memory for (overflow.ts `fitsOneOff`).
 */
export function kvRoomTokens(v: HealthVerdict, s: WorkerSignals | undefined): number | undefined {
  if (v.state !== 'pressured' || !v.codes.every((c) => c === 'kv_pressure')) return undefined;
  if (s?.kvUsage === undefined || s.blockSize === undefined || s.numGpuBlocks === undefined) return undefined;
  return Math.max(0, Math.round((1 - s.kvUsage) * s.blockSize * s.numGpuBlocks));
}

/** The scrape has a figure for the engine's memory: KV use, or (where configured) GPU framebuffer use. */
function reportsMemory(s: WorkerSignals | undefined, useFramebuffer: boolean): boolean {
  if (s === undefined) return false;
  return s.kvUsage !== undefined || framebufferUse(s, useFramebuffer) !== undefined;
}

/**
 * GPU framebuffer use, used / (used + free), where the worker is judged by it and the scrape has
 * both figures with a positive total; else undefined. One rule for the pressure verdict and for
 * engine room, so a figure one of them reads the other cannot ignore.
 */
function framebufferUse(s: WorkerSignals, useFramebuffer: boolean): number | undefined {
  if (!useFramebuffer || s.fbUsedMiB === undefined || s.fbFreeMiB === undefined) return undefined;
  const total = s.fbUsedMiB + s.fbFreeMiB;
  return total > 0 ? s.fbUsedMiB / total : undefined;
}
