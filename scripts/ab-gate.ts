/**
 * A/B CPU per request of two kvgate trees in one process: each tree's gate (memory store) is
 * started side by side and the bench's client thread loads them in alternating short windows, so a
 * burst of someone else's work on a shared machine lands on both alike. Prints each window's
 * main-thread CPU µs/request and the medians.
 *
 *   npx tsx scripts/ab-gate.ts --base /path/to/other/tree [--size 2k] [--body-mode buffered|full_duplex] [--base-body-mode buffered|full_duplex] [--rounds 12] [--ms 400] [--store memory|redis|REDIS_URL [--commands]] [--compiled]
 *
 * `--store redis` starts a throwaway redis-server (a URL uses that one) and both gates use it, each
 * under its own key prefix. Only one gate is loaded at a time, so redis-server's CPU time over a
 * window (INFO cpu) is that gate's Redis cost, give or take the other's timers (refreshes,
 * renewals); it is printed beside the gate's, with their sum: what a decision costs the machine.
 *
 * `--commands` (with a Redis store) also prints, per tree, the commands Redis ran per request (INFO
 * commandstats over its windows, scripts' inner calls included): what a layout change costs in calls;
 * and the µs Redis timed inside each of them per request (commandstats usec: the command alone, not
 * the script's Lua around it), steadier than its CPU time on a noisy machine.
 *
 * `--base-body-mode` loads the base tree's gate in another body mode than `--body-mode`: with
 * `--base .` it compares one tree's two modes in alternating windows (what full duplex costs over
 * buffered), and with `--store noop` the same for the no-op ceiling (what the transport alone costs).
 *
 * `--compiled` loads each tree's build (dist/; `npm run build` in both first), as `kvgate serve`
 * runs: from the sources, tsx wraps every closure in a naming call the shipped code never makes.
 *
 * Both trees share one copy of the libraries (node_modules), so global OpenTelemetry state (the
 * context manager) is whichever tree installs it first: compare context-manager changes across
 * processes instead.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { parseSize } from '../src/bench/bodies.js';
import { LoadPool } from '../src/bench/load-pool.js';
import { findRedisServer, startBenchRedis, type BenchRedis } from '../src/bench/redis-server.js';
import type { ServerUnderTest } from '../src/bench/servers.js';
import { bodyModeFlag, commandStats, redisCpuUs as cpuFromInfo, saturationPlan } from './lib/gate-load.js';
import { median } from '../src/util/median.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string' },
    size: { type: 'string', default: '2k' },
    'body-mode': { type: 'string', default: 'buffered' },
    'base-body-mode': { type: 'string' },
    rounds: { type: 'string', default: '12' },
    ms: { type: 'string', default: '400' },
    store: { type: 'string', default: 'memory' },
    compiled: { type: 'boolean', default: false },
    commands: { type: 'boolean', default: false },
  },
});
if (!values.base) throw new Error('--base DIR: the tree to compare with');
const bodyMode = bodyModeFlag(values['body-mode']);
const baseBodyMode = values['base-body-mode'] === undefined ? bodyMode : bodyModeFlag(values['base-body-mode'], '--base-body-mode');

function cpuUs(): number {
  const m = /^se\.sum_exec_runtime\s*:\s*([\d.]+)/m.exec(readFileSync(`/proc/self/task/${process.pid}/sched`, 'utf8'));
  if (!m) throw new Error('no /proc/self/task/<pid>/sched');
  return Number(m[1]) * 1000;
}
if (!existsSync(`/proc/self/task/${process.pid}/sched`)) throw new Error('Linux only');

type Start = (name: 'memory' | 'noop' | 'redis', opts: { workers: number; redisUrl?: string; logLevel?: string }) => Promise<ServerUnderTest>;
const here = path.resolve(import.meta.dirname, '..');
const trees = [path.resolve(values.base), here];
const starts: Start[] = [];
const serversModule = values.compiled ? 'dist/bench/servers.js' : 'src/bench/servers.ts';
for (const t of trees) starts.push(((await import(path.join(t, serversModule))) as { startServer: Start }).startServer);
let ownRedis: BenchRedis | undefined;
let redisUrl: string | undefined;
if (values.store === 'redis') {
  const bin = findRedisServer();
  if (!bin) throw new Error('--store redis needs redis-server on PATH (or give a URL)');
  ownRedis = await startBenchRedis(bin);
  redisUrl = ownRedis.url;
} else if (values.store !== 'memory' && values.store !== 'noop') {
  redisUrl = values.store;
}
const probe = redisUrl === undefined ? undefined : new Redis(redisUrl);
/** redis-server's CPU time so far (µs), or 0 without Redis. */
async function redisCpuUs(): Promise<number> {
  return probe ? cpuFromInfo(await probe.info('cpu')) : 0;
}
/** Calls and µs so far per command (INFO commandstats), or an empty map without Redis or --commands. */
async function redisCalls(): Promise<Map<string, { calls: number; usec: number }>> {
  if (!probe || !values.commands) return new Map();
  return commandStats(await probe.info('commandstats'));
}
/** Per tree: command → calls, and µs, over its windows. */
const callsByTree = [new Map<string, number>(), new Map<string, number>()];
const usecByTree = [new Map<string, number>(), new Map<string, number>()];
const servers: ServerUnderTest[] = [];
for (const s of starts) servers.push(await s(redisUrl === undefined ? (values.store as 'memory' | 'noop') : 'redis', { workers: 16, logLevel: 'error', ...(redisUrl === undefined ? {} : { redisUrl }) }));
const pool = LoadPool.create(1);
const plan = (s: ServerUnderTest) => saturationPlan(s, parseSize(values.size!), s === servers[0] ? baseBodyMode : bodyMode);
for (const s of servers) await pool.run({ ...plan(s), warmupMs: 0, durationMs: 1500 });
const per: number[][] = [[], []];
const perRedis: number[][] = [[], []];
/** Requests, and those decided on local state or after a failed commit, per tree: a store change may move decisions there. */
const tally = [0, 1].map(() => ({ requests: 0, degraded: 0, retried: 0 }));
for (const s of servers) s.window();
for (let r = 0; r < Number(values.rounds); r++) {
  const order = r % 2 === 0 ? [0, 1] : [1, 0];
  const line: string[] = [];
  for (const i of order) {
    const k0 = await redisCalls();
    const r0 = await redisCpuUs();
    const c0 = cpuUs();
    const w = await pool.run({ ...plan(servers[i]!), warmupMs: 0, durationMs: Number(values.ms) });
    const c1 = cpuUs();
    const r1 = await redisCpuUs();
    for (const [cmd, { calls, usec }] of await redisCalls()) {
      callsByTree[i]!.set(cmd, (callsByTree[i]!.get(cmd) ?? 0) + calls - (k0.get(cmd)?.calls ?? 0));
      usecByTree[i]!.set(cmd, (usecByTree[i]!.get(cmd) ?? 0) + usec - (k0.get(cmd)?.usec ?? 0));
    }
    if (w.errors > 0) throw new Error(`${trees[i]}: ${w.errors} errors`);
    const counts = servers[i]!.window();
    tally[i]!.requests += w.completed;
    tally[i]!.degraded += counts?.degraded ?? 0;
    tally[i]!.retried += counts?.retried ?? 0;
    per[i]!.push((c1 - c0) / w.completed);
    perRedis[i]!.push((r1 - r0) / w.completed);
    line[i] = ((c1 - c0) / w.completed).toFixed(0) + (probe ? ` + redis ${((r1 - r0) / w.completed).toFixed(0)}` : '');
  }
  console.log(`round ${r + 1}: base ${line[0]} this ${line[1]}`);
}
const ratios = per[0]!.map((a, i) => per[1]![i]! / a);
console.log(`${values.size} ${baseBodyMode === bodyMode ? bodyMode : `base ${baseBodyMode}, this ${bodyMode}`}: base ${median(per[0]!).toFixed(0)} µs/request, this ${median(per[1]!).toFixed(0)} µs/request (medians of ${per[0]!.length}); this/base per round median ${median(ratios).toFixed(3)}`);
const pct = (x: number, of: number) => `${((100 * x) / Math.max(1, of)).toFixed(1)}%`;
console.log(`decided after a failed commit: base ${pct(tally[0]!.retried, tally[0]!.requests)}, this ${pct(tally[1]!.retried, tally[1]!.requests)}; on local state: base ${pct(tally[0]!.degraded, tally[0]!.requests)}, this ${pct(tally[1]!.degraded, tally[1]!.requests)}`);
if (probe) {
  const sum = (i: number) => per[i]!.map((g, k) => g + perRedis[i]![k]!);
  const sumRatios = sum(0).map((a, k) => sum(1)[k]! / a);
  console.log(`${values.size} redis-server: base ${median(perRedis[0]!).toFixed(0)} µs/request, this ${median(perRedis[1]!).toFixed(0)}; gate + redis: base ${median(sum(0)).toFixed(0)}, this ${median(sum(1)).toFixed(0)}; this/base per round median ${median(sumRatios).toFixed(3)}`);
}
if (values.commands && probe) {
  // The probe's own INFO calls are left out; the other tree's timers (refreshes, renewals) are not.
  for (const [i, name] of ['base', 'this'].entries()) {
    const rows = [...callsByTree[i]!].filter(([cmd, n]) => cmd !== 'info' && n > 0).sort((a, b) => b[1] - a[1]);
    const total = rows.reduce((t, [, n]) => t + n, 0);
    const per = (n: number) => (n / Math.max(1, tally[i]!.requests)).toFixed(2);
    console.log(`${name} commands per request: ${per(total)} (${rows.map(([cmd, n]) => `${cmd} ${per(n)}`).join(', ')})`);
  }
  for (const [i, name] of ['base', 'this'].entries()) {
    const rows = [...usecByTree[i]!].filter(([cmd, n]) => cmd !== 'info' && n > 0).sort((a, b) => b[1] - a[1]);
    const per = (n: number) => (n / Math.max(1, tally[i]!.requests)).toFixed(1);
    console.log(`${name} command µs per request: ${rows.map(([cmd, n]) => `${cmd} ${per(n)}`).join(', ')}`);
  }
}
for (const s of servers) pool.forget(s.target);
for (const s of servers) await s.close();
await pool.close();
probe?.disconnect();
await ownRedis?.stop();
