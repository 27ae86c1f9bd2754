/**
 * Assembles a running gate from a config: hashing, store, gate, ext_proc server, admin server.
 * The CLI's `serve` and the tests both start kvgate through `startKvgate`, so tests exercise the
 * same wiring users run.
 */
import type { Logger } from 'pino';
import { AdminServer } from './admin/server.js';
import type { Config } from './config/schema.js';
import { ExtProcServer } from './extproc/server.js';
import { Gate, type GateResult } from './gate/gate.js';
import { initHashing } from './request/hashing.js';
import { SignalCollector } from './signals/collector.js';
import { createStore, describeStore } from './state/create-store.js';
import { RedisStore } from './state/redis-store.js';
import type { RoutingStore } from './state/store.js';

export interface StartOptions {
  config: Config;
  logger: Logger;
  /** `memory` or a redis:// / rediss:// URL. */
  store: string;
  grpcHost: string;
  grpcPort: number;
  adminHost: string;
  adminPort: number;
  onResult?: (result: GateResult) => void;
}

export interface RunningKvgate {
  grpcPort: number;
  adminPort: number;
  gate: Gate;
  store: RoutingStore;
  extproc: ExtProcServer;
  collector: SignalCollector;
  /** Drains open streams for up to `graceMs`, then stops everything. */
  close(graceMs?: number): Promise<void>;
}

/** How long startup waits for Redis before serving degraded (routing on local state). */
const STORE_STARTUP_WAIT_MS = 3000;

export async function startKvgate(opts: StartOptions): Promise<RunningKvgate> {
  const { config, logger } = opts;
  await initHashing();
  const store = createStore(opts.store, config, logger);
  if (store instanceof RedisStore && !(await store.waitReady(STORE_STARTUP_WAIT_MS))) {
    logger.error({ store: describeStore(opts.store) }, 'redis not reachable at startup; routing on local state until it is');
  }
  const gate = new Gate(config, store, logger.child({ component: 'gate' }));
  const extproc = new ExtProcServer({
    gate,
    logger: logger.child({ component: 'extproc' }),
    // Envoy's BUFFERED body plus its headers, which are small next to it.
    maxMessageBytes: config.limits.max_body_bytes + 1024 * 1024,
    ...(opts.onResult ? { onResult: opts.onResult } : {}),
  });
  const isReady = async () => {
    try {
      await store.ping();
      return true;
    } catch {
      return false;
    }
  };
  const admin = new AdminServer({ gate, logger: logger.child({ component: 'admin' }), isReady });
  let grpcPort: number;
  let adminPort: number;
  try {
    grpcPort = await extproc.listen(opts.grpcHost, opts.grpcPort);
    adminPort = await admin.listen(opts.adminHost, opts.adminPort);
  } catch (err) {
    await extproc.shutdown(0);
    await store.close();
    throw err;
  }
  // Workers with metrics count as down until their first scrape: read them once before serving.
  const collector = new SignalCollector({ gate, store, logger: logger.child({ component: 'signals' }) });
  await collector.start();
  extproc.setServing(true);
  logger.info({ grpcPort, adminPort, store: describeStore(opts.store), workers: config.workers.length }, 'kvgate serving');
  let closing: Promise<void> | undefined;
  return {
    grpcPort,
    adminPort,
    gate,
    store,
    extproc,
    collector,
    close(graceMs = 5000) {
      closing ??= (async () => {
        collector.stop();
        await extproc.shutdown(graceMs);
        await admin.close();
        await store.close();
      })();
      return closing;
    },
  };
}
