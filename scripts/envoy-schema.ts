// Validates Envoy configs offline against Envoy's own protobuf schema with `buf convert`.
//
// The schema comes from the Envoy API protos that @grpc/grpc-js-xds ships in node_modules; nothing
// upstream is copied into the repository. The descriptor image is built once into .build/envoy-schema/
// (gitignored) and rebuilt when any proto it was built from, the patched validate.proto, the proto
// list or the buf version changes.
//
// Module: buildEnvoySchemaImage(), validateEnvoyYaml(file, type), validateEnvoyText(text, options).
// Script: npx tsx scripts/envoy-schema.ts [--no-pgv] [files...]
//   No files: every Envoy bootstrap under envoy/. Also checks PGV rules (scripts/envoy-pgv.ts)
//   unless --no-pgv. Exit 1 if any file fails.

import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, readlink, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SCHEMA_DIR = path.join(REPO_ROOT, '.build', 'envoy-schema');
export const BOOTSTRAP_TYPE = 'envoy.config.bootstrap.v3.Bootstrap';

/**
 * Every proto whose types our configs reference by name (`@type` in typed_config,
 * typed_extension_protocol_options, typed_per_filter_config, Istio EnvoyFilter patch values).
 * `buf convert` resolves an Any only if its type is in the image, so a config that uses a new
 * extension fails with "proto: not found" until its proto is added here. Their imports (listener,
 * route, cluster, core, ...) come along automatically.
 */
export const ENVOY_SCHEMA_PROTOS: readonly string[] = [
  'envoy/config/bootstrap/v3/bootstrap.proto',
  // Listener, Filter, RouteConfiguration, Route and FilterConfig (route_components.proto), Cluster
  // (ORIGINAL_DST's OriginalDstLbConfig lives inside it): imported by bootstrap, listed so
  // fragments of these types stay resolvable even if bootstrap's imports change.
  'envoy/config/listener/v3/listener.proto',
  'envoy/config/route/v3/route.proto',
  'envoy/config/route/v3/route_components.proto',
  'envoy/config/cluster/v3/cluster.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/http/header_mutation/v3/header_mutation.proto',
  'envoy/extensions/filters/http/health_check/v3/health_check.proto',
  'envoy/extensions/filters/http/set_metadata/v3/set_metadata.proto',
  // HCM early_header_mutation_extensions: strips client copies of routing headers before the
  // route is picked (the extension's mutations are config.common.mutation_rules.v3.HeaderMutation).
  'envoy/extensions/http/early_header_mutation/header_mutation/v3/header_mutation.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
  'envoy/config/trace/v3/opentelemetry.proto',
  // Common in deployment configs (access logs, TLS to and from Envoy).
  'envoy/extensions/access_loggers/file/v3/file.proto',
  'envoy/extensions/access_loggers/stream/v3/stream.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
];

/**
 * Rule fields that Envoy's protos set but the validate.proto in the npm copy predates. Numbers are
 * the upstream protoc-gen-validate ones (kept if free), so the descriptors match upstream PGV.
 */
const MISSING_PGV_RULE_FIELDS: ReadonlyArray<{ name: string; type: string; numbers: Record<string, number> }> = [
  {
    name: 'ignore_empty',
    type: 'bool',
    numbers: {
      FloatRules: 8, DoubleRules: 8, Int32Rules: 8, Int64Rules: 8, UInt32Rules: 8, UInt64Rules: 8,
      SInt32Rules: 8, SInt64Rules: 8, Fixed32Rules: 8, Fixed64Rules: 8, SFixed32Rules: 8, SFixed64Rules: 8,
      StringRules: 26, BytesRules: 14, RepeatedRules: 5, MapRules: 6,
    },
  },
];

// Bump when the build procedure changes in a way the inputs do not show.
const BUILDER_VERSION = 1;

export interface ValidationResult {
  ok: boolean;
  message: string;
}

export interface TextValidationOptions {
  /** Fully-qualified message type, e.g. envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter. */
  type?: string;
  /** Name to show in diagnostics instead of the temp file's path. */
  label?: string;
}

const require = createRequire(import.meta.url);

/** The npm copy of the Envoy/xDS/PGV/googleapis protos. */
export function envoyProtoDeps(): string {
  return path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
}

