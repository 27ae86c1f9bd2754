/**
 * How the gate's throughput grows with processes: K kvgate processes (each `startKvgate` on its
 * own gRPC port, all on one Redis, as K replicas of a deployment are), loaded at saturation by
 * the bench's client threads (one per process), next to K no-op servers in K processes loaded the
 * same way. Prints decisions/s for each K and the gate's ratio to the no-op at that K: the same
 * ratio at every K means the gate scales as the transport itself does on this machine.
 *
 * It also prints the CPU each decision cost, from /proc (Linux): the K gate processes' together,
 * and redis-server's. Where the cores are all busy (two CPUs: the client threads, the servers and
 * Redis share them) throughput cannot grow with K, but CPU per decision can still say whether it
 * would: if it stays flat from 1 process to 2, nothing the processes share but Redis costs more,
 * and K processes on K free cores decide K times as much until Redis's own CPU runs out.
 *
 *   npx tsx scripts/scale-gate.ts [--procs 1,2] [--size 2k] [--seconds 3] [--rounds 3]
 */
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseSize } from '../src/bench/bodies.js';
import { LoadPool } from '../src/bench/load-pool.js';
import { findRedisServer, startBenchRedis } from '../src/bench/redis-server.js';
import { startServer, type TargetName } from '../src/bench/servers.js';

const { values } = parseArgs({
  options: {
    child: { type: 'string' },
    redis: { type: 'string' },
    procs: { type: 'string', default: '1,2' },
    size: { type: 'string', default: '2k' },
    seconds: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '64' },
  },
});

if (values.child) {
  // One server in this process; tells the parent where it listens, stops on disconnect.
  const s = await startServer(values.child as TargetName, { workers: 16, logLevel: 'error', ...(values.redis ? { redisUrl: values.redis } : {}) });
  process.send!({ target: s.target, header: s.routingHeader ?? null });
  process.on('disconnect', () => void s.close().finally(() => process.exit(0)));
} else {
  const bin = findRedisServer();
  if (!bin) throw new Error('needs redis-server on PATH');
  const redis = await startBenchRedis(bin);
  const self = fileURLToPath(import.meta.url);
  const spawnServer = (kind: TargetName) =>
    new Promise<{ child: ChildProcess; target: string; header: string | undefined }>((resolve, reject) => {
      const child = fork(self, ['--child', kind, '--redis', redis.url], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      child.once('message', (m: { target: string; header: string | null }) => resolve({ child, target: m.target, header: m.header ?? undefined }));
      child.once('exit', (code) => reject(new Error(`server exited ${code}`)));
      child.once('message', () => child.removeAllListeners('exit'));
    });
  // CPU time (user + system) of a process so far, in µs, from /proc/<pid>/stat (fields 14 and 15, clock ticks).
  const ticksPerS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  const cpuUs = (pid: number | undefined): number => {
    if (pid === undefined) return 0;
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) / ticksPerS) * 1e6;
  };
  const bytes = parseSize(values.size!);
  const WARMUP_MS = 200;
  const seconds = Number(values.seconds);
  const concurrency = Number(values.concurrency);
  const results: string[] = [];
  for (const k of values.procs!.split(',').map(Number)) {
    const perKind: Record<string, number[]> = { noop: [], redis: [] };
    // CPU µs per decision in each measured round: the K servers together, and redis-server.
    const cpu: Record<string, { servers: number[]; redis: number[] }> = { noop: { servers: [], redis: [] }, redis: { servers: [], redis: [] } };
    const servers = { noop: await Promise.all(Array.from({ length: k }, () => spawnServer('noop'))), redis: await Promise.all(Array.from({ length: k }, () => spawnServer('redis'))) };
    const pools = Array.from({ length: k }, () => LoadPool.create(1));
    const load = async (kind: 'noop' | 'redis', ms: number) => {
      const ws = await Promise.all(
        servers[kind].map((s, i) =>
          pools[i]!.run({ target: s.target, bodyBytes: bytes, seed: 1 + i, ...(s.header ? { expectHeader: s.header } : {}), mode: 'closed', concurrency: Math.ceil(concurrency / k), warmupMs: WARMUP_MS, durationMs: ms }),
        ),
      );
      return { perS: ws.reduce((a, w) => a + w.perS, 0), errors: ws.reduce((a, w) => a + w.errors, 0) };
    };
    const serversCpu = (kind: 'noop' | 'redis') => servers[kind].reduce((a, s) => a + cpuUs(s.child.pid), 0);
    await load('noop', 500);
    await load('redis', 500);
    for (let r = 0; r < Number(values.rounds); r++) {
      for (const kind of ['noop', 'redis'] as const) {
        const before = { servers: serversCpu(kind), redis: cpuUs(redis.pid) };
        const w = await load(kind, seconds * 1000);
        if (w.errors > 0) throw new Error(`${kind}: ${w.errors} errors`);
        perKind[kind]!.push(w.perS);
        // CPU is read around the whole run, its 200 ms warm-up included: per request of the run,
        // the warm-up's counted at the window's rate.
        const requests = w.perS * (seconds + WARMUP_MS / 1000);
        cpu[kind]!.servers.push((serversCpu(kind) - before.servers) / requests);
        cpu[kind]!.redis.push((cpuUs(redis.pid) - before.redis) / requests);
      }
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    const ratios = perKind.redis!.map((x, i) => x / perKind.noop![i]!);
    results.push(
      `${k} process(es), ${values.size}: no-op ${Math.round(med(perKind.noop!))}/s, kvgate on Redis ${Math.round(med(perKind.redis!))}/s, ratio ${med(ratios).toFixed(2)} (rounds ${ratios.map((x) => x.toFixed(2)).join(' ')}); ` +
        `CPU per decision: gate processes ${Math.round(med(cpu.redis!.servers))} µs + redis-server ${Math.round(med(cpu.redis!.redis))} µs, no-op processes ${Math.round(med(cpu.noop!.servers))} µs`,
    );
    console.log(results.at(-1));
    for (const p of pools) await p.close();
    // Servers stop (and close their Redis connections) before the next K starts or Redis stops.
    await Promise.all(
      [...servers.noop, ...servers.redis].map(
        (s) =>
          new Promise<void>((resolve) => {
            s.child.once('exit', () => resolve());
            s.child.disconnect();
          }),
      ),
    );
  }
  await redis.stop();
  console.log(results.join('\n'));
}
