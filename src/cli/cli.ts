/**
 * The `kvgate` command line (src/cli/main.ts runs it). Each flag has an environment variable (flags win) so the same image
 * runs from a terminal, a compose file or a Kubernetes manifest.
 *
 * Only the subcommand being run is loaded: `kvgate serve` must not pay for the simulator, the
 * benchmark or the chart renderer (some of which are development dependencies, absent from a
 * production install). The others are listed in `--help` by name and description alone.
 *
 * Exit status, the same for every subcommand (see `EXIT` and the README):
 *   0  done (or `--help`, `--version`)
 *   1  a runtime failure: a port in use, an unreachable admin API, a failed run
 *   2  a usage or configuration error: an unknown or invalid flag, an invalid config file
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { KvgateError } from '../errors.js';
import { registerServeCommand } from './serve-command.js';

export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

interface Subcommand {
  description: string;
  register: () => Promise<(program: Command) => void>;
}

/** Every subcommand but `serve`, loaded only when it is the one being run. */
const SUBCOMMANDS: Record<string, Subcommand> = {
  try: {
    description: 'play Envoy against a running gate: send one request (or a short conversation) and print where it was routed and why',
    register: async () => (await import('./try-command.js')).registerTryCommand,
  },
  status: {
    description: "print each worker's state, in-flight load and signals, and the store's health, from a running gate's admin API",
    register: async () => (await import('./status-command.js')).registerStatusCommand,
  },
  demo: {
    description: 'start fake workers and the gate (or use a running one), drive multi-turn chat sessions through it as Envoy would, and show where each session lands and the KV hit rate',
    register: async () => (await import('./demo-command.js')).registerDemoCommand,
  },
  'fake-worker': {
    description: 'run a simulated vLLM model server: OpenAI-compatible API, vLLM /metrics, a prefix KV cache, and test hooks (POST /control)',
    register: async () => (await import('./fake-worker-command.js')).registerFakeWorkerCommand,
  },
  sim: {
    description: 'simulate a GPU fleet with prefix KV caches and compare kvgate with baseline routing policies (needs the development dependencies)',
    register: async () => (await import('./sim-command.js')).registerSimCommand,
  },
  bench: {
    description: 'measure what the gate costs per request: ext_proc load against kvgate (memory, Redis) and a no-op ceiling (needs the development dependencies)',
    register: async () => (await import('./bench-command.js')).registerBenchCommand,
  },
};

/** The package's version, read from package.json (two levels up from src/cli and dist/cli alike). */
export function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The subcommand argv names (the first argument that is not an option; `help SUB` names SUB), if any. */
function subcommandOf(argv: readonly string[]): string | undefined {
  const words = argv.slice(2).filter((a) => !a.startsWith('-'));
  return words[0] === 'help' ? words[1] : words[0];
}

export async function buildCli(argv: readonly string[] = process.argv): Promise<Command> {
  const program = new Command('kvgate')
    .description('KV-cache-aware router for LLM inference: an Envoy ext_proc service')
    .version(packageVersion(), '-V, --version', 'print the version and exit')
    .showHelpAfterError('(add --help for usage)')
    // Usage errors throw (a CommanderError) instead of exiting, so `main` maps every error to one
    // exit-status scheme; subcommands created below inherit this.
    .exitOverride();

  registerServeCommand(program);
  const wanted = subcommandOf(argv);
  for (const [name, sub] of Object.entries(SUBCOMMANDS)) {
    if (name === wanted) (await loadSubcommand(name, sub))(program);
    else program.command(name).description(sub.description).helpOption(false).allowUnknownOption();
  }
  return program;
}

export async function loadSubcommand(name: string, sub: Subcommand): Promise<(program: Command) => void> {
  try {
    return await sub.register();
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ERR_MODULE_NOT_FOUND') {
      const missing = /Cannot find (?:package|module) '([^']+)'/.exec((err as Error).message)?.[1] ?? 'a development dependency';
      throw new KvgateError(
        'internal',
        `kvgate ${name} needs ${missing}, which a production install leaves out: run it from a checkout after \`npm ci\` (which installs the development dependencies)`,
        { cause: err },
      );
    }
    throw err;
  }
}

/** Exit status for anything `main` caught. */
export function exitCodeOf(err: unknown): number {
  if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  if (err instanceof KvgateError && err.code === 'invalid_config') return EXIT.usage;
  return EXIT.failure;
}

export async function main(argv: string[]): Promise<void> {
  // `kvgate status | head -3`: a reader that stops early is not a failure of ours.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(EXIT.ok);
    throw err;
  });
  try {
    await (await buildCli(argv)).parseAsync(argv);
  } catch (err) {
    const status = exitCodeOf(err);
    // Commander has already printed its own usage errors (and help, and the version); an
    // InvalidArgumentError thrown by an action itself has not been.
    if (err instanceof InvalidArgumentError) process.stderr.write(`kvgate: ${err.message}\n`);
    else if (!(err instanceof CommanderError)) process.stderr.write(`kvgate: ${KvgateError.from(err).message}\n`);
    process.exitCode = status;
  }
}
