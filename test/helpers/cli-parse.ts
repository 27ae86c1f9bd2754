/**
 * Parses a `kvgate …` command line with the real command definitions, without running anything:
 * every subcommand's action is replaced by one that records the options. A misspelt flag, a bad
 * value or an unknown subcommand throws as the real command line would.
 */
import { Command } from 'commander';
import { buildCli } from '../../src/cli/cli.js';

export interface Parsed {
  command: string;
  options: Record<string, unknown>;
}

export async function parseKvgate(args: readonly string[]): Promise<Parsed> {
  const argv = ['node', 'kvgate', ...args];
  const program = await buildCli(argv);
  let parsed: Parsed | undefined;
  const quiet = (c: Command) => {
    c.exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    c.action(function (this: Command) {
      parsed = { command: this.name(), options: this.opts() };
    });
  };
  quiet(program);
  for (const c of program.commands) quiet(c);
  await program.parseAsync(argv);
  if (!parsed) throw new Error(`no subcommand in: kvgate ${args.join(' ')}`);
  return parsed;
}
