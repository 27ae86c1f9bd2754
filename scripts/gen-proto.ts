// Generates the TypeScript types of the protos under proto/ into src/generated/proto/ with
// proto-loader-gen-types (shipped with @grpc/proto-loader), using the same loader options the
// server loads the protos with at run time (src/extproc/proto.ts), so the types describe exactly
// the objects grpc-js hands over and accepts.
//
//   npm run gen:proto            regenerate (commit the result)
//   npx tsx scripts/gen-proto.ts --check   exit 1 if the committed output is stale
//
// Module: generateProtoTypes(outDir) for the staleness test.

import { execFile } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const PROTO_ROOT = path.join(REPO_ROOT, 'proto');
export const GENERATED_DIR = path.join(REPO_ROOT, 'src', 'generated', 'proto');

/** Entry files; their imports come along. */
export const PROTO_FILES = [
  'envoy/service/ext_proc/v3/external_processor.proto',
  'kvgate/v1/offload.proto',
  'kvgate/v1/decision_metadata.proto',
];

const require = createRequire(import.meta.url);

/** Writes the generated types for PROTO_FILES into `outDir`. */
export async function generateProtoTypes(outDir: string): Promise<void> {
  const bin = path.join(path.dirname(require.resolve('@grpc/proto-loader/package.json')), 'build', 'bin', 'proto-loader-gen-types.js');
  // Must match PROTO_LOADER_OPTIONS in src/extproc/proto.ts.
  const args = [
    bin,
    '--keepCase', '--longs=String', '--enums=String', '--defaults', '--oneofs',
    '--grpcLib=@grpc/grpc-js', '--importFileExtension=.js',
    '-I', path.relative(REPO_ROOT, PROTO_ROOT), '-O', outDir, ...PROTO_FILES,
  ];
  await new Promise<void>((resolve, reject) => {
    execFile(process.execPath, args, { cwd: REPO_ROOT }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`proto-loader-gen-types failed: ${stderr || err.message}`));
      else resolve();
    });
  });
  // The per-file package types are only useful for files with a service; for the others they are
  // empty shells with unused imports (which strict compiler settings reject).
  for (const file of PROTO_FILES) {
    const source = await readFile(path.join(PROTO_ROOT, file), 'utf8');
    if (!/^\s*service\s+\w+/m.test(source)) await rm(path.join(outDir, `${path.basename(file, '.proto')}.ts`), { force: true });
  }
}

/** Every file under `dir`, relative, sorted, with its content. */
export async function readTree(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  async function walk(d: string): Promise<void> {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      const full = path.join(d, e.name);
      if (e.isDirectory()) await walk(full);
      else out.set(path.relative(dir, full), await readFile(full, 'utf8'));
    }
  }
  await walk(dir);
  return new Map([...out.entries()].sort(([a], [b]) => a.localeCompare(b)));
}

/** Files that differ between the committed output and a fresh generation (empty: up to date). */
export async function staleGeneratedFiles(): Promise<string[]> {
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'kvgate-gen-proto-'));
  try {
    await generateProtoTypes(tmp);
    const fresh = await readTree(tmp);
    const committed = await readTree(GENERATED_DIR);
    const names = new Set([...fresh.keys(), ...committed.keys()]);
    return [...names].filter((n) => fresh.get(n) !== committed.get(n)).sort();
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes('--check')) {
    const stale = await staleGeneratedFiles();
    if (stale.length > 0) {
      process.stderr.write(`generated proto types are stale (npm run gen:proto): ${stale.join(', ')}\n`);
      return 1;
    }
    return 0;
  }
  await rm(GENERATED_DIR, { recursive: true, force: true });
  await generateProtoTypes(GENERATED_DIR);
  process.stdout.write(`wrote ${path.relative(REPO_ROOT, GENERATED_DIR)}\n`);
  return 0;
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
