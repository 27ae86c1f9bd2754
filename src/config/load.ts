/**
 * Reads and validates kvgate's YAML config. All problems are reported at once, each with the
 * path of the offending key, so an operator fixes a file in one pass.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { KvgateError } from '../errors.js';
import { deepFreeze } from '../util/deep-freeze.js';
import { describeIssue } from './issues.js';
import { configSchema, type Config } from './schema.js';

/** Validates an already-parsed config object. Throws KvgateError('invalid_config') listing every problem. */
export function parseConfig(raw: unknown, source = 'config'): Config {
  // A file whose top level is not a mapping is not a config with mistakes in it but the wrong
  // file (a list, a stray word, a file that is not YAML at all): one line, not zod's view of it.
  if (raw !== null && raw !== undefined && (typeof raw !== 'object' || Array.isArray(raw))) {
    throw new KvgateError(
      'invalid_config',
      `${source} is not a kvgate config: its top level is ${Array.isArray(raw) ? 'a list' : `a ${typeof raw}`}, not a mapping of settings (routing:, limits:, workers: ...)`,
    );
  }
  const result = configSchema.safeParse(raw ?? {}, { reportInput: true });
  if (!result.success) {
    const problems = result.error.issues.map((i) => `  ${i.path.length ? i.path.join('.') : '(root)'}: ${describeIssue(i)}`);
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
    // Most often a mounted ConfigMap's directory given for the file in it: name the files there.
    if ((err as NodeJS.ErrnoException).code === 'EISDIR') {
      let files: string[] = [];
      try {
        files = readdirSync(file).filter((f) => /\.(ya?ml|json)$/.test(f)).map((f) => path.join(file, f));
      } catch {
        // Unlistable: the message still says what the path is.
      }
      const choice = files.length > 0 ? ` (${files.join(' or ')})` : '';
      throw new KvgateError('invalid_config', `${file} is a directory, not a config file: pass the file in it${choice}`, { cause: err });
    }
    throw new KvgateError('invalid_config', `cannot read config file ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** Parses YAML text and validates it; `source` names it in messages. */
export function parseConfigText(text: string, source: string): Config {
  // An empty file is most often a ConfigMap key that is missing or a write caught half done.
  if (text.trim() === '') throw new KvgateError('invalid_config', `${source} is empty: a config needs at least \`workers\` (one pool) or \`pools\``);
  return parseConfig(parseConfigYaml(text, source), source);
}

/** A config file's YAML, parsed as every reader of one must (merge keys; one document; text), not yet validated. */
export function parseConfigYaml(text: string, source: string): unknown {
  // NUL or bytes that are not UTF-8 (read as U+FFFD): a binary file, named as such rather than
  // parsed into a one-string "config" and quoted back.
  if (/[\u0000\ufffd]/.test(text)) throw new KvgateError('invalid_config', `${source} is not text (it holds NUL bytes or bytes that are not UTF-8): is it the right file?`);
  let raw: unknown;
  try {
    // Merge keys (`<<: *worker`), which YAML 1.2 dropped but Kubernetes' and compose's parsers
    // take: an operator writes shared worker settings once. Read as a plain key they were refused.
    raw = parseYaml(text, { merge: true });
  } catch (err) {
    // The YAML library tells its own callers to use another function; an operator needs to know what is in the file.
    const message = (err as { code?: unknown }).code === 'MULTIPLE_DOCS' ? 'it holds several YAML documents (a `---` line between them); a config is one document' : (err as Error).message;
    throw new KvgateError('invalid_config', `${source} is not valid YAML: ${message}`, { cause: err });
  }
  return raw;
}
