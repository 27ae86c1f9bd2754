// Soak: N minutes of steady load through a kvgate process on the Redis store, played by the Envoy
// test harness, sampling every interval the gate's RSS, V8 heap and open file descriptors, Redis's memory
// and key count, in-flight leases, throughput and errors. Results go to stdout (a Markdown table)
// and, with --out, to a JSON file. Exit status 1 if any request failed or anything leaked.
//
//   npx tsx scripts/soak.ts [--minutes 1] [--sample-s 60] [--rate 200] [--concurrency 16]
//                           [--sessions 2000] [--redis redis://…] [--bounce-redis] [--out file.json]
//
// It starts its own redis-server (unless --redis) and gate on free ports: never a fixed port.
// The load: 70% chats on one of --sessions session ids, 20% chats sharing one of 20 system
// prompts (prefix keys), 10% body-less requests; 2% are cancelled mid-request (an Envoy reset);
// the simulated worker answers in 5-50 ms. --bounce-redis kills Redis at mid-run and starts it
// again 5 s later (empty), to watch recovery under the same load.
// Linux: RSS and descriptors come from /proc/<pid>.

import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { chat, harness, headersMsg } from '../test/helpers/envoy.js';
import { startGateProcess, writeConfig } from '../test/helpers/gate-process.js';
import { problemWith } from '../test/helpers/load.js';
import { startRedis, type TestRedis } from '../test/helpers/redis-server.js';

