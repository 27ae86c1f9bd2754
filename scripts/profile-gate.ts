/**
 * CPU profile of the gate alone under `kvgate bench`'s load: the gate on one store, loaded at
 * saturation by the bench's client threads, profiled (main thread only, through the inspector)
 * over the measured window, warm-up and start-up excluded. Prints self time grouped by layer and
 * the top functions, as fractions of the main thread's busy time: under a shared machine the
 * fractions hold where absolute times do not.
 *
 * `--store noop` profiles the no-op ext_proc server (the bench's ceiling) under the same load: what
 * the gate spends beyond it is the difference of the two CPU figures.
 *
 *   npx tsx scripts/profile-gate.ts [--size 2k] [--store memory|noop|redis|REDIS_URL] [--body-mode buffered|full_duplex] [--seconds 4] [--top 30] [--out file.cpuprofile] [--by layer|caller|inclusive|area] [--windows K] [--no-profile] [--compiled]
 *   npx tsx scripts/profile-gate.ts --summarise file.cpuprofile [--top 30] [--by layer|caller|inclusive|area]   (a profile taken before)
 *
 * `--by caller` also prints where Node's own frames ("node other": natives, buffers, events, and the
 * other node: layers) were called from: each such sample's self time goes to the nearest frame on
 * its stack that is not Node's (kvgate, grpc-js, a library), so "node other" becomes "Buffer.from
 * under grpc-js's serialize". `--by inclusive` prints inclusive time per function (a function
 * counted once per sample, however often it recurs on the stack): what a function and everything
 * it calls cost. `--by area` groups self time by the job it does (body parsing, prompt hashing,
 * prefix index, protobuf, transport, telemetry...), Node's frames charged to their caller as with
 * `--by caller`. `--no-profile` measures CPU µs/request without the profiler attached (its sampling
 * costs the main thread time in proportion to wall time, which a loaded machine inflates).
 * `--windows K` splits the measured window into K parts and also prints the median part's CPU
 * µs/request and the range: a burst of other work on a shared machine inflates only the parts it
 * lands in. Before/after on a shared machine: alternate runs of two trees with
 * `--no-profile --windows 8` and compare the median parts (or use scripts/ab-gate.ts).
 *
 * `--store redis` starts a throwaway redis-server (as `kvgate bench` does). On Redis it also prints
 * what Redis did per request in the window: its CPU time (INFO cpu: unlike a script's wall time, not
 * inflated by waiting for a core on a shared machine), the commands it ran with their µs per call
 * (INFO commandstats), and bytes each way.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { parseArgs } from 'node:util';
import { parseSize } from '../src/bench/bodies.js';
import type * as LoadPoolModule from '../src/bench/load-pool.js';
import { findRedisServer, startBenchRedis, type BenchRedis } from '../src/bench/redis-server.js';
import type * as ServersModule from '../src/bench/servers.js';
import { Redis } from 'ioredis';
import { bodyModeFlag, commandStats, redisCpuUs, saturationPlan } from './lib/gate-load.js';
import { median } from '../src/util/median.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '2k' },
    store: { type: 'string', default: 'memory' },
    seconds: { type: 'string', default: '4' },
    top: { type: 'string', default: '30' },
    out: { type: 'string' },
    concurrency: { type: 'string', default: '64' },
    summarise: { type: 'string' },
    'body-mode': { type: 'string', default: 'buffered' },
    'no-profile': { type: 'boolean', default: false },
    by: { type: 'string', default: 'layer' },
    windows: { type: 'string', default: '1' },
    compiled: { type: 'boolean', default: false },
  },
});

// `--compiled` profiles the build `kvgate serve` runs (dist/; `npm run build` first): from the
// sources, tsx wraps every closure the gate creates in a naming call the shipped code never makes.
const from = (m: string) => (values.compiled ? new URL(`../dist/${m}.js`, import.meta.url).href : `../src/${m}.js`);
const { LoadPool } = (await import(from('bench/load-pool'))) as typeof LoadPoolModule;
const { startServer } = (await import(from('bench/servers'))) as typeof ServersModule;

/**
 * CPU time the main thread (the gate; the load runs in worker threads) has used, in µs, from
 * Linux's per-thread accounting: unlike busy time, it does not grow when other processes take the
 * CPU away, so it compares runs on a shared machine. The scheduler's own figure (ns) when the
 * kernel shows it, else utime + stime (10 ms ticks). Undefined off Linux.
 */
