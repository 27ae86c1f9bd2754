/**
 * The `kvgate` command line. Each flag has an environment variable (flags win) so the same image
 * runs from a terminal, a compose file or a Kubernetes manifest.
 */
import { Command, Option, InvalidArgumentError } from 'commander';
import { DEFAULTS } from '../config/defaults.js';
import { loadConfigFile } from '../config/load.js';
import { KvgateError } from '../errors.js';
import { createLogger } from '../telemetry/logger.js';
import { startKvgate } from '../app.js';
import { registerSimCommand } from './sim-command.js';

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('must be a port number (0-65535)');
  return n;
}

export function buildCli(): Command {
  const program = new Command('kvgate')
    .description('KV-cache-aware router for LLM inference: an Envoy ext_proc service')
    .showHelpAfterError();

  program
    .command('serve')
    .description('run the gate: answer Envoy ext_proc streams with the worker cluster for each request')
    .addOption(new Option('--config <file>', 'kvgate YAML config (workers, limits, keys)').env('KVGATE_CONFIG').makeOptionMandatory())
    .addOption(new Option('--grpc-port <port>', 'ext_proc gRPC port').env('KVGATE_GRPC_PORT').argParser(port).default(DEFAULTS.grpcPort))
    .addOption(new Option('--grpc-host <host>', 'ext_proc gRPC bind address').env('KVGATE_GRPC_HOST').default(DEFAULTS.grpcHost))
    .addOption(new Option('--admin-port <port>', 'admin HTTP port').env('KVGATE_ADMIN_PORT').argParser(port).default(DEFAULTS.adminPort))
    .addOption(new Option('--admin-host <host>', 'admin HTTP bind address').env('KVGATE_ADMIN_HOST').default(DEFAULTS.adminHost))
    .addOption(new Option('--store <spec>', 'state store: memory, or a redis:// / rediss:// URL').env('KVGATE_STORE').default(DEFAULTS.store))
    .addOption(new Option('--log-level <level>', 'pino log level').env('KVGATE_LOG_LEVEL').default(DEFAULTS.logLevel))
    .action(async (o: { config: string; grpcPort: number; grpcHost: string; adminPort: number; adminHost: string; store: string; logLevel: string }) => {
      const logger = createLogger(o.logLevel);
      const config = loadConfigFile(o.config);
      const running = await startKvgate({
        config,
        logger,
        store: o.store,
        grpcHost: o.grpcHost,
        grpcPort: o.grpcPort,
        adminHost: o.adminHost,
        adminPort: o.adminPort,
        configFile: o.config,
      });
      const stop = (signal: string) => {
        logger.info({ signal }, 'shutting down: draining open streams');
        void running.close().then(() => process.exit(0));
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
      // Re-read the config file (it is also watched); without this handler SIGHUP would end the process.
      process.on('SIGHUP', () => running.reload('SIGHUP'));
    });

  registerSimCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildCli().parseAsync(argv);
  } catch (err) {
    const e = KvgateError.from(err);
    process.stderr.write(`kvgate: ${e.message}\n`);
    process.exitCode = e.code === 'invalid_config' ? 2 : 1;
  }
}

await main(process.argv);
