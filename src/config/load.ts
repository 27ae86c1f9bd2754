/**
 * Reads and validates kvgate's YAML config. All problems are reported at once, each with the
 * path of the offending key, so an operator fixes a file in one pass.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { KvgateError } from '../errors.js';
import { deepFreeze } from '../util/deep-freeze.js';
import { configSchema, type Config } from './schema.js';

/** Validates an already-parsed config object. Throws KvgateError('invalid_config') listing every problem. */
export function parseConfig(raw: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(raw ?? {}, { reportInput: true });
  if (!result.success) {
    const problems = result.error.issues.map((i) => `  ${i.path.length ? i.path.join('.') : '(root)'}: ${describeIssue(i)}`);
    throw new KvgateError('invalid_config', `${source} is invalid:\n${problems.join('\n')}`, {
      details: { problems: problems.length },
    });
  }
  return deepFreeze(result.data);
}

/**
 * One problem in words an operator can act on: the allowed values where the schema has a closed
 * set (zod says only "Invalid input" for a union of literals), and the value the file has.
 */
export function describeIssue(issue: z.core.$ZodIssue): string {
  const got = (v: unknown) => (typeof v === 'object' && v !== null ? '' : ` (got ${JSON.stringify(v)})`);
  if (issue.code === 'invalid_union') {
    const branches = issue.errors.map((b) => (b.length === 1 && b[0]!.code === 'invalid_value' ? b[0]!.values : undefined));
    if (branches.length > 0 && branches.every((v) => v !== undefined)) {
      return `must be one of ${branches.flat().map((v) => JSON.stringify(v)).join(', ')}${got(issue.input)}`;
    }
  }
  if (issue.code === 'invalid_value') return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}${got(issue.input)}`;
  if (issue.code === 'unrecognized_keys') return issue.message;
  return issue.input === undefined ? issue.message : `${issue.message}${got(issue.input)}`;
}

/** Reads a YAML file and validates it. */
export function loadConfigFile(file: string): Config {
  return parseConfigText(readConfigText(file), file);
}

/** The file's text; a KvgateError('invalid_config') when it cannot be read. */
export function readConfigText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new KvgateError('invalid_config', `cannot read config file ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** Parses YAML text and validates it; `source` names it in messages. */
export function parseConfigText(text: string, source: string): Config {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new KvgateError('invalid_config', `${source} is not valid YAML: ${(err as Error).message}`, { cause: err });
  }
  return parseConfig(raw, source);
}
