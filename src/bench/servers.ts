/**
 * The servers `kvgate bench` loads: the no-op ceiling, and kvgate itself started in this process
 * exactly as `kvgate serve` starts it (startKvgate), on the memory store or on Redis. For kvgate
 * it also counts what the gate did in the measured window (outcomes, degraded routing, commit
 * retries), so a fast result that was fast because Redis was bypassed shows as such.
 */
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { startKvgate, type RunningKvgate } from '../app.js';
import { parseConfig } from '../config/load.js';
import type { Config } from '../config/schema.js';
import type { GateResult } from '../gate/gate.js';
import { maxMessageBytesFor } from '../extproc/server.js';
import { createLogger } from '../telemetry/logger.js';
import { startNoopServer } from './noop-server.js';

export type TargetName = 'noop' | 'memory' | 'redis';

export interface GateCounts {
  /** Route outcomes (affinity_hit, new, migrated, unkeyed) and rejections by error code. */
  outcomes: Record<string, number>;
  /** Routed on local state because Redis did not answer in time. */
  degraded: number;
  /** Decisions that needed more than one commit (the view was stale). */
  retried: number;
}

export interface ServerUnderTest {
  name: TargetName;
  target: string;
  /** The header a routed body reply sets; undefined for the no-op server. */
  routingHeader: string | undefined;
  /** Starts counting gate results afresh; returns what was counted since the previous call. */
  window(): GateCounts | undefined;
  close(): Promise<void>;
}

/** The fleet the bench gate routes over; limits as a user would leave them (config defaults). */
export function benchConfig(workers: number, keyPrefix: string): Config {
  return parseConfig({
    store: { key_prefix: keyPrefix },
    workers: Array.from({ length: workers }, (_, i) => ({ id: `worker_${i + 1}`, cluster: `worker_${i + 1}` })),
  });
}

let serverSeq = 0;

export async function startServer(name: TargetName, opts: { workers: number; redisUrl?: string; logLevel?: string }): Promise<ServerUnderTest> {
  // A fresh prefix per server so no round starts on another's state, and about as short as the
  // default `kvgate`: every Redis key carries it (each prompt block's), so a long one would count
  // bytes on the wire that a deployment does not send (25 characters added ~25% at 32 KB).
  const keyPrefix = `kvb${(Date.now() % 36 ** 4).toString(36)}${(serverSeq++).toString(36)}`;
  const config = benchConfig(opts.workers, keyPrefix);
  if (name === 'noop') {
    const noop = await startNoopServer(maxMessageBytesFor(config.limits.max_body_bytes));
    return { name, target: `127.0.0.1:${noop.port}`, routingHeader: undefined, window: () => undefined, close: () => noop.close() };
  }
  if (name === 'redis' && !opts.redisUrl) throw new Error('the redis target needs a Redis URL');
  let counts: GateCounts = { outcomes: {}, degraded: 0, retried: 0 };
  const onResult = (r: GateResult) => {
    const k = r.kind === 'route' ? r.outcome : `rejected_${r.error.code}`;
    counts.outcomes[k] = (counts.outcomes[k] ?? 0) + 1;
    if (r.kind === 'route') {
      if (r.degraded) counts.degraded++;
      if (r.attempts > 1) counts.retried++;
    }
  };
  // Logs go to stderr so `--json` keeps stdout to itself; warnings and worse only.
  const logger = createLogger(opts.logLevel ?? 'warn', pino.destination({ fd: 2, sync: false }));
  const gate: RunningKvgate = await startKvgate({
    config,
    logger,
    store: name === 'memory' ? 'memory' : opts.redisUrl!,
    grpcHost: '127.0.0.1',
    grpcPort: 0,
    adminHost: '127.0.0.1',
    adminPort: 0,
    onResult,
  });
  return {
    name,
    target: `127.0.0.1:${gate.grpcPort}`,
    routingHeader: config.routing.header,
    window: () => {
      const c = counts;
      counts = { outcomes: {}, degraded: 0, retried: 0 };
      return c;
    },
    close: async () => {
      await gate.close(2000);
      if (name === 'redis') await deleteKeys(opts.redisUrl!, keyPrefix);
    },
  };
}

/** Leaves a shared Redis (`--redis URL`) as the run found it: every key the bench gate wrote goes. */
async function deleteKeys(url: string, keyPrefix: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  // A Redis already gone: connect() rejects, which is handled below; without a listener ioredis
  // also printed the same error as "Unhandled error event".
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${keyPrefix}:*`, 'COUNT', 1000);
      if (keys.length > 0) await redis.unlink(...keys);
      cursor = next;
    } while (cursor !== '0');
  } catch {
    // Best effort: the keys carry TTLs (affinity.ttl_s, leases.ttl_s) and expire anyway.
  } finally {
    redis.disconnect();
  }
}