function mainThreadCpuUs(): number | undefined {
  const dir = `/proc/self/task/${process.pid}`;
  if (!existsSync(`${dir}/stat`)) return undefined;
  if (existsSync(`${dir}/sched`)) {
    const m = /^se\.sum_exec_runtime\s*:\s*([\d.]+)/m.exec(readFileSync(`${dir}/sched`, 'utf8'));
    if (m) return Number(m[1]) * 1000;
  }
  // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
  const stat = readFileSync(`${dir}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / clockTicks;
}
const clockTicks = existsSync('/proc/self') ? Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100 : 100;

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[] }

/** Which layer a frame belongs to, from its script URL. */
function layer(cf: Node['callFrame']): string {
  // The compiled build (--compiled) sits in dist/ with the same layout as src/.
  const u = cf.url.replace('/dist/', '/src/');
  const n = cf.functionName;
  if (n === '(garbage collector)') return 'GC';
  if (n === '(idle)') return 'idle';
  if (n === '(program)') return 'V8 (program)';
  // The inspector's own work (serialising the profile) and the load pool's samplers are not the gate.
  if (n === 'dispatch' && u === '') return 'profiler';
  if (u.includes('/src/bench/')) return 'bench harness (RSS sampler)';
  if (u.includes('/src/request/') || u.includes('xxhash') || u.startsWith('wasm:')) return 'request: body, keys, hashing';
  if (u.includes('/src/telemetry/') || u.includes('@opentelemetry') || u.includes('prom-client') || u.includes('pino')) return 'telemetry';
  if (u.includes('/src/extproc/')) return 'ext_proc stream layer (kvgate)';
  if (u.includes('@grpc/') || u.includes('protobufjs')) return 'grpc-js';
  if (u.includes('/src/gate/') || u.includes('/src/routing/') || u.includes('/src/state/') || u.includes('lru-cache')) return 'gate.route (policy, store)';
  if (u.startsWith('node:internal/http2') || u.startsWith('node:http2')) return 'node http2';
  if (u.startsWith('node:internal/streams') || u.startsWith('node:stream')) return 'node streams';
  if (u.includes('async_hooks') || u.includes('task_queues') || n === 'runMicrotasks') return 'node async/microtasks';
  if (u.startsWith('node:') || u === '') return `node other${n === 'JSON.parse' ? ' (JSON.parse)' : ''}`;
  return `other (${u.split('/node_modules/').pop()!.split('/')[0]})`;
}

/** A profile's nodes by id, each node's parent, and each node's self time (µs) over the samples. */
function indexProfile(p: Profile): { byId: Map<number, Node>; parent: Map<number, number>; self: Map<number, number> } {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
  return { byId, parent, self };
}

function summarise(p: Profile, top: number): string {
  const { byId, self } = indexProfile(p);
  const groups = new Map<string, number>();
  const fns = new Map<string, number>();
  let busy = 0;
  for (const [id, t] of self) {
    const cf = byId.get(id)!.callFrame;
    const g = layer(cf);
    if (g === 'idle' || g === 'profiler') continue;
    busy += t;
    groups.set(g, (groups.get(g) ?? 0) + t);
    const where = cf.url.replace(/^.*\/(node_modules|src)\//, '$1/');
    const k = `${cf.functionName || '(anonymous)'}  ${where}${where ? `:${cf.lineNumber + 1}` : ''}`;
    fns.set(k, (fns.get(k) ?? 0) + t);
  }
  const pct = (t: number) => `${((100 * t) / busy).toFixed(1).padStart(5)}%`;
  const lines = [`busy ${(busy / 1000).toFixed(0)} ms of main-thread time`, '', 'by layer:'];
  for (const [g, t] of [...groups].sort((a, b) => b[1] - a[1])) lines.push(`${pct(t)}  ${g}`);
  lines.push('', 'top functions (self time):');
  for (const [k, t] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(t)}  ${k}`);
  return lines.join('\n');
}