const { values: opts } = parseArgs({
  options: {
    minutes: { type: 'string', default: '1' },
    'sample-s': { type: 'string', default: '60' },
    rate: { type: 'string', default: '200' },
    concurrency: { type: 'string', default: '16' },
    sessions: { type: 'string', default: '2000' },
    redis: { type: 'string' },
    'bounce-redis': { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});
const MINUTES = Number(opts.minutes);
const SAMPLE_MS = Number(opts['sample-s']) * 1000;
const RATE = Number(opts.rate);
const CONCURRENCY = Number(opts.concurrency);
const SESSIONS = Number(opts.sessions);

const WORKERS = [1, 2, 3].map((i) => ({ id: `worker_${i}`, cluster: `worker_${i}`, max_inflight: 64 }));
const SYSTEM_PROMPTS = Array.from({ length: 20 }, (_, i) => `You are assistant ${i}. ${'Follow the house style guide carefully. '.repeat(40)}`);

interface Sample {
  minute: number;
  requests: number;
  answered: number;
  errors: number;
  rps: number;
  gateRssMb: number;
  /** V8 heap in use (prom-client's nodejs_heap_size_used_bytes from the admin port): a leak climbs here first. */
  gateHeapMb: number;
  gateFds: number;
  redisUsedMb: number;
  redisKeys: number;
  inflight: number;
  /** Machine load average (1 min) and the driver's worst event-loop delay since the last sample: a stalled machine shows here. */
  load1: number;
  driverLagMaxMs: number;
}

function procStatus(pid: number): { rssMb: number; fds: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  return { rssMb: rssKb / 1024, fds: readdirSync(`/proc/${pid}/fd`).length };
}

async function main(): Promise<number> {
  let ownRedis: TestRedis | undefined;
  const redisUrl = opts.redis ?? (ownRedis = await startRedis()).url;
  const config = writeConfig({ store: { timeout_ms: 50, refresh_ms: 250 }, leases: { ttl_s: 10 }, workers: WORKERS });
  const gate = await startGateProcess(['--config', config, '--store', redisUrl]);
  const h = harness(gate.target);
  const r = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  const pid = gate.proc.pid!;

  const tally = { requests: 0, answered: 0, errors: 0, problems: [] as string[], kinds: new Map<string, number>() };
  const failed = (kind: string, detail: string) => {
    tally.errors++;
    tally.kinds.set(kind, (tally.kinds.get(kind) ?? 0) + 1);
    if (tally.problems.length < 20) tally.problems.push(detail);
  };
  let running = true;
  const started = Date.now();
  const endAt = started + MINUTES * 60_000;

  const inflight = async () => {
    let n = 0;
    for (const w of WORKERS) n += await r.zcard(`kvgate:{default}:f:${w.id}`).catch(() => 0);
    return n;
  };
  const gateHeapMb = async (): Promise<number> => {
    try {
      const text = await (await fetch(`http://127.0.0.1:${gate.adminPort}/metrics`)).text();
      const m = /^nodejs_heap_size_used_bytes (\S+)/m.exec(text);
      return m ? Math.round((Number(m[1]) / 1048576) * 10) / 10 : -1;
    } catch {
      return -1;
    }
  };
  const samples: Sample[] = [];
  const lag = monitorEventLoopDelay({ resolution: 10 });
  lag.enable();
  let lastCount = 0;
  let lastAt = started;
  const sample = async () => {
    // Counts are read with the clock, before any await: a sample that then waits on a dead Redis
    // must not count the requests made meanwhile against the interval it closes.
    const now = Date.now();
    const { requests, answered, errors } = tally;
    const { rssMb, fds } = procStatus(pid);
    const heapMb = await gateHeapMb();
    const mem = await r.info('memory').catch(() => '');
    samples.push({
      minute: Math.round(((now - started) / 60_000) * 100) / 100,
      requests,
      answered,
      errors,
      rps: Math.round(((requests - lastCount) * 1000) / Math.max(1, now - lastAt)),
      gateRssMb: Math.round(rssMb * 10) / 10,
      gateHeapMb: heapMb,
      gateFds: fds,
      redisUsedMb: Math.round((Number(/used_memory:(\d+)/.exec(mem)?.[1] ?? 0) / 1048576) * 10) / 10,
      redisKeys: await r.dbsize().catch(() => -1),
      inflight: await inflight(),
      load1: Math.round(os.loadavg()[0]! * 10) / 10,
      driverLagMaxMs: Math.round(lag.max / 1e6),
    });
    lag.reset();
    lastCount = requests;
    lastAt = now;
    process.stderr.write(`soak ${JSON.stringify(samples.at(-1))}\n`);
  };

  const one = async (n: number) => {
    const roll = n % 50;
    tally.requests++;
    try {
      if (roll === 0) {
        // An Envoy reset mid-request: the lease must come back without a response.
        const s = h.openRawStream();
        s.write(headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions', 'x-session-id': `s-${n % SESSIONS}` }, false) as never);
        await s.next(1000);
        s.cancel();
        tally.answered++;
        return;
      }
      const req =
        roll < 35 ? chat({ session: `s-${n % SESSIONS}`, text: `turn ${n}` })
        : roll < 45 ? chat({ system: SYSTEM_PROMPTS[n % SYSTEM_PROMPTS.length]!, text: `question ${n}` })
        : { method: 'GET', path: '/v1/models' };
      const out = await h.request(req, { status: 200, body: '{}', latencyMs: 5 + (n % 46) });
      const problem = problemWith(out);
      if (!problem) tally.answered++;
      else if (out.stats?.messageTimeouts) failed('message timeout (Envoy gave up waiting, fail-open)', problem);
      else if (out.stats?.streamsFailed) failed('ext_proc stream failed', problem);
      else failed('other', problem);
    } catch (err) {
      failed('threw', `threw ${(err as Error).message}`);
    }
  };

  let n = 0;
  const client = async (c: number) => {
    const interval = (CONCURRENCY * 1000) / RATE;
    let next = Date.now() + (c * interval) / CONCURRENCY;
    while (running && Date.now() < endAt) {
      const wait = next - Date.now();
      if (wait > 0) await new Promise((res) => setTimeout(res, wait));
      next += interval;
      await one(n++);
    }
  };

  await sample();
  const sampler = setInterval(() => void sample(), SAMPLE_MS);
  let bounce: NodeJS.Timeout | undefined;
  if (opts['bounce-redis'] && ownRedis) {
    const redis = ownRedis;
    bounce = setTimeout(() => {
      process.stderr.write('soak: killing redis\n');
      void redis.kill().then(() => setTimeout(() => void redis.restart().then(() => process.stderr.write('soak: redis restarted\n')), 5000));
    }, (MINUTES * 60_000) / 2);
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, (_, c) => client(c)));
  running = false;
  clearInterval(sampler);
  clearTimeout(bounce);
  lag.disable();

  // Drained: every lease back, descriptors back near where they started.
  const drainUntil = Date.now() + 15_000;
  while ((await inflight()) > 0 && Date.now() < drainUntil) await new Promise((res) => setTimeout(res, 200));
  await sample();

  h.close();
  r.disconnect();
  await gate.stop();
  await ownRedis?.stop();

  // The gate's own warnings and errors, by message (Redis outages log at most one line a second).
  const warnings = new Map<string, number>();
  for (const l of gate.lines) {
    if (Number(l['level']) < 40) continue;
    const key = `${String(l['msg'])}${l['err'] ? `: ${String(l['err'])}` : ''}`;
    warnings.set(key, (warnings.get(key) ?? 0) + 1);
  }
  const first = samples[0]!;
  const last = samples.at(-1)!;
  const leaked = last.inflight !== 0 || last.gateFds > first.gateFds + 4;
  const lines = [
    `soak: ${MINUTES} min, target ${RATE} req/s over ${CONCURRENCY} clients, ${SESSIONS} sessions, Redis store${opts['bounce-redis'] ? ', Redis killed and restarted at mid-run' : ''}`,
    '',
    '| minute | requests | errors | req/s | gate RSS MB | gate heap MB | gate fds | Redis MB | Redis keys | in flight | load avg | driver lag max ms |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...samples.map(
      (s) => `| ${s.minute} | ${s.requests} | ${s.errors} | ${s.rps} | ${s.gateRssMb} | ${s.gateHeapMb} | ${s.gateFds} | ${s.redisUsedMb} | ${s.redisKeys} | ${s.inflight} | ${s.load1} | ${s.driverLagMaxMs} |`,
    ),
    '',
    ...(tally.kinds.size > 0 ? ['errors by kind:', ...[...tally.kinds].map(([k, c]) => `  ${c} × ${k}`), ''] : []),
    ...(warnings.size > 0 ? ['gate warnings:', ...[...warnings].map(([m, c]) => `  ${c} × ${m}`), ''] : []),
    `result: ${tally.errors === 0 && !leaked ? 'PASS' : 'FAIL'} (${tally.errors} errors of ${tally.requests}; in flight after drain ${last.inflight}; gate fds ${first.gateFds} → ${last.gateFds})`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  if (opts.out) {
    writeFileSync(opts.out, JSON.stringify({ options: opts, samples, errors: tally.errors, kinds: Object.fromEntries(tally.kinds), problems: tally.problems }, null, 2));
  }
  return tally.errors === 0 && !leaked ? 0 : 1;
}

process.exitCode = await main();
