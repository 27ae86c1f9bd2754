// Checks the protoc-gen-validate rules (`(validate.rules)`, `(validate.required)`) that Envoy enforces
// when it loads a config but `buf convert` does not (buf applies protovalidate rules only): a port
// over 65535, an empty cluster_name, a required oneof left unset, a timeout over its limit.
//
// How: buf converts the config to canonical proto-JSON (names resolved, Any expanded, enums as names,
// durations as strings), then a walker checks it against the PGV options protobufjs reads from the
// same protos. Violations are mapped back to line:col in the source YAML where the path exists there.
//
// Not covered: string well-knowns other than HTTP header name/value (email, hostname, ip, uri...: no
// Envoy proto in the image uses them), bytes patterns, timestamp rules, and Envoy's own semantic checks.

import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import protobuf from 'protobufjs';
import type { Enum, Field, MapField, Root, Type } from 'protobufjs';
import { LineCounter, isMap, isSeq, parseDocument } from 'yaml';
import type { Node as YamlNode } from 'yaml';
import {
  BOOTSTRAP_TYPE,
  ENVOY_SCHEMA_PROTOS,
  SCHEMA_DIR,
  buildEnvoySchemaImage,
  describeFailure,
  runBuf,
  withTextFile,
} from './envoy-schema.js';
import type { TextValidationOptions, ValidationResult } from './envoy-schema.js';

type Rules = Record<string, unknown>;
/** [rule name within its kind, e.g. `lte`, what is wrong]. */
type Problem = [string, string];
type Json = Record<string, unknown>;
/** A step into a message: a field (proto name), a list index, or a map key. */
type Step = { field: string } | { index: number } | { key: string };

export interface PgvViolation {
  path: Step[];
  message: string;
}

const require = createRequire(import.meta.url);

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const sub = (rules: Rules | undefined, key: string): Rules | undefined => {
  const v = rules?.[key];
  return isObject(v) ? v : undefined;
};

export function formatPath(steps: readonly Step[]): string {
  return steps
    .map((s, i) => ('index' in s ? `[${s.index}]` : 'key' in s ? `[${JSON.stringify(s.key)}]` : `${i ? '.' : ''}${s.field}`))
    .join('');
}

// ---------------------------------------------------------------------------------------------
// schema

let rootPromise: Promise<Root> | undefined;

/** protobufjs view of the same protos the buf image holds, with their PGV options. */
function loadRoot(): Promise<Root> {
  rootPromise ??= (async () => {
    await buildEnvoySchemaImage(); // assembles .build/envoy-schema/root with the patched validate.proto
    const dirs = [path.join(SCHEMA_DIR, 'root'), path.dirname(require.resolve('protobufjs/package.json'))];
    const root = new protobuf.Root();
    // google/protobuf/descriptor.proto comes from protobufjs; the other WKTs are built into it.
    root.resolvePath = (_origin, target) =>
      dirs.map((d) => path.join(d, target)).find((p) => existsSync(p)) ?? target;
    await root.load([...ENVOY_SCHEMA_PROTOS], { keepCase: true });
    root.resolveAll();
    return root;
  })();
  return rootPromise;
}

const rulesCache = new WeakMap<object, Rules | undefined>();

// parsedOptions, not options: the flattened options keep only the last `in` entry and drop empty
// messages such as `gt: {}` (a zero Duration).
function fieldRules(field: Field | MapField): Rules | undefined {
  if (rulesCache.has(field)) return rulesCache.get(field);
  let merged: Rules | undefined;
  for (const entry of (field.parsedOptions ?? []) as unknown as unknown[]) {
    const rules = isObject(entry) ? entry['(validate.rules)'] : undefined;
    if (isObject(rules)) merged = deepMerge(merged ?? {}, rules);
  }
  rulesCache.set(field, merged);
  return merged;
}