/** A frame of Node's own (its JS internals, natives, V8 builtins): what `--by caller` looks past. */
function isNodeFrame(cf: Node['callFrame']): boolean {
  const g = layer(cf);
  return g.startsWith('node ') || g === 'V8 (program)';
}

function frameName(cf: Node['callFrame']): string {
  const where = cf.url.replace(/^.*\/(node_modules|src)\//, '$1/');
  return `${cf.functionName || '(anonymous)'}  ${where}${where ? `:${cf.lineNumber + 1}` : ''}`;
}

/**
 * Self time of Node's own frames attributed to their nearest caller outside Node: by caller, and
 * by (caller, leaf) pair. GC and idle samples have no caller (V8 puts them under the root).
 */
function byCaller(p: Profile, top: number): string {
  const { byId, parent, self } = indexProfile(p);
  let busy = 0;
  let nodeTotal = 0;
  const callers = new Map<string, number>();
  const pairs = new Map<string, number>();
  for (const [id, t] of self) {
    const cf = byId.get(id)!.callFrame;
    const g = layer(cf);
    if (g === 'idle' || g === 'profiler') continue;
    busy += t;
    if (!isNodeFrame(cf)) continue;
    nodeTotal += t;
    let up = parent.get(id);
    while (up !== undefined && isNodeFrame(byId.get(up)!.callFrame)) up = parent.get(up);
    const callerCf = up === undefined ? undefined : byId.get(up)!.callFrame;
    const caller = !callerCf || callerCf.functionName === '(root)' ? '(no caller outside Node: event loop, timers, I/O callbacks)' : `${frameName(callerCf)}  [${layer(callerCf)}]`;
    callers.set(caller, (callers.get(caller) ?? 0) + t);
    const pair = `${frameName(cf)}  <-  ${caller}`;
    pairs.set(pair, (pairs.get(pair) ?? 0) + t);
  }
  const pct = (t: number) => `${((100 * t) / busy).toFixed(1).padStart(5)}%`;
  const lines = ['', `Node's own frames (node:* layers and V8 builtins), ${pct(nodeTotal).trim()} of busy time, by nearest caller outside Node:`];
  for (const [k, t] of [...callers].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(t)}  ${k}`);
  lines.push('', 'by Node frame <- caller:');
  for (const [k, t] of [...pairs].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(t)}  ${k}`);
  return lines.join('\n');
}

/** Inclusive time per function: each sample counts once for every distinct function on its stack. */
function inclusive(p: Profile, top: number): string {
  const { byId, parent, self } = indexProfile(p);
  let busy = 0;
  const incl = new Map<string, number>();
  for (const [id, t] of self) {
    const g = layer(byId.get(id)!.callFrame);
    if (g === 'idle' || g === 'profiler') continue;
    busy += t;
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const cf = byId.get(at)!.callFrame;
      if (cf.functionName === '(root)') break;
      const k = `${frameName(cf)}  [${layer(cf)}]`;
      if (seen.has(k)) continue;
      seen.add(k);
      incl.set(k, (incl.get(k) ?? 0) + t);
    }
  }
  const pct = (t: number) => `${((100 * t) / busy).toFixed(1).padStart(5)}%`;
  const lines = ['', 'inclusive time (a function and all it calls):'];
  for (const [k, t] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`${pct(t)}  ${k}`);
  return lines.join('\n');
}

/**
 * Self time by area of the work a decision does, each sample charged to the nearest frame on its
 * stack outside Node (as `--by caller` does), so that a buffer copy or `encodeInto` counts for the
 * code that asked for it; protobufjs's generated decoders (`$decode`, `$toObject`: frames without
 * a script URL, which `--by layer` counts as "node other") are an area of their own. What
 * `layer` splits by package this splits by job: body parsing apart from prompt hashing, the prefix
 * index apart from the rest of the route.
 */
