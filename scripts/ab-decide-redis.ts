/**
 * A/B of the decision script's cost inside Redis, with no gate in the way: the `decide` bindings of
 * two trees (their builds, dist/) run the same synthetic decisions against one throwaway
 * redis-server, each under its own key prefix, in alternating windows; redis-server's CPU over a
 * window (INFO cpu) divided by the window's scripts is that tree's cost per decision. Also prints
 * the commands each tree's scripts run per decision (INFO commandstats).
 *
 *   npx tsx scripts/ab-decide-redis.ts --base /path/to/other/tree [--blocks 8] [--workers 16] [--holders 6] [--rounds 12] [--calls 4000]
 *
 * The workload is the bench's shape (src/bench/bodies.ts): 4 apps whose prompts share their first
 * two blocks (a system prompt) and then differ by session; every decision commits its prompt to one
 * of `--holders` workers of its app's, with no leases released, so each app's first block is held
 * by that many of the pool's workers (the 2 KB bench holds each by 4-7 of 16). A commit is what the
 * gate sends for most requests; reads (refreshes) run the same match.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { findRedisServer, startBenchRedis } from '../src/bench/redis-server.js';
import { commandCalls, redisCpuUs as cpuFromInfo } from './lib/gate-load.js';
import { median } from '../src/util/median.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string' },
    blocks: { type: 'string', default: '8' },
    workers: { type: 'string', default: '16' },
    holders: { type: 'string', default: '6' },
    rounds: { type: 'string', default: '12' },
    calls: { type: 'string', default: '4000' },
  },
});
if (!values.base) throw new Error('--base DIR: the tree to compare with');
const m = Number(values.blocks);
const n = Number(values.workers);
const holders = Number(values.holders);

interface Tree {
  decide: (redis: unknown, keys: unknown, q: unknown, commit?: unknown) => Promise<unknown>;
  keys: unknown;
  redis: Redis;
}
const bin = findRedisServer();
if (!bin) throw new Error('needs redis-server on PATH');
const server = await startBenchRedis(bin);
const probe = new Redis(server.url);
const trees: Tree[] = [];
for (const [i, dir] of [path.resolve(values.base), path.resolve(import.meta.dirname, '..')].entries()) {
  const cmds = (await import(path.join(dir, 'dist/state/redis-commands.js'))) as {
    defineScripts(r: Redis): void;
    PoolKeys: new (prefix: string, pool: string) => unknown;
    decide: Tree['decide'];
  };
  const redis = new Redis(server.url);
  cmds.defineScripts(redis);
  trees.push({ decide: cmds.decide, keys: new cmds.PoolKeys(`ab${i}`, 'pool'), redis });
}
const workers = Array.from({ length: n }, (_, i) => `worker-${i}`);
const hex = (x: number) => x.toString(16).padStart(16, '0');
let seq = 0;
/** One decision: app a's prompt of session s, committed to one of the app's holders. */
function decision(r: number): { q: unknown; commit: unknown } {
  const app = r % 4;
  const session = (r >> 2) % 64;
  const blocks = Array.from({ length: m }, (_, j) => (j < 2 ? hex(0xa000 + app * 16 + j) : hex(0xb0000 + session * 4096 + app * 256 + j)));
  const worker = workers[(app * 4 + ((r >> 8) % holders)) % n]!;
  return {
    q: { workers, key: undefined, blocks },
    commit: {
      worker,
      preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] },
      affinityTtlMs: 60_000,
      leaseMember: `l${seq++}|`,
      leaseTtlMs: 60_000,
      prefixTtlMs: 1_800_000,
      capacityBlocks: 100_000,
      notAfter: 0,
    },
  };
}
async function redisCpuUs(): Promise<number> {
  return cpuFromInfo(await probe.info('cpu'));
}
async function calls(): Promise<Map<string, number>> {
  return commandCalls(await probe.info('commandstats'));
}
/** `count` decisions, 32 in flight. */
async function run(t: Tree, count: number, from: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < count) {
        const { q, commit } = decision(from + next++);
        await t.decide(t.redis, t.keys, q, commit);
      }
    }),
  );
}
const count = Number(values.calls);
for (const t of trees) await run(t, count, 0);
const per: number[][] = [[], []];
const cmds = [new Map<string, number>(), new Map<string, number>()];
for (let r = 0; r < Number(values.rounds); r++) {
  for (const i of r % 2 === 0 ? [0, 1] : [1, 0]) {
    const k0 = await calls();
    const c0 = await redisCpuUs();
    await run(trees[i]!, count, (r + 1) * count);
    const c1 = await redisCpuUs();
    for (const [c, v] of await calls()) cmds[i]!.set(c, (cmds[i]!.get(c) ?? 0) + v - (k0.get(c) ?? 0));
    per[i]!.push((c1 - c0) / count);
  }
  console.log(`round ${r + 1}: base ${per[0]!.at(-1)!.toFixed(1)} this ${per[1]!.at(-1)!.toFixed(1)} µs redis CPU/decision`);
}
console.log(`${m} blocks, ${n} workers, ${holders} holders per app: redis-server base ${median(per[0]!).toFixed(1)}, this ${median(per[1]!).toFixed(1)} µs/decision; this/base per round median ${median(per[1]!.map((x, k) => x / per[0]![k]!)).toFixed(3)}`);
for (const [i, name] of ['base', 'this'].entries()) {
  const rows = [...cmds[i]!].filter(([c, v]) => c !== 'info' && v > 0).sort((a, b) => b[1] - a[1]);
  const d = Number(values.rounds) * count;
  console.log(`${name} commands per decision: ${(rows.reduce((s, [, v]) => s + v, 0) / d).toFixed(1)} (${rows.map(([c, v]) => `${c} ${(v / d).toFixed(2)}`).join(', ')})`);
}
for (const t of trees) t.redis.disconnect();
probe.disconnect();
await server.stop();
