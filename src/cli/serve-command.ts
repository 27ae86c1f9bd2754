/**
 * `kvgate serve`: the gate itself. The modules that serve (the app, its store, its servers) are
 * imported when the command runs, so `kvgate status` and `--help` never load them.
 */
import { Command, Option } from 'commander';
import { LOG_LEVELS, port, secondsUpTo } from './arg-parsers.js';
import { DEFAULTS } from '../config/defaults.js';

interface ServeOptions {
  /** Absent when neither --config nor KVGATE_CONFIG is given: the action says how to give it. */
  config?: string;
  grpcPort: number;
  grpcHost: string;
  adminPort: number;
  adminHost: string;
  store: string;
  storeCaFile?: string;
  storeCertFile?: string;
  storeKeyFile?: string;
  storeTlsServername?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsClientCa?: string;
  logLevel: string;
  shutdownGraceS: number;
  shutdownDelayS: number;
  adminToken?: string;
  sessionHashKey?: string;
  sessionHashKeyPrevious?: string;
}

/**
 * What `kvgate serve` says without a config. Commander's own text for a mandatory option names the
 * flag alone, so a newcomer neither learns of the environment variable nor where to find a config
 * to start from; the example is the one `npm start` serves (the container image has it too).
 */
export const MISSING_CONFIG =
  'error: kvgate serve needs a config file: pass --config <file> or set the KVGATE_CONFIG environment variable.\n' +
  'To start from the example, use envoy/kvgate.yaml in the kvgate repository (what `npm start` serves; the container image has it at /etc/kvgate/kvgate.yaml).';