function area(byId: Map<number, Node>, parent: Map<number, number>, leaf: number): string {
  const cf0 = byId.get(leaf)!.callFrame;
  const l0 = layer(cf0);
  if (l0 === 'GC' || l0 === 'idle' || l0 === 'profiler' || l0 === 'V8 (program)') return l0;
  const protobuf = (cf: Node['callFrame']) => /\$(decode|toObject|encode|fromObject)$/.test(cf.functionName) || cf.url.includes('protobufjs');
  for (let at: number | undefined = leaf; at !== undefined; at = parent.get(at)) {
    const cf = byId.get(at)!.callFrame;
    if (cf.functionName === '(root)') break;
    if (protobuf(cf)) return 'protobuf decode and encode';
    if (isNodeFrame(cf)) {
      if (layer(cf) === 'node async/microtasks') return 'promises and microtasks';
      continue;
    }
    const u = cf.url.replace('/dist/', '/src/');
    if (/\/src\/request\/(body|json-scan|large-body)\./.test(u)) return 'body: UTF-8 decode and JSON parse';
    if (/\/src\/request\/(prompt-blocks|prompt|hashing)\./.test(u) || u.includes('/src/util/xxhash') || u.includes('xxhash-wasm') || u.startsWith('wasm:')) return 'prompt: canonical text, block hashes';
    if (u.includes('/src/state/prefix-index')) return 'prefix index: walk, record';
    if (u.includes('@grpc/')) return 'grpc-js, Node HTTP/2 and streams';
    const l = layer(cf);
    if (l === 'request: body, keys, hashing') return 'request: keys, headers (the rest)';
    if (l === 'gate.route (policy, store)') return 'route: policy, store (the rest)';
    return l;
  }
  return l0 === 'node http2' || l0 === 'node streams' ? 'grpc-js, Node HTTP/2 and streams' : 'node other (event loop, timers, I/O)';
}

function byArea(p: Profile): string {
  const { byId, parent, self } = indexProfile(p);
  let busy = 0;
  const areas = new Map<string, number>();
  for (const [id, t] of self) {
    const a = area(byId, parent, id);
    if (a === 'idle' || a === 'profiler') continue;
    busy += t;
    areas.set(a, (areas.get(a) ?? 0) + t);
  }
  const pct = (t: number) => `${((100 * t) / busy).toFixed(1).padStart(5)}%`;
  const lines = ['', 'by area (self time, Node frames charged to their caller outside Node):'];
  for (const [k, t] of [...areas].sort((a, b) => b[1] - a[1])) lines.push(`${pct(t)}  ${k}`);
  return lines.join('\n');
}

function report(p: Profile): string {
  const top = Number(values.top);
  const by = values.by!;
  if (by !== 'layer' && by !== 'caller' && by !== 'inclusive' && by !== 'area') throw new Error(`--by ${by}: layer, caller, inclusive or area`);
  return summarise(p, top) + (by === 'caller' ? byCaller(p, top) : by === 'inclusive' ? inclusive(p, top) : by === 'area' ? byArea(p) : '');
}

if (values.summarise) {
  console.log(report(JSON.parse(readFileSync(values.summarise, 'utf8')) as Profile));
  process.exit(0);
}

const bytes = parseSize(values.size!);
const bodyMode = bodyModeFlag(values['body-mode']);
let store = values.store!;
let ownRedis: BenchRedis | undefined;
if (store === 'redis') {
  const bin = findRedisServer();
  if (!bin) throw new Error('--store redis needs redis-server on PATH (or give a URL)');
  ownRedis = await startBenchRedis(bin);
  store = ownRedis.url;
}
const server = await startServer(store === 'memory' || store === 'noop' ? store : 'redis', {
  workers: 16,
  logLevel: 'error',
  ...(store === 'memory' || store === 'noop' ? {} : { redisUrl: store }),
});
const probe = store === 'memory' || store === 'noop' ? undefined : new Redis(store, { lazyConnect: false });