// The platform binary directly: the @bufbuild/buf wrapper would cost a node start per call.
function bufCommand(): { file: string; prefix: string[] } {
  const arch = process.platform === 'linux' && process.arch === 'arm64' ? 'aarch64' : process.arch;
  const exe = process.platform === 'win32' ? 'buf.exe' : 'buf';
  try {
    return { file: require.resolve(`@bufbuild/buf-${process.platform}-${arch}/bin/${exe}`), prefix: [] };
  } catch {
    return { file: process.execPath, prefix: [require.resolve('@bufbuild/buf/bin/buf')] };
  }
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs buf; rejects only if it could not start, a non-zero exit is in `code`. */
export function runBuf(args: string[], cwd = process.cwd()): Promise<RunResult> {
  const { file, prefix } = bufCommand();
  return new Promise((resolve, reject) => {
    execFile(file, [...prefix, ...args], { cwd, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') {
        reject(error);
        return;
      }
      resolve({ code: error ? Number(error.code) : 0, stdout, stderr });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// validate.proto patching

/** Index just past the `}` that closes the block whose `{` is at `open`, skipping comments and strings. */
function matchingBrace(src: string, open: number): number {
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    const c = src[i];
    if (c === '/' && src[i + 1] === '/') {
      const eol = src.indexOf('\n', i);
      i = eol < 0 ? src.length : eol;
    } else if (c === '/' && src[i + 1] === '*') {
      const end = src.indexOf('*/', i + 2);
      i = end < 0 ? src.length : end + 1;
    } else if (c === '"' || c === "'") {
      for (i++; i < src.length && src[i] !== c; i++) if (src[i] === '\\') i++;
    } else if (c === '{') {
      depth++;
    } else if (c === '}' && --depth === 0) {
      return i + 1;
    }
  }
  throw new Error(`unbalanced braces in validate.proto at offset ${open}`);
}

/**
 * Adds the rule fields in MISSING_PGV_RULE_FIELDS to the npm copy of validate/validate.proto.
 * Fields already declared are left alone, so a newer copy passes through unchanged (bar CRLF).
 */
export function patchValidateProto(source: string): string {
  let src = source.replace(/\r\n/g, '\n');
  for (const field of MISSING_PGV_RULE_FIELDS) {
    for (const [message, preferred] of Object.entries(field.numbers)) {
      const head = new RegExp(`^message\\s+${message}\\s*\\{`, 'm').exec(src);
      if (!head) continue;
      const open = head.index + head[0].length - 1;
      const close = matchingBrace(src, open) - 1;
      const body = src.slice(open + 1, close);
      const declared = [...body.matchAll(/^\s*(?:optional\s+|repeated\s+|required\s+)?[\w.]+\s+(\w+)\s*=\s*(\d+)/gm)];
      if (declared.some((m) => m[1] === field.name)) continue;
      const used = new Set(declared.map((m) => Number(m[2])));
      const number = used.has(preferred) ? Math.max(0, ...used) + 1 : preferred;
      const line = `    // Added by kvgate's scripts/envoy-schema.ts: newer PGV rule that Envoy's protos use.\n` +
        `    optional ${field.type} ${field.name} = ${number};\n`;
      src = src.slice(0, close) + line + src.slice(close);
    }
  }
  return `// Generated by kvgate scripts/envoy-schema.ts from @grpc/grpc-js-xds deps; do not edit.\n${src}`;
}

// ---------------------------------------------------------------------------------------------
// image build + cache

interface Manifest {
  key: string;
  /** Every file in the image that came from disk (not buf's built-in WKTs), with its sha256. */
  files: Record<string, string>;
}

const sha256 = (data: string | Buffer): string => createHash('sha256').update(data).digest('hex');

async function readOrNull(file: string): Promise<Buffer | null> {
  try {
    return await readFile(file);
  } catch {
    return null;
  }
}

async function writeAtomic(file: string, data: string | Buffer): Promise<void> {
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, data);
  await rename(tmp, file);
}

// A symlink per top-level package keeps the root cheap; buf follows symlinks by default. The
// npm validate/ tree is deliberately not linked: the patched copy replaces it.
async function assembleRoot(root: string, deps: string, validateProto: string): Promise<void> {
  const links: Record<string, string> = {
    envoy: path.join(deps, 'envoy-api', 'envoy'),
    xds: path.join(deps, 'xds', 'xds'),
    udpa: path.join(deps, 'xds', 'udpa'),
    google: path.join(deps, 'googleapis', 'google'),
  };
  await mkdir(path.join(root, 'validate'), { recursive: true });
  for (const [name, target] of Object.entries(links)) {
    const at = path.join(root, name);
    if ((await readlink(at).catch(() => null)) === target) continue;
    const tmp = `${at}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    await symlink(target, tmp, 'dir');
    await rename(tmp, at);
  }
  // An explicit config stops buf from adopting a buf.yaml further up the tree as the workspace.
  await writeAtomic(path.join(root, 'buf.yaml'), 'version: v2\n');
  await writeAtomic(path.join(root, 'validate', 'validate.proto'), validateProto);
}

async function isFresh(manifestFile: string, image: string, root: string, key: string): Promise<boolean> {
  const raw = await readOrNull(manifestFile);
  if (!raw || !(await readOrNull(image))) return false;
  let manifest: Manifest;
  try {
    manifest = JSON.parse(raw.toString('utf8')) as Manifest;
  } catch {
    return false;
  }
  if (manifest.key !== key) return false;
  for (const [file, hash] of Object.entries(manifest.files)) {
    const data = await readOrNull(path.join(root, file));
    if (!data || sha256(data) !== hash) return false;
  }
  return true;
}

async function buildImage(): Promise<string> {
  const deps = envoyProtoDeps();
  const root = path.join(SCHEMA_DIR, 'root');
  const image = path.join(SCHEMA_DIR, 'envoy.binpb');
  const manifestFile = path.join(SCHEMA_DIR, 'manifest.json');
  const validateProto = patchValidateProto(
    await readFile(path.join(deps, 'protoc-gen-validate', 'validate', 'validate.proto'), 'utf8'),
  );
  const bufVersion = JSON.parse(await readFile(require.resolve('@bufbuild/buf/package.json'), 'utf8')) as {
    version?: string;
  };
  const key = sha256(JSON.stringify({
    builder: BUILDER_VERSION,
    buf: bufVersion.version,
    deps,
    protos: [...ENVOY_SCHEMA_PROTOS].sort(),
    validate: sha256(validateProto),
  }));
  if (await isFresh(manifestFile, image, root, key)) return image;

  await assembleRoot(root, deps, validateProto);
  // Built beside the target and renamed in, so a concurrent test process never reads half an image.
  const tmpImage = `${image}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const pathArgs = ENVOY_SCHEMA_PROTOS.flatMap((p) => ['--path', p]);
  const built = await runBuf(['build', '--exclude-source-info', '-o', `${tmpImage}#format=binpb`, ...pathArgs], root);
  if (built.code !== 0) {
    await rm(tmpImage, { force: true });
    const hint = /cannot resolve message field name for `validate\./.test(built.stderr)
      ? '\n(validate.proto from npm lacks a rule field Envoy uses: add it to MISSING_PGV_RULE_FIELDS)'
      : '';
    throw new Error(`buf build of the Envoy schema image failed:\n${built.stderr.trim()}${hint}`);
  }
  const listed = await runBuf(['ls-files', '--include-imports', `${tmpImage}#format=binpb`], root);
  if (listed.code !== 0) throw new Error(`buf ls-files failed:\n${listed.stderr.trim()}`);
  const files: Record<string, string> = {};
  for (const file of listed.stdout.split('\n').filter(Boolean)) {
    const data = await readOrNull(path.join(root, file));
    if (data) files[file] = sha256(data); // absent: a WKT compiled into buf, covered by its version
  }
  await rename(tmpImage, image);
  await writeAtomic(manifestFile, JSON.stringify({ key, files } satisfies Manifest, null, 1));
  return image;
}

let imagePromise: Promise<string> | undefined;

/** Path of the Envoy schema image, building it on first use (cached across processes). */
export function buildEnvoySchemaImage(): Promise<string> {
  imagePromise ??= buildImage().catch((error: unknown) => {
    imagePromise = undefined; // let a later call retry instead of caching the failure
    throw error;
  });
  return imagePromise;
}

// ---------------------------------------------------------------------------------------------
// validation

/** buf's stderr as a message that starts at file:line:col, with a hint for types missing from the image. */
export function describeFailure(stderr: string): string {
  // Start the message at buf's file:line:col; the prefix only says which flag was parsed.
  let message = stderr.trim().replace(/^Failure: --from: (?:yaml|json) unmarshal: /, '');
  // Go's protobuf errors randomly use U+00A0 after "proto:" to discourage matching; \s covers it.
  if (/proto:\s+not found/.test(message)) {
    const types = [...new Set([...message.matchAll(/type\.googleapis\.com\/([\w.]+)/g)].map((m) => m[1]))];
    message += `\n(type ${types.join(', ') || 'named by @type'} is not in the Envoy schema image: ` +
      'check the spelling, or add its .proto to ENVOY_SCHEMA_PROTOS in scripts/envoy-schema.ts)';
  }
  return message;
}

/** Checks a YAML or JSON file against `type` (default: Envoy's Bootstrap). */
export async function validateEnvoyYaml(file: string, type: string = BOOTSTRAP_TYPE): Promise<ValidationResult> {
  const image = await buildEnvoySchemaImage();
  // Always parse as YAML, JSON included: buf's JSON reader silently drops unknown fields (seen with
  // buf 1.75), its YAML reader rejects them, and JSON is YAML. Naming the format also stops buf from
  // reading .yml as binary.
  const result = await runBuf([
    'convert', `${image}#format=binpb`, '--type', type,
    '--from', `${file}#format=yaml`,
    // buf special-cases the literal /dev/null (and refuses a format on it).
    '--to', '/dev/null',
  ]);
  return result.code === 0
    ? { ok: true, message: `${file}: valid ${type}` }
    : { ok: false, message: describeFailure(result.stderr) };
}

/**
 * Checks YAML/JSON text, e.g. an Istio EnvoyFilter patch value as an HttpFilter or an Any.
 * Diagnostics name `label` instead of the temp file.
 */
export async function validateEnvoyText(text: string, options: TextValidationOptions = {}): Promise<ValidationResult> {
  const { type = BOOTSTRAP_TYPE, label = `<${type}>` } = options;
  return withTextFile(text, label, (file) => validateEnvoyYaml(file, type));
}

/** Runs a file validator on `text` via a temp file, showing `label` in place of its path. */
export async function withTextFile(
  text: string,
  label: string,
  validate: (file: string) => Promise<ValidationResult>,
): Promise<ValidationResult> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvgate-envoy-schema-'));
  try {
    const file = path.join(dir, 'input.yaml');
    await writeFile(file, text);
    const result = await validate(file);
    return { ok: result.ok, message: result.message.split(file).join(label) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// discovery + CLI

/** True for a single-document YAML file whose root mapping is an Envoy bootstrap. */
export function isEnvoyBootstrapYaml(text: string): boolean {
  const docs = parseAllDocuments(text);
  if (!Array.isArray(docs) || docs.length !== 1) return false;
  const [doc] = docs;
  if (!doc || doc.errors.length > 0) return false;
  const value: unknown = doc.toJS();
  return typeof value === 'object' && value !== null && !Array.isArray(value) &&
    ('static_resources' in value || 'staticResources' in value);
}

/** Every Envoy bootstrap (*.yaml/*.yml with a top-level static_resources key) under `dir`, sorted. */
export async function findEnvoyBootstraps(dir: string = path.join(REPO_ROOT, 'envoy')): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.') || entry.name === 'node_modules') continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      found.push(...(await findEnvoyBootstraps(full)));
    } else if (entry.isFile() && /\.ya?ml$/i.test(entry.name) && isEnvoyBootstrapYaml(await readFile(full, 'utf8'))) {
      found.push(full);
    }
  }
  return found.sort();
}

async function main(argv: string[]): Promise<number> {
  const pgv = !argv.includes('--no-pgv');
  const args = argv.filter((a) => a !== '--no-pgv');
  // Loaded lazily: envoy-pgv builds on this module.
  const validate = pgv ? (await import('./envoy-pgv.js')).validateEnvoyPgv : validateEnvoyYaml;
  // Relative paths keep buf's file:line:col short and clickable.
  const files = (args.length > 0 ? args : await findEnvoyBootstraps()).map((file) => {
    const rel = path.relative(process.cwd(), file);
    return rel && !rel.startsWith('..') && !path.isAbsolute(rel) ? rel : file;
  });
  if (files.length === 0) {
    process.stderr.write('no Envoy bootstrap files found under envoy/\n');
    return 1;
  }
  const results = await Promise.all(files.map((file) => validate(file)));
  let failed = 0;
  results.forEach((result, i) => {
    const file = files[i] ?? '';
    if (result.ok) {
      process.stdout.write(`ok    ${file}\n`);
    } else {
      failed++;
      process.stderr.write(`FAIL  ${file}\n${result.message}\n`);
    }
  });
  return failed > 0 ? 1 : 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => { process.exitCode = code; },
    (error: unknown) => {
      process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
      process.exitCode = 1;
    },
  );
}
