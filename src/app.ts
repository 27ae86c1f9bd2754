/**
 * Assembles a running gate from a config: hashing, store, gate, ext_proc server, admin server,
 * metrics and readiness. The CLI's `serve` and the tests both start kvgate through `startKvgate`,
 * so tests exercise the same wiring users run. (Span export is process-wide and started by the
 * CLI: src/telemetry/tracing.ts.)
 */
import net from 'node:net';
import type { Logger } from 'pino';
import { KvgateError } from './errors.js';
import { AdminServer } from './admin/server.js';
import { DEFAULTS } from './config/defaults.js';
import { ConfigReloader, type ReloadOutcome, type ReloadTrigger } from './config/reload.js';
import type { Config } from './config/schema.js';
import { serverCredentials } from './extproc/credentials.js';
import { ExtProcServer, maxMessageBytesFor } from './extproc/server.js';
import { Gate, type GateResult } from './gate/gate.js';
import type { Pool } from './gate/pools.js';
import { Readiness, unreachableReason } from './health/readiness.js';
import { initHashing, MIN_SESSION_HASH_KEY_BYTES, UNKEYED_PREVIOUS } from './request/hashing.js';
import { SignalCollector } from './signals/collector.js';
import { createStore, describeStore, readPem, type StoreTlsFiles } from './state/create-store.js';
import type { RedisStore } from './state/redis-store.js';
import type { RoutingStore } from './state/store.js';
import { InstrumentedStore } from './telemetry/instrumented-store.js';
import { droppedLogLines } from './telemetry/logger.js';
import { Metrics } from './telemetry/metrics.js';
import { installTraceContext } from './telemetry/tracing.js';

export interface StartOptions {
  config: Config;
  logger: Logger;
  /** `memory` or a Redis URL (redis://, rediss://, redis+cluster://, rediss+cluster://). */
  store: string;
  /** PEM files for TLS to Redis: a CA to trust, a client certificate and key. */
  storeTls?: StoreTlsFiles;
  /** PEM files for the ext_proc server: certificate and key = TLS; plus a client CA = mTLS. */
  tls?: GrpcTlsFiles;
  grpcHost: string;
  grpcPort: number;
  adminHost: string;
  adminPort: number;
  /** Bearer token the admin API's state changes require (none: open to whoever reaches the port). */
  adminToken?: string;
  /**
   * Key for hashing session ids (HMAC-SHA-256), the same on every replica; none: plain SHA-256.
   * At least MIN_SESSION_HASH_KEY_BYTES bytes (UTF-8), else the start fails.
   */
  sessionHashKey?: string;
  /**
   * The session hash key before `sessionHashKey`, during a rotation: sessions and stored responses
   * recorded under it are found and placed again under the current key. Same length rule.
   */
  sessionHashKeyPrevious?: string;
  onResult?: (result: GateResult) => void;
  /** FULL_DUPLEX_STREAMED: how long a request body is waited for (default DEFAULTS.fullDuplexBodyWaitMs; tests shorten it). */
  fullDuplexBodyWaitMs?: number;
  /** How long an Envoy connection is used before it is retired (default DEFAULTS.connectionAgeMs; tests shorten it). */
  connectionAgeMs?: number;
  /** How many streams an Envoy connection carries before it is retired (default DEFAULTS.connectionMaxStreams; tests lower it). */
  connectionMaxStreams?: number;
  /** Node's process metrics on /metrics (default true; tests that start many gates turn them off). */
  processMetrics?: boolean;
  /**
   * The file `config` came from. When given, it is watched and re-read on change (and by
   * `reload()`, which the CLI calls on SIGHUP); a valid new config replaces the running one.
   */
  configFile?: string;
  /** Quiet time before a changed file is re-read (tests shorten it). */
  reloadDebounceMs?: number;
}

export interface GrpcTlsFiles {
  certFile?: string;
  keyFile?: string;
  clientCaFile?: string;
}

export interface RunningKvgate {
  grpcPort: number;
  adminPort: number;
  gate: Gate;
  store: RoutingStore;
  extproc: ExtProcServer;
  collector: SignalCollector<Pool>;
  metrics: Metrics;
  readiness: Readiness;
  /** Re-reads the config file now (no-op 'unchanged' without one). */
  reload(trigger: ReloadTrigger): ReloadOutcome;
  /**
   * Reports not ready at once, keeps serving for `delayMs` (proxies move away meanwhile), then
   * drains open streams for up to `graceMs` and stops everything.
   */
  close(graceMs?: number, delayMs?: number): Promise<void>;
}

/**
 * The session hash key as bytes, or undefined for none (unset or empty: an optional Secret that
 * is absent reads as empty). A key too short to be unguessable is refused: it would give hashes
 * that look protected and are not.
 */
function sessionHashKeyOf(key: string | undefined, named = 'the session hash key (--session-hash-key, KVGATE_SESSION_HASH_KEY)'): Uint8Array | undefined {
  if (key === undefined || key === '') return undefined;
  const bytes = Buffer.from(key, 'utf8');
  if (bytes.length < MIN_SESSION_HASH_KEY_BYTES) {
    throw new KvgateError('invalid_config', `${named} has ${bytes.length} bytes; it needs at least ${MIN_SESSION_HASH_KEY_BYTES} random ones (e.g. openssl rand -hex 32)`);
  }
  return bytes;
}