/** Redis's counters now: calls and µs per command, its CPU time, and bytes in and out. */
async function redisCounters(r: Redis): Promise<{ cmds: Map<string, { calls: number; usec: number }>; cpuUs: number; inBytes: number; outBytes: number }> {
  const cmds = commandStats(await r.info('commandstats'));
  const stats = await r.info('stats');
  const num = (k: string) => Number(new RegExp(`^${k}:(\\d+)`, 'm').exec(stats)?.[1] ?? 0);
  return { cmds, cpuUs: redisCpuUs(await r.info('cpu')), inBytes: num('total_net_input_bytes'), outBytes: num('total_net_output_bytes') };
}
const pool = LoadPool.create(1);
const plan = saturationPlan(server, bytes, bodyMode, Number(values.concurrency));
await pool.run({ ...plan, warmupMs: 0, durationMs: 1500 });
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 200 });
const before = probe && (await redisCounters(probe));
if (!values['no-profile']) await session.post('Profiler.start');
// The window in K parts, each with its own CPU figure: on a shared machine a burst of someone
// else's work inflates the parts it lands in (cache, a vCPU's stolen time), and the median part
// is steadier than the whole window's mean.
const parts = Math.max(1, Number(values.windows));
const perPart: number[] = [];
const results: Array<Awaited<ReturnType<typeof pool.run>>> = [];
let cpuTotal: number | undefined = 0;
for (let i = 0; i < parts; i++) {
  const c0 = mainThreadCpuUs();
  const r = await pool.run({ ...plan, warmupMs: 0, durationMs: (Number(values.seconds) * 1000) / parts });
  const c1 = mainThreadCpuUs();
  results.push(r);
  if (c0 === undefined || c1 === undefined || cpuTotal === undefined) cpuTotal = undefined;
  else {
    cpuTotal += c1 - c0;
    perPart.push((c1 - c0) / Math.max(1, r.completed));
  }
}
const completed = results.reduce((a, r) => a + r.completed, 0);
const windowS = results.reduce((a, r) => a + r.windowS, 0);
const w = {
  completed,
  windowS,
  perS: completed / windowS,
  serverElu: results.reduce((a, r) => a + r.serverElu * r.windowS, 0) / windowS,
  errors: results.reduce((a, r) => a + r.errors, 0),
};
const profile = values['no-profile'] ? undefined : ((await session.post('Profiler.stop')) as unknown as { profile: Profile }).profile;
const afterCounters = probe && (await redisCounters(probe));
session.disconnect();
pool.forget(server.target);
await server.close();
await pool.close();
probe?.disconnect();
await ownRedis?.stop();
if (values.out && profile) writeFileSync(values.out, JSON.stringify(profile));
const cpuPerRequest =
  cpuTotal === undefined
    ? ''
    : `, CPU ${Math.round(cpuTotal / w.completed)} µs/request` +
      (parts > 1 ? ` (median of ${parts} parts ${Math.round(median(perPart))}, range ${Math.round(Math.min(...perPart))}-${Math.round(Math.max(...perPart))})` : '');
console.log(`${values.size} ${bodyMode} on ${store === 'memory' || store === 'noop' ? store : 'redis'}: ${w.completed} requests, ${Math.round(w.perS)}/s, server ELU ${w.serverElu.toFixed(2)}, busy ${Math.round((w.serverElu * w.windowS * 1e6) / w.completed)} µs/request${cpuPerRequest}, errors ${w.errors}`);
if (before && afterCounters) {
  // Approximate: the probe's own INFO calls and the gate's timers (refresh, renewals) count too.
  const per = (x: number) => (x / Math.max(1, w.completed)).toFixed(2);
  const rows: Array<[number, string]> = [];
  let calls = 0;
  for (const [name, a] of afterCounters.cmds) {
    const b = before.cmds.get(name) ?? { calls: 0, usec: 0 };
    const dc = a.calls - b.calls;
    if (dc <= 0 || name === 'info') continue;
    calls += dc;
    rows.push([a.usec - b.usec, `  ${name.padEnd(18)} ${per(dc).padStart(7)} calls/request  ${((a.usec - b.usec) / dc).toFixed(1).padStart(8)} µs/call  ${per(a.usec - b.usec).padStart(8)} µs/request`]);
  }
  // A script's µs include those of the commands it ran, which have rows of their own as well.
  console.log(`redis: CPU ${per(afterCounters.cpuUs - before.cpuUs)} µs/request; ${per(calls)} commands/request (scripts' inner calls included), ${per(afterCounters.inBytes - before.inBytes)} bytes in and ${per(afterCounters.outBytes - before.outBytes)} out per request`);
  console.log(rows.sort((x, y) => y[0] - x[0]).map(([, r]) => r).join('\n'));
}
if (profile) console.log(report(profile));