function deepMerge(a: Rules, b: Rules): Rules {
  const out: Rules = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    if (isObject(prev) && isObject(v)) out[k] = deepMerge(prev, v);
    else if (Array.isArray(prev) && Array.isArray(v)) out[k] = [...prev, ...v];
    else out[k] = v;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// value checks

const INTEGER_KINDS = new Set([
  'int32', 'int64', 'uint32', 'uint64', 'sint32', 'sint64', 'fixed32', 'fixed64', 'sfixed32', 'sfixed64',
]);
const WRAPPER_KINDS: Record<string, string> = {
  '.google.protobuf.DoubleValue': 'double', '.google.protobuf.FloatValue': 'float',
  '.google.protobuf.Int64Value': 'int64', '.google.protobuf.UInt64Value': 'uint64',
  '.google.protobuf.Int32Value': 'int32', '.google.protobuf.UInt32Value': 'uint32',
  '.google.protobuf.BoolValue': 'bool', '.google.protobuf.StringValue': 'string',
  '.google.protobuf.BytesValue': 'bytes',
};
// From protoc-gen-validate's templates; strict: false relaxes both to "no NUL, CR or LF".
const HEADER_NAME = /^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+$/;
const HEADER_VALUE = /^[^\u0000-\u0008\u000A-\u001F\u007F]*$/;
const HEADER_LOOSE = /^[^\u0000\u000A\u000D]*$/;

type Ordered = number | bigint;

/** Collects problems; `fail(broken, rule, text)` records one when a check does not hold. */
function collector(): { problems: Problem[]; fail: (broken: boolean, rule: string, text: string) => void } {
  const problems: Problem[] = [];
  return { problems, fail: (broken, rule, text) => void (broken && problems.push([rule, text])) };
}

/** A repeated rule value (`in`, `not_in`) as a list, whether protobufjs gave one value or many. */
function listRule(rules: Rules | undefined, key: string): unknown[] {
  const v = rules?.[key];
  return Array.isArray(v) ? v : v === undefined ? [] : [v];
}

// 64-bit integers arrive as strings in proto-JSON; BigInt keeps them exact.
function toOrdered(value: unknown, integer: boolean): Ordered {
  if (integer && (typeof value === 'string' || (typeof value === 'number' && Number.isInteger(value)))) {
    try {
      return BigInt(value);
    } catch {
      return Number(value);
    }
  }
  return Number(value);
}

/** const / lt / lte / gt / gte / in / not_in, shared by numbers and durations. */
function checkOrdered(
  value: Ordered,
  rules: Rules,
  conv: (v: unknown) => Ordered,
  show: (v: unknown) => string,
): Problem[] {
  const { problems, fail } = collector();
  const bound = (k: string) => (rules[k] === undefined ? undefined : conv(rules[k]));
  const [gt, gte, lt, lte] = [bound('gt'), bound('gte'), bound('lt'), bound('lte')];
  const lowRule = gt !== undefined ? 'gt' : 'gte';
  const upRule = lt !== undefined ? 'lt' : 'lte';
  const aboveLower = gt !== undefined ? value > gt : gte !== undefined ? value >= gte : true;
  const belowUpper = lt !== undefined ? value < lt : lte !== undefined ? value <= lte : true;
  const lowText = `${gt !== undefined ? '>' : '>='} ${show(rules[lowRule])}`;
  const upText = `${lt !== undefined ? '<' : '<='} ${show(rules[upRule])}`;
  const lower = gt ?? gte;
  const upper = lt ?? lte;
  if (lower !== undefined && upper !== undefined && upper < lower) {
    // PGV: an inverted range means "outside of it".
    fail(!aboveLower && !belowUpper, `${lowRule}/${upRule}`, `must be ${lowText} or ${upText}`);
  } else {
    fail(!aboveLower, lowRule, `must be ${lowText}`);
    fail(!belowUpper, upRule, `must be ${upText}`);
  }
  fail(rules.const !== undefined && value !== conv(rules.const), 'const', `must equal ${show(rules.const)}`);
  const inList = listRule(rules, 'in');
  const notIn = listRule(rules, 'not_in');
  fail(inList.length > 0 && !inList.some((v) => conv(v) === value), 'in', `must be one of [${inList.map(show).join(', ')}]`);
  fail(notIn.some((v) => conv(v) === value), 'not_in', `must not be one of [${notIn.map(show).join(', ')}]`);
  return problems;
}

function durationNanos(value: unknown): bigint {
  if (typeof value === 'string') {
    const m = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/.exec(value);
    if (!m) return 0n;
    const nanos = BigInt(m[2] ?? '0') * 1_000_000_000n + BigInt((m[3] ?? '').padEnd(9, '0'));
    return m[1] ? -nanos : nanos;
  }
  if (isObject(value)) return BigInt(Number(value.seconds ?? 0)) * 1_000_000_000n + BigInt(Number(value.nanos ?? 0));
  return 0n;
}

const showDuration = (v: unknown): string => `${Number(durationNanos(v)) / 1e9}s`;

// Length rules shared by strings (in characters and bytes) and bytes fields.
function checkLength(length: number, rules: Rules, keys: [string, string, string], unit: string): Problem[] {
  const { problems, fail } = collector();
  const [exact, min, max] = keys.map((k) => (rules[k] === undefined ? undefined : Number(rules[k])));
  fail(exact !== undefined && length !== exact, keys[0], `must be ${exact} ${unit}`);
  fail(min !== undefined && length < min, keys[1], `must be at least ${min} ${unit}`);
  fail(max !== undefined && length > max, keys[2], `must be at most ${max} ${unit}`);
  return problems;
}

function checkScalar(kind: string, value: unknown, rules: Rules): Problem[] {
  if (kind === 'string') return checkString(String(value ?? ''), rules);
  if (kind === 'bytes') {
    const length = Buffer.from(String(value ?? ''), 'base64').length;
    return rules.ignore_empty && length === 0 ? [] : checkLength(length, rules, ['len', 'min_len', 'max_len'], 'bytes');
  }
  if (kind === 'bool') {
    return rules.const !== undefined && Boolean(value) !== rules.const ? [['const', `must be ${String(rules.const)}`]] : [];
  }
  const integer = INTEGER_KINDS.has(kind);
  const v = toOrdered(value ?? 0, integer);
  if (rules.ignore_empty && Number(v) === 0) return [];
  return checkOrdered(v, rules, (x) => toOrdered(x, integer), String);
}

function checkString(value: string, rules: Rules): Problem[] {
  if (rules.ignore_empty && value === '') return [];
  const { problems, fail } = collector();
  problems.push(
    ...checkLength([...value].length, rules, ['len', 'min_len', 'max_len'], 'characters'),
    ...checkLength(Buffer.byteLength(value), rules, ['len_bytes', 'min_bytes', 'max_bytes'], 'bytes'),
  );
  const str = (k: string) => (typeof rules[k] === 'string' ? (rules[k] as string) : undefined);
  const [constant, prefix, suffix, contains, notContains, pattern] =
    ['const', 'prefix', 'suffix', 'contains', 'not_contains', 'pattern'].map(str);
  const q = JSON.stringify;
  fail(constant !== undefined && value !== constant, 'const', `must equal ${q(constant)}`);
  fail(prefix !== undefined && !value.startsWith(prefix), 'prefix', `must start with ${q(prefix)}`);
  fail(suffix !== undefined && !value.endsWith(suffix), 'suffix', `must end with ${q(suffix)}`);
  fail(contains !== undefined && !value.includes(contains), 'contains', `must contain ${q(contains)}`);
  fail(notContains !== undefined && value.includes(notContains), 'not_contains', `must not contain ${q(notContains)}`);
  if (pattern !== undefined) {
    let re: RegExp | undefined;
    try {
      re = new RegExp(pattern, 'u'); // RE2 syntax; the patterns in Envoy's protos are JS-compatible
    } catch {
      re = undefined; // an RE2-only construct: skip rather than guess
    }
    fail(re !== undefined && !re.test(value), 'pattern', `must match /${pattern}/`);
  }
  const inList = listRule(rules, 'in');
  const notIn = listRule(rules, 'not_in');
  fail(inList.length > 0 && !inList.includes(value), 'in', `must be one of ${q(inList)}`);
  fail(notIn.includes(value), 'not_in', `must not be one of ${q(notIn)}`);
  const wellKnown = rules.well_known_regex;
  if (wellKnown === 'HTTP_HEADER_NAME' || wellKnown === 'HTTP_HEADER_VALUE') {
    const name = wellKnown === 'HTTP_HEADER_NAME';
    const re = rules.strict === false ? HEADER_LOOSE : name ? HEADER_NAME : HEADER_VALUE;
    fail(!re.test(value), 'well_known_regex', `must be a valid header ${name ? 'name' : 'value'}`);
  }
  return problems;
}

function checkEnum(type: Enum, value: unknown, rules: Rules): Problem[] {
  const { problems, fail } = collector();
  const number = typeof value === 'string' ? type.values[value] : Number(value ?? 0);
  const name = (n: unknown) => Object.keys(type.values).find((k) => type.values[k] === Number(n)) ?? String(n);
  const defined = number !== undefined && Object.values(type.values).includes(number);
  fail(Boolean(rules.defined_only) && !defined, 'defined_only', 'must be a defined enum value');
  fail(rules.const !== undefined && number !== Number(rules.const), 'const', `must be ${name(rules.const)}`);
  const inList = listRule(rules, 'in');
  const notIn = listRule(rules, 'not_in');
  const inText = `must be one of [${inList.map(name).join(', ')}]`;
  fail(inList.length > 0 && !inList.some((v) => Number(v) === number), 'in', inText);
  fail(notIn.some((v) => Number(v) === number), 'not_in', `must not be ${name(number)}`);
  return problems;
}

// ---------------------------------------------------------------------------------------------
// walker

class Walker {
  readonly violations: PgvViolation[] = [];
  constructor(private readonly root: Root) {}

  private report(at: Step[], kind: string, problems: Problem[]): void {
    for (const [rule, text] of problems) {
      this.violations.push({ path: at, message: `${text} [(validate.rules).${kind}.${rule}]` });
    }
  }

  message(type: Type, value: unknown, at: Step[]): void {
    if (type.fullName === '.google.protobuf.Any') return this.any(value, at);
    // Other WKTs have special JSON shapes (Struct, Duration, wrappers...) and carry no rules.
    if (type.fullName.startsWith('.google.protobuf.') || !isObject(value)) return;
    if (type.options?.['(validate.disabled)'] || type.options?.['(validate.ignored)']) return;
    for (const oneof of type.oneofsArray) {
      if (!oneof.options?.['(validate.required)']) continue;
      if (oneof.fieldsArray.some((f) => value[jsonName(f.name)] !== undefined)) continue;
      const message = `one of [${oneof.oneof.join(', ')}] is required [(validate.required) on oneof ${oneof.name}]`;
      this.violations.push({ path: at, message });
    }
    for (const field of type.fieldsArray) {
      const raw = value[jsonName(field.name)];
      const rules = fieldRules(field);
      const here = [...at, { field: field.name }];
      // Unset oneof members (and proto3 optionals) are not validated; this also keeps
      // message.required from firing on the members of a oneof that another member satisfies.
      if (field.partOf && raw === undefined) continue;
      if (field instanceof protobuf.MapField) this.map(field, raw, rules, here);
      else if (field.repeated) this.repeated(field, raw, rules, here);
      else this.value(field, raw, rules, here);
    }
  }

  private any(value: unknown, at: Step[], rules?: Rules): void {
    const url = isObject(value) && typeof value['@type'] === 'string' ? value['@type'] : undefined;
    const anyRules = sub(rules, 'any');
    const { problems, fail } = collector();
    const inList = listRule(anyRules, 'in');
    fail(Boolean(anyRules?.required) && value === undefined, 'required', 'is required');
    fail(!!url && inList.length > 0 && !inList.includes(url), 'in', `type must be one of ${JSON.stringify(inList)}`);
    fail(!!url && listRule(anyRules, 'not_in').includes(url), 'not_in', `type must not be ${url}`);
    this.report(at, 'any', problems);
    if (!url || !isObject(value)) return; // an Any without @type (e.g. FilterConfig `config: {}`) is legal
    const inner = this.root.lookupTypeOrEnum(url.slice(url.lastIndexOf('/') + 1));
    if (inner instanceof protobuf.Type) this.message(inner, value, at);
  }

  private value(field: Field | MapField, raw: unknown, rules: Rules | undefined, at: Step[]): void {
    const type = field.resolvedType;
    if (type instanceof protobuf.Type) {
      const wrapped = WRAPPER_KINDS[type.fullName];
      if (sub(rules, 'message')?.required && raw === undefined) {
        this.report(at, 'message', [['required', 'is required']]);
      }
      if (type.fullName === '.google.protobuf.Duration') this.duration(raw, sub(rules, 'duration'), at);
      else if (type.fullName === '.google.protobuf.Any') this.any(raw, at, rules);
      else if (wrapped && raw !== undefined) this.scalar(wrapped, raw, rules, at);
      else if (raw !== undefined && !sub(rules, 'message')?.skip) this.message(type, raw, at);
    } else if (type instanceof protobuf.Enum) {
      const enumRules = sub(rules, 'enum');
      if (enumRules) this.report(at, 'enum', checkEnum(type, raw, enumRules));
    } else {
      this.scalar(field.type, raw, rules, at);
    }
  }

  private scalar(kind: string, raw: unknown, rules: Rules | undefined, at: Step[]): void {
    const kindRules = sub(rules, kind);
    if (kindRules) this.report(at, kind, checkScalar(kind, raw, kindRules));
  }

  private duration(raw: unknown, rules: Rules | undefined, at: Step[]): void {
    if (!rules) return;
    if (raw === undefined) {
      if (rules.required) this.report(at, 'duration', [['required', 'is required']]);
      return; // PGV checks duration bounds only when the field is set
    }
    this.report(at, 'duration', checkOrdered(durationNanos(raw), rules, durationNanos, showDuration));
  }

  private repeated(field: Field, raw: unknown, rules: Rules | undefined, at: Step[]): void {
    const items = Array.isArray(raw) ? raw : [];
    const r = sub(rules, 'repeated');
    if (r && !(r.ignore_empty && items.length === 0)) {
      const { problems, fail } = collector();
      const [min, max] = [r.min_items, r.max_items].map((v) => (v === undefined ? undefined : Number(v)));
      fail(min !== undefined && items.length < min, 'min_items', `must have at least ${min} items`);
      fail(max !== undefined && items.length > max, 'max_items', `must have at most ${max} items`);
      const distinct = new Set(items.map((i) => JSON.stringify(i))).size;
      fail(Boolean(r.unique) && distinct !== items.length, 'unique', 'items must be unique');
      this.report(at, 'repeated', problems);
    }
    items.forEach((item, index) => this.value(field, item, sub(r, 'items'), [...at, { index }]));
  }

  private map(field: MapField, raw: unknown, rules: Rules | undefined, at: Step[]): void {
    const entries = isObject(raw) ? Object.entries(raw) : [];
    const r = sub(rules, 'map');
    if (r && !(r.ignore_empty && entries.length === 0)) {
      const { problems, fail } = collector();
      const [min, max] = [r.min_pairs, r.max_pairs].map((v) => (v === undefined ? undefined : Number(v)));
      fail(min !== undefined && entries.length < min, 'min_pairs', `must have at least ${min} entries`);
      fail(max !== undefined && entries.length > max, 'max_pairs', `must have at most ${max} entries`);
      this.report(at, 'map', problems);
    }
    for (const [key, value] of entries) {
      const here = [...at, { key }];
      this.scalar(field.keyType, key, sub(r, 'keys'), here);
      this.value(field, value, sub(r, 'values'), here);
    }
  }
}

/** proto field name → proto-JSON name, as protoc derives json_name. */
export function jsonName(name: string): string {
  return name.replace(/_(.)/g, (_m, c: string) => c.toUpperCase()).replace(/_$/, '');
}

/** PGV violations in a canonical proto-JSON value (as `buf convert --to #format=json` writes it). */
export async function checkPgvRules(json: unknown, type: string = BOOTSTRAP_TYPE): Promise<PgvViolation[]> {
  const root = await loadRoot();
  const walker = new Walker(root);
  walker.message(root.lookupType(type), json, []);
  return walker.violations;
}

// ---------------------------------------------------------------------------------------------
// files

/** line:col of the deepest node on `steps` in the source YAML (field names snake_case or camelCase). */
function locate(text: string, steps: readonly Step[]): string | undefined {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter });
  let node: unknown = doc.contents;
  let found = node as YamlNode | null;
  for (const step of steps) {
    if ('index' in step) {
      node = isSeq(node) ? node.items[step.index] : undefined;
    } else {
      const names = 'key' in step ? [step.key] : [step.field, jsonName(step.field)];
      node = isMap(node)
        ? node.items.find((pair) => names.includes(String((pair.key as { value?: unknown } | null)?.value)))?.value
        : undefined;
    }
    if (!node || typeof node !== 'object' || !('range' in node)) break;
    found = node as YamlNode;
  }
  const offset = found?.range?.[0];
  if (offset === undefined) return undefined;
  const { line, col } = lineCounter.linePos(offset);
  return `${line}:${col}`;
}