export function registerServeCommand(program: Command): void {
  program
    .command('serve')
    .description('run the gate: answer Envoy ext_proc streams with the worker cluster for each request')
    .addOption(new Option('--config <file>', 'kvgate YAML config (workers, limits, keys)').env('KVGATE_CONFIG'))
    .addOption(new Option('--grpc-port <port>', 'ext_proc gRPC port').env('KVGATE_GRPC_PORT').argParser(port).default(DEFAULTS.grpcPort))
    .addOption(new Option('--grpc-host <host>', 'ext_proc gRPC bind address').env('KVGATE_GRPC_HOST').default(DEFAULTS.grpcHost))
    .addOption(new Option('--admin-port <port>', 'admin HTTP port').env('KVGATE_ADMIN_PORT').argParser(port).default(DEFAULTS.adminPort))
    .addOption(new Option('--admin-host <host>', 'admin HTTP bind address').env('KVGATE_ADMIN_HOST').default(DEFAULTS.adminHost))
    .addOption(
      new Option('--store <spec>', 'state store: memory, or a redis://, rediss://, redis+cluster://host:port,host:port or rediss+cluster:// URL')
        .env('KVGATE_STORE')
        .default(DEFAULTS.store),
    )
    .addOption(new Option('--store-ca-file <file>', 'PEM CA bundle to trust for rediss:// (default: the system CAs)').env('KVGATE_STORE_CA_FILE'))
    .addOption(new Option('--store-cert-file <file>', 'PEM client certificate for rediss:// (Redis tls-auth-clients)').env('KVGATE_STORE_CERT_FILE'))
    .addOption(new Option('--store-key-file <file>', 'PEM key of --store-cert-file').env('KVGATE_STORE_KEY_FILE'))
    .addOption(
      new Option('--store-tls-servername <name>', "host name Redis's certificates are verified against (default: the host each connection goes to; on a rediss+cluster:// URL, the first seed's host name too)").env(
        'KVGATE_STORE_TLS_SERVERNAME',
      ),
    )
    .addOption(new Option('--tls-cert <file>', 'PEM certificate: serve ext_proc over TLS').env('KVGATE_TLS_CERT'))
    .addOption(new Option('--tls-key <file>', 'PEM key of --tls-cert').env('KVGATE_TLS_KEY'))
    .addOption(new Option('--tls-client-ca <file>', 'PEM CA: require client certificates it signed (mTLS)').env('KVGATE_TLS_CLIENT_CA'))
    .addOption(
      new Option('--admin-token <token>', 'bearer token the admin API requires for state changes (prefer the environment variable: a flag shows in the process list)').env(
        'KVGATE_ADMIN_TOKEN',
      ),
    )
    .addOption(
      new Option(
        '--session-hash-key <key>',
        'secret key session ids are hashed under (HMAC-SHA-256), the same on every replica; at least 16 bytes (prefer the environment variable: a flag shows in the process list)',
      ).env('KVGATE_SESSION_HASH_KEY'),
    )
    .addOption(
      new Option(
        '--session-hash-key-previous <key>',
        'while rotating the session hash key: the key before it, under which sessions and stored responses recorded before the rotation are still found (keep it for one affinity TTL); `unkeyed` when setting a first key',
      ).env('KVGATE_SESSION_HASH_KEY_PREVIOUS'),
    )
    .addOption(new Option('--log-level <level>', 'log level').env('KVGATE_LOG_LEVEL').choices(LOG_LEVELS).default(DEFAULTS.logLevel))
    .addOption(
      new Option('--shutdown-grace-s <seconds>', 'on SIGTERM, how long open ext_proc streams may finish')
        .env('KVGATE_SHUTDOWN_GRACE_S')
        .argParser(secondsUpTo())
        .default(DEFAULTS.shutdownGraceS),
    )
    .addOption(
      new Option('--shutdown-delay-s <seconds>', 'on SIGTERM, how long to keep taking new streams while reporting NOT_SERVING, before the drain')
        .env('KVGATE_SHUTDOWN_DELAY_S')
        .argParser(secondsUpTo())
        .default(DEFAULTS.shutdownDelayS),
    )
    .action(async (o: ServeOptions, cmd: Command) => {
      // Checked here rather than with makeOptionMandatory() so the message can say more (see
      // MISSING_CONFIG). cmd.error() is commander's usage-error path: it prints the message and
      // the help hint and throws a CommanderError, which main() turns into EXIT.usage like every
      // other usage error. An empty KVGATE_CONFIG counts as none.
      if (!o.config) cmd.error(MISSING_CONFIG, { code: 'kvgate.missingConfig' });
      const configFile = o.config;
      const [grpc, { loadConfigFile }, { createLogger }, { startTracing }, { startKvgate }] = await Promise.all([
        import('@grpc/grpc-js'),
        import('../config/load.js'),
        import('../telemetry/logger.js'),
        import('../telemetry/tracing.js'),
        import('../app.js'),
      ]);
      const logger = createLogger(o.logLevel);
      // gRPC's own diagnostics as log lines (it prints to stderr otherwise). A failed bind is
      // reported by kvgate itself, naming the port and the flag that changes it.
      grpc.setLogger({
        error: (...args: unknown[]) => {
          const text = args.map(String).join(' ');
          if (!/No address added out of total/.test(text)) logger.warn({ source: 'grpc' }, text);
        },
      });
      // SIGHUP's default action ends the process, so its handler goes in before anything can
      // announce the gate: a SIGHUP sent as soon as "kvgate serving" is read must reload, not
      // kill. One that comes while the gate starts is answered once it runs (the file may have
      // changed after it was read).
      let reload: (() => void) | undefined;
      let hupWhileStarting = false;
      process.on('SIGHUP', () => (reload ? reload() : (hupWhileStarting = true)));
      // Likewise SIGTERM and SIGINT: as PID 1 in a container Node ignores them until a handler is
      // installed, and starting can wait seconds for Redis. One that comes while the gate starts
      // stops it as soon as it runs (nothing is in flight before that).
      let stop: ((signal: string) => void) | undefined;
      let stopWhileStarting: string | undefined;
      const onStop = (signal: string) => (stop ? stop(signal) : (stopWhileStarting ??= signal));
      process.once('SIGINT', () => onStop('SIGINT'));
      process.once('SIGTERM', () => onStop('SIGTERM'));
      const config = loadConfigFile(configFile);
      // Span export follows the standard OTEL_* variables; off when they are unset.
      const tracing = await startTracing({ logger: logger.child({ component: 'tracing' }) });
      logger.info({ tracing: tracing.enabled, detail: tracing.description }, 'tracing');
      const running = await startKvgate({
        config,
        logger,
        store: o.store,
        storeTls: { caFile: o.storeCaFile, certFile: o.storeCertFile, keyFile: o.storeKeyFile, servername: o.storeTlsServername },
        tls: { certFile: o.tlsCert, keyFile: o.tlsKey, clientCaFile: o.tlsClientCa },
        grpcHost: o.grpcHost,
        grpcPort: o.grpcPort,
        adminHost: o.adminHost,
        adminPort: o.adminPort,
        ...(o.adminToken ? { adminToken: o.adminToken } : {}),
        ...(o.sessionHashKey ? { sessionHashKey: o.sessionHashKey } : {}),
        ...(o.sessionHashKeyPrevious ? { sessionHashKeyPrevious: o.sessionHashKeyPrevious } : {}),
        configFile,
      });
      stop = (signal: string) => {
        logger.info(
          { signal, open_streams: running.extproc.openStreams, delay_s: o.shutdownDelayS, grace_s: o.shutdownGraceS },
          o.shutdownDelayS > 0 ? 'shutting down: not ready, still serving for the delay, then draining open streams' : 'shutting down: draining open streams',
        );
        void running
          .close(o.shutdownGraceS * 1000, o.shutdownDelayS * 1000)
          .then(() => tracing.shutdown())
          .then(() => {
            logger.info('stopped');
            process.exit(0);
          });
      };
      // Re-read the config file on SIGHUP (it is also watched).
      reload = () => void running.reload('SIGHUP');
      if (hupWhileStarting) reload();
      if (stopWhileStarting !== undefined) stop(stopWhileStarting);
    });
}
