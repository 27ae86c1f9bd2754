/**
 * Reads and validates kvgate's YAML config. All problems are reported at once, each with the
 * path of the offending key, so an operator fixes a file in one pass.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { KvgateError } from '../errors.js';
import { configSchema, type Config } from './schema.js';

/** Validates an already-parsed config object. Throws KvgateError('invalid_config') listing every problem. */
export function parseConfig(raw: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(raw ?? {});
  if (!result.success) {
    const problems = result.error.issues.map((i) => `  ${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`);
    throw new KvgateError('invalid_config', `${source} is invalid:\n${problems.join('\n')}`, {
      details: { problems: problems.length },
    });
  }
  return deepFreeze(result.data);
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

export function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