/**
 * Schema check (buf) plus PGV rules for a YAML/JSON file. Messages: `file:line:col path: problem`;
 * for a value that is absent from the file, line:col points at its closest parent.
 */
export async function validateEnvoyPgv(file: string, type: string = BOOTSTRAP_TYPE): Promise<ValidationResult> {
  const image = await buildEnvoySchemaImage();
  const converted = await runBuf([
    'convert', `${image}#format=binpb`, '--type', type, '--from', `${file}#format=yaml`, '--to', '-#format=json',
  ]);
  if (converted.code !== 0) return { ok: false, message: describeFailure(converted.stderr) };
  const violations = await checkPgvRules(JSON.parse(converted.stdout) as unknown, type);
  if (violations.length === 0) return { ok: true, message: `${file}: valid ${type} (schema and PGV rules)` };
  const text = await readFile(file, 'utf8');
  const lines = violations.map((v) => {
    const where = locate(text, v.path);
    return `${file}${where ? `:${where}` : ''} ${formatPath(v.path) || '(root)'}: ${v.message}`;
  });
  return { ok: false, message: lines.join('\n') };
}

/** validateEnvoyPgv for YAML/JSON text (e.g. an EnvoyFilter patch value). */
export function validateEnvoyPgvText(text: string, options: TextValidationOptions = {}): Promise<ValidationResult> {
  const { type = BOOTSTRAP_TYPE, label = `<${type}>` } = options;
  return withTextFile(text, label, (file) => validateEnvoyPgv(file, type));
}
