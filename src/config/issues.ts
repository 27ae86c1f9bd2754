/**
 * Config problems in words an operator can act on: zod's issues turned into the fix (the allowed
 * values, the key a typo stands for, the section a misplaced key belongs under, the flag a setting
 * that is not the file's belongs to). Hints are read off the schema itself, so none is kept by hand
 * beside it except the flags, which a test checks against `kvgate serve`.
 */
import type { z } from 'zod';
import { configSchema } from './schema.js';

/** What zod's definitions hold that the walks below read (zod 4 keeps them on `_zod.def`). */
type SchemaDef = { type: string; shape?: Record<string, z.core.$ZodType>; element?: z.core.$ZodType; innerType?: z.core.$ZodType; in?: z.core.$ZodType };

/**
 * One problem in words an operator can act on: the allowed values where the schema has a closed
 * set (zod says only "Invalid input" for a union of literals), and the value the file has.
 */
export function describeIssue(issue: z.core.$ZodIssue): string {
  const got = (v: unknown) => (typeof v === 'object' && v !== null ? '' : ` (got ${quoteValue(v)})`);
  if (issue.code === 'invalid_union') {
    const branches = issue.errors.map((b) => (b.length === 1 && b[0]!.code === 'invalid_value' ? b[0]!.values : undefined));
    if (branches.length > 0 && branches.every((v) => v !== undefined)) {
      return `must be one of ${branches.flat().map((v) => JSON.stringify(v)).join(', ')}${got(issue.input)}`;
    }
  }
  if (issue.code === 'invalid_value') return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}${got(issue.input)}`;
  if (issue.code === 'unrecognized_keys') {
    const flags = issue.keys.map((k) => flagFor(issue.path, k));
    if (flags.every((f) => f !== undefined)) return `${issue.message} (set with ${[...new Set(flags)].map(withVariable).join(', ')}, not in the config file)`;
    return `${issue.message}${unknownKeyHint(issue.keys, keysAt(configSchema, issue.path), issue.path)}`;
  }
  const text = issue.input === undefined ? issue.message : `${issue.message}${got(issue.input)}`;
  // `store: redis://...`: the URL is a flag, the section its timeouts.
  if (issue.path.length === 1 && issue.path[0] === 'store' && typeof issue.input === 'string') {
    return `${text}: the store itself is chosen with ${withVariable('--store')}; this section holds its settings (timeout_ms, refresh_ms, key_prefix, ...)`;
  }
  return text;
}

/**
 * Settings of `kvgate serve` that are flags (each with a KVGATE_ variable), by where an operator
 * might write them in the file instead, in the normalised spelling of unknownKeyHint. They are
 * read once at startup, so a file cannot set or reload them: the message says where they go.
 */
export const SET_BY_FLAG: Readonly<Record<string, string>> = {
  grpcport: '--grpc-port',
  grpchost: '--grpc-host',
  adminport: '--admin-port',
  adminhost: '--admin-host',
  loglevel: '--log-level',
  admintoken: '--admin-token',
  tlscert: '--tls-cert',
  tlskey: '--tls-key',
  tlsclientca: '--tls-client-ca',
  shutdowngraces: '--shutdown-grace-s',
  shutdowndelays: '--shutdown-delay-s',
  'store.url': '--store',
  'store.uri': '--store',
  'store.redis': '--store',
  'store.redisurl': '--store',
  'store.type': '--store',
};

/** The flag an unknown key at `path` stands for, if it is one of serve's flags. */
function flagFor(path: readonly PropertyKey[], key: string): string | undefined {
  const at = path.filter((p) => typeof p === 'string').join('.');
  const name = normalizeKey(key);
  return SET_BY_FLAG[at === '' ? name : `${at}.${name}`];
}

/** A flag and its environment variable, as `kvgate serve --help` names them. */
function withVariable(flag: string): string {
  return `${flag} or KVGATE_${flag.slice(2).replace(/-/g, '_').toUpperCase()}`;
}

/** Keys compared case, `_` and `-` aside: `maxInflight` is `max_inflight`. */
function normalizeKey(key: string): string {
  return key.toLowerCase().replace(/[_-]/g, '');
}

/** The longest value quoted back in a message: enough to recognise it, never a whole file. */
const MAX_QUOTED = 80;

/** A value as the file has it: JSON, except numbers JSON cannot spell (YAML's .inf), and cut short. */
function quoteValue(v: unknown): string {
  const text = typeof v === 'number' && !Number.isFinite(v) ? String(v) : (JSON.stringify(v) ?? String(v));
  return text.length > MAX_QUOTED ? `${text.slice(0, MAX_QUOTED)}... (${text.length} characters)` : text;
}