/** How long startup waits for Redis before serving degraded (routing on local state). */
const STORE_STARTUP_WAIT_MS = 3000;

export async function startKvgate(opts: StartOptions): Promise<RunningKvgate> {
  const { config, logger } = opts;
  const hashKey = sessionHashKeyOf(opts.sessionHashKey);
  // `unkeyed`: the sessions before the rotation were hashed without a key (a first key being set).
  const previousHashKey =
    opts.sessionHashKeyPrevious === UNKEYED_PREVIOUS
      ? new Uint8Array(0)
      : sessionHashKeyOf(opts.sessionHashKeyPrevious, 'the previous session hash key (--session-hash-key-previous, KVGATE_SESSION_HASH_KEY_PREVIOUS)');
  await initHashing();
  installTraceContext();
  const credentials = grpcCredentials(opts.tls);
  const backend = await createStore(opts.store, config, logger, opts.storeTls);
  if (isRedisStore(backend) && !(await backend.waitReady(STORE_STARTUP_WAIT_MS))) {
    logger.error({ store: describeStore(opts.store) }, `redis not reachable at startup: ${unreachableReason(config.store.ready_when_unreachable)}`);
  }
  let gate: Gate | undefined;
  const metrics = new Metrics({
    // Read at scrape time from the gate's local view: no store round trip per scrape.
    // Every pool's workers (ids are unique across pools), as the current config has them.
    fleet: () =>
      gate
        ? gate.pools.all().flatMap((pool) => gate!.views(gate!.store.cachedSnapshot({ pool: pool.name, key: undefined, workers: pool.workerIds, blocks: [] }), pool))
        : [],
    // The current config's pool names, so each pool's outcomes are exported from the first scrape.
    pools: () => (gate ? gate.pools.all().map((p) => p.name) : []),
    // And its worker ids: the series of pools and workers a reload removed are dropped at scrape.
    workers: () => (gate ? gate.pools.all().flatMap((p) => p.workerIds) : []),
    processMetrics: opts.processMetrics ?? true,
    logLinesDropped: () => droppedLogLines(logger),
  });
  const store = new InstrumentedStore(backend, metrics);
  const running = new Gate(config, store, logger.child({ component: 'gate' }), undefined, hashKey, previousHashKey);
  gate = running;
  const extproc = new ExtProcServer({
    gate,
    logger: logger.child({ component: 'extproc' }),
    maxMessageBytes: maxMessageBytesFor(config.limits.max_body_bytes),
    metrics,
    credentials,
    ...(opts.onResult ? { onResult: opts.onResult } : {}),
    ...(opts.fullDuplexBodyWaitMs !== undefined ? { fullDuplexBodyWaitMs: opts.fullDuplexBodyWaitMs } : {}),
    ...(opts.connectionAgeMs !== undefined ? { connectionAgeMs: opts.connectionAgeMs } : {}),
    ...(opts.connectionMaxStreams !== undefined ? { connectionMaxStreams: opts.connectionMaxStreams } : {}),
  });
  const readiness = new Readiness({
    store,
    readyWhenUnreachable: config.store.ready_when_unreachable,
    intervalMs: DEFAULTS.readinessIntervalMs,
    logger: logger.child({ component: 'health' }),
    onChange: (ready) => extproc.setServing(ready),
  });
  const adminLogger = logger.child({ component: 'admin' });
  const admin = new AdminServer({ gate, logger: adminLogger, readiness, metrics, ...(opts.adminToken ? { token: opts.adminToken } : {}) });
  if (!opts.adminToken && !isLoopback(opts.adminHost)) {
    adminLogger.warn({ admin_host: opts.adminHost }, 'the admin API is reachable beyond this host and has no token: whoever reaches its port can drain or down workers (set KVGATE_ADMIN_TOKEN)');
  }
  let grpcPort: number;
  let adminPort: number;
  try {
    grpcPort = await extproc
      .listen(opts.grpcHost, opts.grpcPort)
      .catch(async (err: unknown) => Promise.reject(await bindError(err, 'ext_proc gRPC', opts.grpcHost, opts.grpcPort, '--grpc-port', 'KVGATE_GRPC_PORT', '--grpc-host')));
    adminPort = await admin
      .listen(opts.adminHost, opts.adminPort)
      .catch(async (err: unknown) => Promise.reject(await bindError(err, 'admin HTTP', opts.adminHost, opts.adminPort, '--admin-port', 'KVGATE_ADMIN_PORT', '--admin-host')));
  } catch (err) {
    await extproc.shutdown(0);
    await admin.close();
    await store.close();
    throw err;
  }
  const collector = new SignalCollector<Pool>({ gate, store, logger: logger.child({ component: 'signals' }) });
  const reloader = opts.configFile
    ? new ConfigReloader({
        file: opts.configFile,
        logger: logger.child({ component: 'config' }),
        current: () => running.currentConfig,
        apply: (next) => {
          running.reconfigure(next);
          collector.configChanged();
        },
        onOutcome: (outcome, restartNeeded) => Metrics.safely(() => metrics.configReloaded(outcome, restartNeeded)),
        ...(opts.reloadDebounceMs !== undefined ? { debounceMs: opts.reloadDebounceMs } : {}),
      })
    : undefined;
  // Workers with metrics count as down until their first scrape: read them once before serving.
  await collector.start();
  reloader?.watch();
  const health = await readiness.start();
  logger.info(
    {
      grpc_host: opts.grpcHost,
      grpc_port: grpcPort,
      grpc_tls: opts.tls?.clientCaFile ? 'mtls' : opts.tls?.certFile ? 'tls' : 'none',
      admin_host: opts.adminHost,
      admin_port: adminPort,
      store: describeStore(opts.store),
      // Whether session ids are hashed under a key: replicas with different answers disagree on every session.
      session_hashes: hashKey ? 'keyed' : 'sha256',
      // A rotation in progress: sessions recorded under the previous key are still found.
      ...(previousHashKey ? { session_hashes_previous: previousHashKey.length > 0 ? 'keyed' : 'sha256' } : {}),
      pools: config.pools.length,
      workers: config.workers.length,
      protocol: config.routing.protocol,
      ready: health.status,
      // Milliseconds since the process started (the runtime's own clock), and the CPU time it took
      // (less sensitive than wall time to a busy machine): `npm run startup` reads both.
      startup_ms: Math.round(performance.now()),
      startup_cpu_ms: cpuMs(),
    },
    'kvgate serving',
  );
  let closing: Promise<void> | undefined;
  return {
    grpcPort,
    adminPort,
    gate,
    store,
    extproc,
    collector,
    metrics,
    readiness,
    reload(trigger) {
      return reloader ? reloader.reload(trigger) : 'unchanged';
    },
    close(graceMs = 5000, delayMs = 0) {
      closing ??= (async () => {
        // Not ready first (health NOT_SERVING, /readyz 503), still taking streams for the delay
        // (a proxy that has not yet seen it go would otherwise fail the requests it sends here),
        // then let open streams finish.
        readiness.drain();
        if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
        reloader?.close();
        collector.stop();
        await extproc.shutdown(graceMs);
        await admin.close();
        await store.close();
      })();
      return closing;
    },
  };
}

