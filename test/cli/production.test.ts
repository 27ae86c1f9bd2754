/**
 * The production shape: the package's binary runs the compiled build, `kvgate serve` imports
 * nothing it does not serve with (no simulator, benchmark, demo or chart code, no development
 * dependency), and the Dockerfile builds that shape. Docker itself is not available here: the
 * Dockerfile is checked as text.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ROOT } from '../helpers/kvgate-cli.js';

interface Pkg {
  version: string;
  bin: Record<string, string>;
  scripts: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  engines: { node: string };
}
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Pkg;

/**
 * The modules a source file reaches: static imports (not `import type`) and, when `dynamic`,
 * `import('literal')` too. Returns the source files reached and the bare packages they import.
 */
function reach(entries: string[], dynamic: (file: string) => boolean): { files: Set<string>; packages: Map<string, string> } {
  const files = new Set<string>();
  const packages = new Map<string, string>();
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    const src = readFileSync(file, 'utf8');
    const specs: string[] = [];
    for (const m of src.matchAll(/^\s*(?:import|export)\s+(?!type\b)[^'";]*?\bfrom\s+'([^']+)'|^\s*import\s+'([^']+)'/gm)) specs.push((m[1] ?? m[2])!);
    if (dynamic(file)) for (const m of src.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g)) specs.push(m[1]!);
    for (const spec of specs) {
      if (spec.startsWith('.')) visit(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')));
      else if (!spec.startsWith('node:')) {
        const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
        if (!packages.has(name)) packages.set(name, path.relative(ROOT, file));
      }
    }
  };
  for (const e of entries) visit(path.join(ROOT, e));
  return { files, packages };
}

describe('production shape', () => {
  test('kvgate serve reaches only serving code and production dependencies', () => {
    // cli.ts loads subcommands other than `serve` lazily, so its dynamic imports are not followed;
    // everything `serve` itself imports (statically or in its action) is.
    const { files, packages } = reach(['src/cli/main.ts'], (f) => !f.endsWith(path.join('cli', 'cli.ts')));
    const rel = [...files].map((f) => path.relative(ROOT, f));
    assert.ok(rel.includes('src/app.ts'), 'the walk reaches the app');
    assert.ok(rel.includes('src/extproc/server.ts'), "rel.includes('src/extproc/server.ts')");
    const notServing = rel.filter((f) => /^src\/(sim|bench|demo|fake-worker)\//.test(f) || /^src\/cli\/(sim|bench|demo|fake-worker|status|try)-command\.ts$/.test(f));
    assert.deepEqual(notServing, [], 'serve imports code it does not serve with');
    const dev = [...packages].filter(([name]) => !(name in pkg.dependencies)).map(([n, f]) => `${n} (${f})`);
    assert.deepEqual(dev, [], 'serve imports packages outside production dependencies');
  });

  test('fake-worker, demo, status and try run on production dependencies; sim and bench may need dev ones', () => {
    for (const cmd of ['fake-worker', 'demo', 'status', 'try']) {
      const { packages } = reach([`src/cli/${cmd}-command.ts`], () => true);
      const dev = [...packages].filter(([name]) => !(name in pkg.dependencies)).map(([n, f]) => `${n} (${f})`);
      assert.deepEqual(dev, [], `kvgate ${cmd} imports packages outside production dependencies`);
    }
    for (const cmd of ['sim', 'bench']) {
      const { packages } = reach([`src/cli/${cmd}-command.ts`], () => true);
      for (const [name, file] of packages) assert.ok(name in pkg.dependencies || name in pkg.devDependencies, `${name} (${file}) is declared`);
    }
  });

  test("the in-process store allocates nothing for entries it may hold one day (a gate's start-up)", async () => {
    // lru-cache allocates `max` slots at construction; the store's million-entry bounds did that
    // for tens of megabytes and ~0.15 s of every start. Bounded by maxSize, they grow with use.
    const { MemoryStore } = await import('../../src/state/memory-store.js');
    new MemoryStore(); // modules loaded, caches warm
    const before = process.memoryUsage().heapUsed;
    const store = new MemoryStore();
    const grown = process.memoryUsage().heapUsed - before;
    await store.close();
    assert.ok(grown < 4 * 1024 * 1024, `a new MemoryStore took ${(grown / 1048576).toFixed(1)} MB of heap`);
  });

  test('development tools are not production dependencies', () => {
    for (const tool of ['tsx', 'typescript', 'tinybench', 'cli-progress', '@datastructures-js/priority-queue', 'vega', 'vega-lite', 'fast-check', '@bufbuild/buf']) {
      assert.ok(!(tool in pkg.dependencies), `${tool} is a production dependency`);
    }
  });

  test('the binary runs the compiled build; npm ci builds it and npm start runs it', () => {
    assert.equal(pkg.bin['kvgate'], 'bin/kvgate.js');
    const bin = readFileSync(path.join(ROOT, 'bin/kvgate.js'), 'utf8');
    assert.match(bin, /dist\/cli\/main\.js/);
    assert.doesNotMatch(bin, /tsx/, 'no TypeScript compiler at run time');
    assert.match(pkg.scripts['prepare']!, /\bbuild\b/, 'npm ci runs the build (prepare)');
    assert.match(pkg.scripts['build']!, /tsc -p tsconfig\.build\.json/);
    assert.match(pkg.scripts['start']!, /^node bin\/kvgate\.js serve /);
  });

  test('bin/kvgate.js --version prints the package version (when dist/ is built)', (t) => {
    if (!existsSync(path.join(ROOT, 'dist/cli/main.js'))) return t.skip('dist/ not built (npm run build)');
    const r = spawnSync(process.execPath, [path.join(ROOT, 'bin/kvgate.js'), '--version'], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), pkg.version);
  });

  test('bin/kvgate.js bench runs on the compiled build, client threads included (when dist/ is built)', (t) => {
    // The client threads once started only from load-worker.ts through tsx, so the binary's bench
    // failed (no .ts in dist/, and tsx is a development tool); the report says which build ran.
    if (!existsSync(path.join(ROOT, 'dist/bench/load-worker.js'))) return t.skip('dist/ not built (npm run build)');
    const args = ['bench', '--sizes', '2k', '--stores', 'memory', '--rounds', '1', '--duration', '0.2', '--warmup', '0.1', '--concurrency', '4', '--no-half', '--json'];
    const r = spawnSync(process.execPath, [path.join(ROOT, 'bin/kvgate.js'), ...args], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    const report = JSON.parse(r.stdout) as { build: string; runs: Array<{ target: string; decisions_per_s: number; errors: number }> };
    assert.equal(report.build, 'compiled');
    const memory = report.runs.find((row) => row.target === 'memory');
    assert.ok(memory && memory.decisions_per_s > 0 && memory.errors === 0, JSON.stringify(report.runs));
  });

  test("Dockerfile: the run stage holds every file kvgate serve reads from beside its code, and the context does not leave one out", async () => {
    // Compiled code runs from dist/<same path as under src/>, so a file a module finds from its
    // own location (new URL('../../x', import.meta.url), or proto.ts's PROTO_ROOT) is found at the
    // same place relative to the image's /app. Each such top-level path must be copied there.
    const { files } = reach(['src/cli/main.ts'], (f) => !f.endsWith(path.join('cli', 'cli.ts')));
    files.add(path.join(ROOT, 'src/cli/cli.ts'));
    const needed = new Set(['dist', 'node_modules', 'bin']);
    for (const file of files) {
      const src = readFileSync(file, 'utf8');
      for (const m of src.matchAll(/new URL\(\s*'(\.\.\/[^']+)'\s*,\s*import\.meta\.url\s*\)/g)) {
        const rel = path.relative(ROOT, path.resolve(path.dirname(file), m[1]!));
        if (!rel.startsWith('src' + path.sep)) needed.add(rel.split(path.sep)[0]!);
      }
    }
    const { PROTO_ROOT } = await import('../../src/extproc/proto.js');
    needed.add(path.relative(ROOT, PROTO_ROOT).split(path.sep)[0]!);
    assert.ok(needed.has('package.json'), 'the walk finds the version read from package.json');
    assert.ok(needed.has('proto'), 'the walk finds the protos loaded at start');
    const text = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const run = text.slice(text.lastIndexOf('\nFROM '));
    assert.match(run, /^WORKDIR \/app$/m, 'the run stage works in /app');
    // What lands under /app: the destination's name, or each source's when it is a folder (./).
    const copied = new Set<string>();
    for (const m of run.matchAll(/^COPY\s+(.+)$/gm)) {
      const parts = m[1]!.trim().split(/\s+/).filter((x) => !x.startsWith('--'));
      const dest = parts.at(-1)!;
      const names = dest.endsWith('/') || dest === '.' ? parts.slice(0, -1).map((src) => path.posix.basename(src)) : [path.posix.normalize(dest)];
      for (const n of names) copied.add(n);
    }
    for (const p of needed) assert.ok(copied.has(p) || copied.has(`/app/${p}`), `the run stage copies ${p} (kvgate serve reads it)`);
    // A path the run stage copies from the build context must not be left out of the context.
    const ignored = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    for (const p of ['proto', 'bin', 'package.json', 'package-lock.json', 'src', 'tsconfig.json', 'tsconfig.build.json']) {
      assert.ok(!ignored.includes(p), `.dockerignore leaves out ${p}, which the image needs`);
    }
    assert.doesNotMatch(run, /^HEALTHCHECK\b/m, 'no HEALTHCHECK: Kubernetes ignores it, and its probes use grpc.health.v1');
  });

  test('Dockerfile: multi-stage, compiled, production dependencies, non-root; what it copies exists', () => {
    const text = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const froms = [...text.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]!);
    assert.equal(froms.length, 2, 'a build stage and a run stage');
    // The image's Node is a major CI runs the suite on (Node 20, then scripts/test-node-majors.sh's)
    // and one package.json's engines admits.
    const major = Number(/^node:(\d+)/.exec(froms[1]!)?.[1]);
    const script = readFileSync(path.join(ROOT, 'scripts/test-node-majors.sh'), 'utf8');
    const tested = [20, ...(/^MAJORS=\(([\d ]+)\)$/m.exec(script)?.[1] ?? '').split(' ').map(Number)];
    assert.ok(tested.includes(major), `run stage on Node ${major}, CI tests ${tested.join(', ')}`);
    assert.ok(engineAdmits(pkg.engines.node, major), `engines ${pkg.engines.node} admits Node ${major}`);
    assert.match(text, /npm run build/);
    assert.match(text, /npm prune --omit=dev/);
    const run = text.slice(text.lastIndexOf('\nFROM '));
    // A numeric, non-zero user: Kubernetes' runAsNonRoot can only verify a uid; a name such as
    // `node` makes the kubelet refuse the container (CreateContainerConfigError).
    const user = /^USER\s+(\S+)\s*$/m.exec(run)?.[1];
    assert.ok(user, 'the run stage sets USER');
    const uid = /^(\d+)(?::(\d+))?$/.exec(user);
    assert.ok(uid, `USER ${user} is numeric (uid or uid:gid)`);
    assert.notEqual(Number(uid[1]), 0, 'the run stage is not root');
    assert.doesNotMatch(run, /COPY src\b/, 'no TypeScript sources in the image');
    assert.match(run, /COPY --from=build \/app\/dist \.\/dist/);
    assert.match(run, /ENTRYPOINT \["node", "bin\/kvgate\.js"\]/);
    assert.match(run, /CMD \["serve", "--config", "\/etc\/kvgate\/kvgate\.yaml"\]/);
    for (const m of text.matchAll(/^COPY\s+(?!--from)(.+)$/gm)) {
      const parts = m[1]!.trim().split(/\s+/);
      for (const src of parts.slice(0, -1)) assert.ok(existsSync(path.join(ROOT, src)), `COPY ${src}`);
    }
    const ignored = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8').split('\n');
    for (const p of ['node_modules', 'dist']) assert.ok(ignored.includes(p), `.dockerignore leaves out ${p} (built inside)`);
  });
});

/** Whether an engines range of `^X.Y.Z` and `>=X` clauses joined by `||` admits a major. */
function engineAdmits(range: string, major: number): boolean {
  return range.split('||').some((clause) => {
    const c = clause.trim();
    const caret = /^\^(\d+)\./.exec(c);
    if (caret) return Number(caret[1]) === major;
    const atLeast = /^>=\s*(\d+)/.exec(c);
    return atLeast !== null && major >= Number(atLeast[1]);
  });
}
