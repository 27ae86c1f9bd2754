/**
 * Assembles a running gate from a config: hashing, store, gate, ext_proc server, admin server.
 * The CLI's `serve` and the tests both start kvgate through `startKvgate`, so tests exercise the
 * same wiring users run.
 */
import type { Logger } from 'pino';
import { AdminServer } from './admin/server.js';
import { ConfigReloader, type ReloadOutcome, type ReloadTrigger } from './config/reload.js';
import type { Config } from './config/schema.js';
import { ExtProcServer } from './extproc/server.js';
import { Gate, type GateResult } from './gate/gate.js';
import { initHashing } from './request/hashing.js';
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
  /**
   * The file `config` came from. When given, it is watched and re-read on change (and by
   * `reload()`, which the CLI calls on SIGHUP); a valid new config replaces the running one.
   */
  configFile?: string;
  /** Quiet time before a changed file is re-read (tests shorten it). */
  reloadDebounceMs?: number;
}

export interface RunningKvgate {
  grpcPort: number;
  adminPort: number;
  gate: Gate;
  store: RoutingStore;
  extproc: ExtProcServer;
  /** Re-reads the config file now (no-op 'unchanged' without one). */
  reload(trigger: ReloadTrigger): ReloadOutcome;
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
  const reloader = opts.configFile
    ? new ConfigReloader({
        file: opts.configFile,
        logger: logger.child({ component: 'config' }),
        current: () => gate.currentConfig,
        apply: (next) => gate.reconfigure(next),
        ...(opts.reloadDebounceMs !== undefined ? { debounceMs: opts.reloadDebounceMs } : {}),
      })
    : undefined;
  reloader?.watch();
  extproc.setServing(true);
  logger.info({ grpcPort, adminPort, store: describeStore(opts.store), pools: config.pools.length, workers: config.workers.length }, 'kvgate serving');
  let closing: Promise<void> | undefined;
  return {
    grpcPort,
    adminPort,
    gate,
    store,
    extproc,
    reload(trigger) {
      return reloader ? reloader.reload(trigger) : 'unchanged';
    },
    close(graceMs = 5000) {
      closing ??= (async () => {
        reloader?.close();
        await extproc.shutdown(graceMs);
        await admin.close();
        await store.close();
      })();
      return closing;
    },
  };
}