/**
 * The keys the schema allows at `path` (array indices step into the element), or undefined when
 * the path leads through something that is not a plain object. Reads zod's own definitions, so
 * a key added to the schema is suggested with no list to keep.
 */
function keysAt(schema: z.core.$ZodType, path: readonly PropertyKey[]): string[] | undefined {
  let node: z.core.$ZodType | undefined = schema;
  let rest = [...path];
  for (let steps = 0; node && steps < 64; steps++) {
    const def = node._zod.def as unknown as SchemaDef;
    if (def.innerType) node = def.innerType;
    else if (def.type === 'pipe') node = def.in;
    else if (def.type === 'array' && typeof rest[0] === 'number') [node, rest] = [def.element, rest.slice(1)];
    else if (def.type === 'object' && def.shape) {
      if (rest.length === 0) return Object.keys(def.shape);
      [node, rest] = [def.shape[String(rest[0])], rest.slice(1)];
    } else return undefined;
  }
  return undefined;
}

/**
 * Every place a key may stand in the schema, by its normalised name: `limits.max_inflight`,
 * `workers[].max_inflight`, ... in the schema's order. Built once, when a message first needs it.
 */
let places: Map<string, string[]> | undefined;
function keyPlaces(): Map<string, string[]> {
  if (places) return places;
  const found = new Map<string, string[]>();
  const walk = (node: z.core.$ZodType | undefined, at: string, depth: number): void => {
    if (!node || depth > 32) return;
    const def = node._zod.def as unknown as SchemaDef;
    if (def.innerType) return walk(def.innerType, at, depth + 1);
    if (def.type === 'pipe') return walk(def.in, at, depth + 1);
    if (def.type === 'array') return walk(def.element, `${at}[]`, depth + 1);
    if (def.type !== 'object' || !def.shape) return;
    for (const [key, child] of Object.entries(def.shape)) {
      const place = at === '' ? key : `${at}.${key}`;
      found.set(normalizeKey(key), [...(found.get(normalizeKey(key)) ?? []), place]);
      walk(child, place, depth + 1);
    }
  };
  walk(configSchema, '', 0);
  return (places = found);
}

/** How many single-character edits apart two names are (both already normalised). */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}

/**
 * What to write instead of an unknown key: where it belongs when it is a key of another section,
 * else the allowed key it is closest to (case, `_` and `-` aside: `maxInflight` is `max_inflight`)
 * when that is near enough to be a typo, else the keys allowed there, so the fix never needs a
 * trip to the source.
 */
function unknownKeyHint(keys: readonly string[], allowed: readonly string[] | undefined, path: readonly PropertyKey[]): string {
  if (!allowed || allowed.length === 0) return '';
  // A key of another section, as a YAML indentation slip leaves it (`stream_idle_s:` at the top
  // instead of under `limits:`): where it belongs, at most three places, in the schema's order.
  const here = path.map((p) => (typeof p === 'number' ? '[]' : String(p))).join('.').replace(/\.\[\]/g, '[]');
  const elsewhere = keys.length === 1 && !allowed.some((a) => normalizeKey(a) === normalizeKey(keys[0]!))
    ? (keyPlaces().get(normalizeKey(keys[0]!)) ?? []).filter((p) => p !== (here === '' ? keys[0] : `${here}.${keys[0]}`)).slice(0, 3)
    : [];
  if (elsewhere.length > 0) {
    const list = elsewhere.length === 1 ? elsewhere[0]! : `${elsewhere.slice(0, -1).join(', ')} or ${elsewhere.at(-1)!}`;
    return ` (not a key here: did you mean ${list}? check its indentation)`;
  }
  const hints = keys.map((key) => {
    const ranked = allowed.map((a) => ({ a, d: editDistance(normalizeKey(key), normalizeKey(a)) })).sort((x, y) => x.d - y.d);
    const best = ranked[0]!;
    // Near enough to be a typo: a few edits, and fewer than half the key (`ip` is not `id`).
    const length = normalizeKey(key).length;
    return best.d <= Math.max(2, Math.floor(length / 3)) && best.d * 2 < length ? { key, suggestion: best.a } : { key };
  });
  const suggested = hints.filter((h) => h.suggestion !== undefined);
  if (suggested.length === hints.length) {
    return hints.length === 1
      ? ` (did you mean "${hints[0]!.suggestion!}"?)`
      : ` (did you mean ${hints.map((h) => `"${h.suggestion!}" for "${h.key}"`).join(', ')}?)`;
  }
  return ` (allowed here: ${allowed.join(', ')})`;
}
