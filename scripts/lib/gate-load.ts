/**
 * What the gate-measuring scripts (profile-gate, alloc-gate, ab-gate, ab-decide-redis) share: the
 * body-mode flag, the saturating load the bench drives, and redis-server's own counters.
 */
import { isBenchBodyMode, type BenchBodyMode } from '../../src/bench/load-client.js';

/** A `--body-mode` value, or an error naming the flag. */
export function bodyModeFlag(value: string | undefined, flag = '--body-mode'): BenchBodyMode {
  if (value === undefined || !isBenchBodyMode(value)) throw new Error(`${flag} ${value}: buffered or full_duplex`);
  return value;
}

/** The bench's closed-loop load at saturation on one server (its streams, bodies and key mix). */
export function saturationPlan(server: { target: string; routingHeader?: string }, bodyBytes: number, bodyMode: BenchBodyMode, concurrency = 64) {
  return {
    target: server.target,
    bodyBytes,
    seed: 1,
    ...(server.routingHeader !== undefined ? { expectHeader: server.routingHeader } : {}),
    mode: 'closed' as const,
    concurrency,
    bodyMode,
  };
}

/** redis-server's CPU time so far (user + system, µs), from the text of `INFO cpu`. */
export function redisCpuUs(infoCpu: string): number {
  const secs = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, 'm').exec(infoCpu)?.[1] ?? 0);
  return (secs('used_cpu_user') + secs('used_cpu_sys')) * 1e6;
}

/** Calls and µs so far per command, from the text of `INFO commandstats` (scripts' inner calls included). */
export function commandStats(infoCommandstats: string): Map<string, { calls: number; usec: number }> {
  const out = new Map<string, { calls: number; usec: number }>();
  for (const m of infoCommandstats.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) out.set(m[1]!, { calls: Number(m[2]), usec: Number(m[3]) });
  return out;
}

/** Calls so far per command (`INFO commandstats`, scripts' inner calls included). */
export function commandCalls(infoCommandstats: string): Map<string, number> {
  return new Map([...commandStats(infoCommandstats)].map(([c, s]) => [c, s.calls]));
}
