/**
 * How the gate's throughput grows with processes: K kvgate processes (each `startKvgate` on its
 * own gRPC port, all on one Redis, as K replicas of a deployment are), loaded at saturation by
 * the bench's client threads (one per process), next to K no-op servers in K processes loaded the
 * same way. Prints decisions/s for each K and the gate's ratio to the no-op at that K: the same
 * ratio at every K means the gate scales as the transport itself does on this machine.
 *
 *   npx tsx scripts/scale-gate.ts [--procs 1,2] [--size 2k] [--seconds 3] [--rounds 3]
 */
import { fork, type ChildProcess } from 'node:child_process';
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
  const bytes = parseSize(values.size!);
  const seconds = Number(values.seconds);
  const concurrency = Number(values.concurrency);
  const results: string[] = [];
  for (const k of values.procs!.split(',').map(Number)) {
    const perKind: Record<string, number[]> = { noop: [], redis: [] };
    const servers = { noop: await Promise.all(Array.from({ length: k }, () => spawnServer('noop'))), redis: await Promise.all(Array.from({ length: k }, () => spawnServer('redis'))) };
    const pools = Array.from({ length: k }, () => LoadPool.create(1));
    const load = async (kind: 'noop' | 'redis', ms: number) => {
      const ws = await Promise.all(
        servers[kind].map((s, i) =>
          pools[i]!.run({ target: s.target, bodyBytes: bytes, seed: 1 + i, ...(s.header ? { expectHeader: s.header } : {}), mode: 'closed', concurrency: Math.ceil(concurrency / k), warmupMs: 200, durationMs: ms }),
        ),
      );
      return { perS: ws.reduce((a, w) => a + w.perS, 0), errors: ws.reduce((a, w) => a + w.errors, 0) };
    };
    await load('noop', 500);
    await load('redis', 500);
    for (let r = 0; r < Number(values.rounds); r++) {
      for (const kind of ['noop', 'redis'] as const) {
        const w = await load(kind, seconds * 1000);
        if (w.errors > 0) throw new Error(`${kind}: ${w.errors} errors`);
        perKind[kind]!.push(w.perS);
      }
    }
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    const ratios = perKind.redis!.map((x, i) => x / perKind.noop![i]!);
    results.push(`${k} process(es), ${values.size}: no-op ${Math.round(med(perKind.noop!))}/s, kvgate on Redis ${Math.round(med(perKind.redis!))}/s, ratio ${med(ratios).toFixed(2)} (rounds ${ratios.map((x) => x.toFixed(2)).join(' ')})`);
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