/**
 * A listen that failed, said so an operator can act: which port, why (asking the OS directly,
 * since gRPC's own error only says "No address added out of total 1 resolved"), and the flag that
 * changes it.
 */
async function bindError(err: unknown, what: string, host: string, port: number, portFlag: string, portEnv: string, hostFlag: string): Promise<KvgateError> {
  const code = (err as { code?: unknown }).code;
  const errno = typeof code === 'string' ? code : await probeBind(host, port);
  const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  if (errno === 'EADDRINUSE') {
    return new KvgateError('internal', `the ${what} port ${where} is already in use (another kvgate?): stop that process, or pick a free port with ${portFlag} (or ${portEnv})`, { cause: err });
  }
  if (errno === 'EACCES') {
    return new KvgateError('internal', `not allowed to listen on ${where} for ${what} (ports below 1024 need privileges): pick another with ${portFlag} (or ${portEnv})`, { cause: err });
  }
  if (errno === 'EADDRNOTAVAIL' || errno === 'ENOTFOUND' || errno === 'EAI_AGAIN') {
    return new KvgateError('internal', `cannot listen for ${what} on ${where}: no such local address; pass a local address (0.0.0.0 for all) with ${hostFlag}`, { cause: err });
  }
  return new KvgateError('internal', `cannot listen for ${what} on ${where}: ${errno ?? (err as Error).message}`, { cause: err });
}

/** Binds a plain TCP server to the address to learn the OS's reason a bind fails (its errno). */
function probeBind(host: string, port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', (e: NodeJS.ErrnoException) => resolve(e.code));
    probe.listen(port, host, () => probe.close(() => resolve(undefined)));
  });
}

function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return Math.round((user + system) / 1000);
}

/** TLS needs both a certificate and its key; a client CA (mTLS) needs TLS. */
function grpcCredentials(files: GrpcTlsFiles | undefined) {
  const { certFile, keyFile, clientCaFile } = files ?? {};
  if (!certFile && !keyFile && !clientCaFile) return serverCredentials(undefined);
  if (!certFile || !keyFile) {
    throw new KvgateError('invalid_config', 'TLS for the ext_proc server needs both --tls-cert and --tls-key (and --tls-client-ca needs them too)');
  }
  return serverCredentials({
    cert: readPem(certFile, '--tls-cert'),
    key: readPem(keyFile, '--tls-key'),
    ...(clientCaFile ? { clientCa: readPem(clientCaFile, '--tls-client-ca') } : {}),
  });
}

/** The Redis backend, told apart without importing it (the memory store never loads ioredis). */
function isRedisStore(store: RoutingStore | RedisStore): store is RedisStore {
  return typeof (store as Partial<RedisStore>).waitReady === 'function';
}

/** A bind address only this host can reach. */
function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}
