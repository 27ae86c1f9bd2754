/**
 * Garbage per request of the gate under `kvgate bench`'s load: the gate on the memory store (or
 * the no-op ceiling), loaded at saturation by the bench's client thread (its own heap: only the
 * gate's main thread is sampled), with V8's sampling heap profiler keeping the samples of objects
 * already collected as well (so it counts everything allocated, not only what is still alive).
 * Prints the estimated bytes allocated per request and the allocation sites that allocate most,
 * self (the function that allocated) and inclusive (a function and all it calls).
 *
 *   npx tsx scripts/alloc-gate.ts [--size 2k] [--body-mode buffered|full_duplex] [--store memory|noop] [--seconds 3] [--top 30] [--compiled]
 *
 * Sampling: one sample per `--interval` bytes (default 4096) on average, scaled back up by V8, so
 * the totals are estimates; compare sites, and runs with many thousand requests.
 */
import { Session } from 'node:inspector/promises';
import { parseArgs } from 'node:util';
import { parseSize } from '../src/bench/bodies.js';
import type * as LoadPoolModule from '../src/bench/load-pool.js';
import type * as ServersModule from '../src/bench/servers.js';
import { bodyModeFlag, saturationPlan } from './lib/gate-load.js';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: '2k' },
    'body-mode': { type: 'string', default: 'buffered' },
    store: { type: 'string', default: 'memory' },
    seconds: { type: 'string', default: '3' },
    top: { type: 'string', default: '30' },
    interval: { type: 'string', default: '4096' },
    compiled: { type: 'boolean', default: false },
  },
});

const from = (m: string) => (values.compiled ? new URL(`../dist/${m}.js`, import.meta.url).href : `../src/${m}.js`);
const { LoadPool } = (await import(from('bench/load-pool'))) as typeof LoadPoolModule;
const { startServer } = (await import(from('bench/servers'))) as typeof ServersModule;

interface HeapNode { callFrame: { functionName: string; url: string; lineNumber: number }; selfSize: number; id: number; children: HeapNode[] }

const store = values.store as 'memory' | 'noop';
const server = await startServer(store, { workers: 16, logLevel: 'error' });
const pool = LoadPool.create(1);
const plan = saturationPlan(server, parseSize(values.size!), bodyModeFlag(values['body-mode']));
await pool.run({ ...plan, warmupMs: 0, durationMs: 1500 });
const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
await session.post('HeapProfiler.startSampling', {
  samplingInterval: Number(values.interval),
  includeObjectsCollectedByMajorGC: true,
  includeObjectsCollectedByMinorGC: true,
} as never);
const r = await pool.run({ ...plan, warmupMs: 0, durationMs: Number(values.seconds) * 1000 });
const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: HeapNode } };
session.disconnect();
pool.forget(server.target);
await server.close();
await pool.close();

const name = (cf: HeapNode['callFrame']) => {
  const where = cf.url.replace(/^.*\/(node_modules|src|dist)\//, '$1/');
  return `${cf.functionName || '(anonymous)'}  ${where}${where ? `:${cf.lineNumber + 1}` : ''}`;
};
const self = new Map<string, number>();
const incl = new Map<string, number>();
let total = 0;
function walk(n: HeapNode, stack: string[]): number {
  const k = name(n.callFrame);
  let sub = n.selfSize;
  total += n.selfSize;
  if (n.selfSize > 0) self.set(k, (self.get(k) ?? 0) + n.selfSize);
  const inner = [...stack, k];
  for (const c of n.children) sub += walk(c, inner);
  // Counted once per stack even when the function recurs.
  if (!stack.includes(k)) incl.set(k, (incl.get(k) ?? 0) + sub);
  return sub;
}
walk(profile.head, []);
const per = (b: number) => `${(b / r.completed).toFixed(0).padStart(8)} B/req`;
console.log(`${values.size} on ${store}${values.compiled ? ' (compiled)' : ''}: ${r.completed} requests, errors ${r.errors}, allocated ≈ ${(total / r.completed).toFixed(0)} bytes/request`);
const top = Number(values.top);
console.log('\nself (the allocating frame):');
for (const [k, b] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${per(b)}  ${k}`);
console.log('\ninclusive:');
for (const [k, b] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${per(b)}  ${k}`);
