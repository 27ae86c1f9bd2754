/**
 * The README's examples work as written. Every fenced YAML block is validated (a kvgate config by
 * the config loader; the Envoy fragment against the file it is quoted from). Every shell line is
 * checked without running anything slow: `kvgate …` command lines parse with the real command
 * definitions (a misspelt flag or a bad value fails), `npm` commands name scripts that exist,
 * files named exist, and `VAR=value` prefixes (in blocks, and in inline code that runs a command)
 * name variables kvgate reads, with OTEL_* values it takes without a warning. Every synopsis block (`kvgate SUB [--flag …]`) names only flags SUB has.
 * An example of a kind this test does not know fails it, so new examples get checked too.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { buildCli } from '../../src/cli/cli.js';
import { parseConfig } from '../../src/config/load.js';
import { CONFIG_SECTIONS } from '../../src/config/schema.js';
import { parseKvgate } from '../helpers/cli-parse.js';
import { ROOT } from '../helpers/kvgate-cli.js';

const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };

interface Block {
  lang: string;
  text: string;
  line: number;
}

function blocks(md: string): Block[] {
  const out: Block[] = [];
  const lines = md.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w*)\s*$/.exec(lines[i]!);
    if (!open) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    out.push({ lang: open[1]!, text: body.join('\n'), line: start + 1 });
  }
  return out;
}

/** Shell words of one command line: quotes respected, a `#` comment dropped. */
function words(line: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quote: string | undefined;
  let started = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else cur += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      started = true;
    } else if (c === '#' && !started && cur === '') {
      break;
    } else if (/\s/.test(c)) {
      if (cur !== '' || started) out.push(cur);
      cur = '';
      started = false;
    } else {
      cur += c;
      started = true;
    }
  }
  if (cur !== '' || started) out.push(cur);
  return out;
}

/** The commands of a shell block: continuation lines joined, split at `;`, `&&`, `|` and loop keywords. */
function commands(text: string): string[][] {
  const joined = text.replace(/\\\n\s*/g, ' ');
  const out: string[][] = [];
  for (const line of joined.split('\n')) {
    let cmd: string[] = [];
    for (const w of words(line.replace(/^\$ /, ''))) {
      if ([';', '&&', '|', 'do', 'done', 'then', 'fi'].includes(w) || w.endsWith(';')) {
        const last = w.endsWith(';') && w !== ';' ? w.slice(0, -1) : undefined;
        if (last && !['do', 'done'].includes(last)) cmd.push(last);
        if (cmd.length) out.push(cmd);
        cmd = [];
        continue;
      }
      cmd.push(w);
    }
    if (cmd.length) out.push(cmd);
  }
  return out;
}

/** Every environment variable a kvgate subcommand's flags read (`KVGATE_*`). */
let flagVars: Promise<Set<string>> | undefined;
function kvgateVars(): Promise<Set<string>> {
  flagVars ??= (async () => {
    const names = (await buildCli(['node', 'kvgate'])).commands.map((c) => c.name());
    const vars = new Set<string>();
    for (const sub of names) {
      const cmd = (await buildCli(['node', 'kvgate', sub])).commands.find((c) => c.name() === sub)!;
      for (const o of cmd.options) if (o.envVar) vars.add(o.envVar);
    }
    return vars;
  })();
  return flagVars;
}

/** The text of the modules that read OpenTelemetry's variables (src/telemetry, src/config). */
const TELEMETRY_SOURCES = ['src/telemetry', 'src/config']
  .flatMap((dir) => readdirSync(path.join(ROOT, dir)).filter((f) => f.endsWith('.ts')).map((f) => readFileSync(path.join(ROOT, dir, f), 'utf8')))
  .join('\n');

/**
 * The `VAR=value` prefixes of an example command: each a variable kvgate reads (a flag's
 * `KVGATE_*`, or an `OTEL_*` the telemetry code names), and OTEL_* values that turn export on
 * with nothing kvgate would warn about at startup (a misspelt protocol, an endpoint without a scheme).
 */
async function checkEnv(env: Record<string, string>, where: string): Promise<void> {
  const flags = await kvgateVars();
  for (const name of Object.keys(env)) {
    if (name.startsWith('KVGATE_')) assert.ok(flags.has(name), `${where}: ${name} is the environment variable of a kvgate flag`);
    else if (name.startsWith('OTEL_')) assert.match(TELEMETRY_SOURCES, new RegExp(`\\b${name}\\b`), `${where}: kvgate's telemetry reads ${name}`);
    else assert.fail(`${where}: an environment variable this test does not know: ${name}`);
  }
  if (Object.keys(env).some((n) => n.startsWith('OTEL_'))) {
    const { tracingRequested } = await import('../../src/telemetry/tracing.js');
    const settings = tracingRequested(env);
    assert.equal(settings.enabled, true, `${where}: these OTEL_* variables turn export on (${settings.description})`);
    assert.deepEqual(settings.warnings, [], `${where}: kvgate warns about none of them`);
  }
}

async function checkCommand(cmd: string[], where: string): Promise<void> {
  let argv = [...cmd];
  const env: Record<string, string> = {};
  for (let m; argv.length && (m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(argv[0]!)); argv = argv.slice(1)) env[m[1]!] = m[2]!;
  await checkEnv(env, where);
  const [head, ...rest] = argv;
  if (head === 'npx' && rest[0] === 'kvgate') return void (await parseKvgate(rest.slice(1)));
  if (head === 'kvgate') return void (await parseKvgate(rest));
  if (head === 'npm') {
    const [verb, ...args] = rest;
    if (verb === 'ci' || verb === 'install') return;
    if (verb === 'start' || verb === 'test') return assert.ok(pkg.scripts[verb], `${where}: npm ${verb} has a script`);
    assert.equal(verb, 'run', `${where}: npm ${verb}`);
    const script = pkg.scripts[args[0]!];
    assert.ok(script, `${where}: npm run ${args[0]} exists`);
    // `npm run sim -- ARGS` runs `kvgate sim ARGS`: those must parse too.
    const sub = /src\/cli\/main\.ts (\S+)/.exec(script)?.[1];
    const dashes = args.indexOf('--');
    if (sub && dashes > 0) await parseKvgate([sub, ...args.slice(dashes + 1)]);
    return;
  }
  if (head === 'docker') {
    const f = rest.indexOf('-f');
    if (f >= 0) assert.ok(existsSync(path.join(ROOT, rest[f + 1]!)), `${where}: ${rest[f + 1]} exists`);
    return;
  }
  if (head === 'envoy') return assert.ok(existsSync(path.join(ROOT, rest[rest.indexOf('-c') + 1]!)), `${where}: envoy config exists`);
  if (head === 'kubectl') {
    rest.forEach((w, i) => { if (w === '-f') assert.ok(existsSync(path.join(ROOT, rest[i + 1]!)), `${where}: ${rest[i + 1]} exists`); });
    return;
  }
  if (head === 'curl' || head === 'for') return;
  assert.fail(`${where}: an example command this test does not know how to check: ${cmd.join(' ')}`);
}

/** The long flags (and their --no- forms) subcommand `sub` accepts. */
async function flagsOf(sub: string): Promise<Set<string>> {
  const program = await buildCli(['node', 'kvgate', sub]);
  const cmd = program.commands.find((c) => c.name() === sub);
  assert.ok(cmd, `kvgate ${sub} exists`);
  return new Set([...cmd.options.map((o) => o.long!), '--help']);
}

/** Inline code spans of the prose that are a command run with variables set: `VAR=value … cmd …`. */
function inlineCommands(): string[] {
  const prose = README.replace(/```[\s\S]*?```/g, '');
  // Spans taken pairwise from the start (matchAll scans left to right), then those shaped as a command.
  return [...prose.matchAll(/`([^`]+)`/g)].map((m) => m[1]!).filter((span) => /^(?:[A-Z_][A-Z0-9_]*=\S+ )+[a-z]/.test(span));
}

describe('README examples', () => {
  const all = blocks(README);

  test('the README has examples of every kind this test checks', () => {
    assert.ok(all.filter((b) => b.lang === 'yaml').length >= 3, "all.filter((b) => b.lang === 'yaml').length >= 3");
    assert.ok(all.filter((b) => b.lang === 'sh').length >= 3, "all.filter((b) => b.lang === 'sh').length >= 3");
    assert.ok(all.filter((b) => /^kvgate \w/m.test(b.text) && b.lang === '').length >= 5, "all.filter((b) => /^kvgate \\w/m.test(b.text) && b.lang === '').length >= 5");
  });

  test('every YAML block: kvgate configs pass the config loader, the Envoy fragment matches its source', () => {
    for (const b of all.filter((x) => x.lang === 'yaml')) {
      const where = `README.md:${b.line}`;
      const doc = parse(b.text) as Record<string, unknown> | unknown[];
      if (!Array.isArray(doc) && ('workers' in doc || 'pools' in doc)) {
        assert.doesNotThrow(() => parseConfig(doc, where), where);
        continue;
      }
      // A fragment of kvgate's config (sections only, no fleet): checked with a one-worker fleet.
      if (!Array.isArray(doc) && Object.keys(doc).every((k) => CONFIG_SECTIONS.has(k) && k !== 'workers' && k !== 'pools')) {
        assert.doesNotThrow(() => parseConfig({ ...doc, workers: [{ id: 'w', cluster: 'w' }] }, where), where);
        continue;
      }
      // Envoy fragments are quoted from a config of envoy/: a route list from envoy/envoy.yaml,
      // virtual hosts and filters from envoy/pools/envoy.yaml. Every name, key and value in the
      // fragment is in that file (its schema is checked where the file is).
      const isRoutes = Array.isArray(doc) && doc.every((r) => typeof r === 'object' && r !== null && 'match' in r);
      const isPools = !Array.isArray(doc) && ('virtual_hosts' in doc || 'http_filters' in doc);
      assert.ok(isRoutes || isPools, `${where}: a YAML example this test does not know how to check`);
      const file = isRoutes ? 'envoy/envoy.yaml' : 'envoy/pools/envoy.yaml';
      const source = readFileSync(path.join(ROOT, file), 'utf8');
      for (const m of b.text.matchAll(/\b([a-z_]+): ([\w./-]+)/g)) assert.ok(source.includes(`${m[1]}: ${m[2]}`) || source.includes(m[2]!), `${where}: ${m[1]}: ${m[2]} is in ${file}`);
    }
  });

  test('every shell line runs a command that exists, with flags that parse', async () => {
    for (const b of all.filter((x) => x.lang === 'sh')) {
      for (const cmd of commands(b.text)) await checkCommand(cmd, `README.md:${b.line}`);
    }
    // Output examples that start with a prompt (`$ kvgate …`) show a command too.
    for (const b of all.filter((x) => x.lang === '')) {
      for (const line of b.text.split('\n').filter((l) => l.startsWith('$ '))) await checkCommand(words(line.slice(2)), `README.md:${b.line}`);
    }
    // So does inline code in the prose that sets variables for a command (`OTEL_…=… npm start`).
    for (const span of inlineCommands()) await checkCommand(words(span), `README.md: \`${span}\``);
  });

  test('every synopsis names only flags its subcommand has', async () => {
    let checked = 0;
    for (const b of all.filter((x) => x.lang === '')) {
      // A synopsis: `kvgate SUB` then bracketed options, possibly over several lines.
      const parts = b.text.split(/^(?=kvgate \w)/m).filter((p) => /^kvgate [\w-]+ /.test(p));
      for (const part of parts) {
        const sub = /^kvgate ([\w-]+)/.exec(part)![1]!;
        const flags = await flagsOf(sub);
        for (const m of part.matchAll(/(?<![\w-])(--[a-z][\w-]*)/g)) assert.ok(flags.has(m[1]!), `README.md:${b.line}: kvgate ${sub} has ${m[1]}`);
        checked++;
      }
    }
    assert.ok(checked >= 5, `${checked} synopses`);
  });

  test('the Configuration example states every setting with its default, as the schema has it', () => {
    // The example is the one place an operator reads defaults: a default changed in the schema
    // and not here would have the README promise one behaviour and the gate do another.
    const example = all.find((b) => b.lang === 'yaml' && /^routing:/m.test(b.text) && /^workers:/m.test(b.text));
    assert.ok(example, 'the Configuration section has the full example');
    const doc = parse(example.text) as Record<string, unknown>;
    const defaults = parseConfig({ workers: [{ id: 'w', cluster: 'w' }] }) as unknown as Record<string, unknown>;
    for (const section of [...CONFIG_SECTIONS].filter((k) => !['workers', 'pools', 'adapters', 'default_pool'].includes(k))) {
      assert.ok(section in doc, `README.md:${example.line}: section ${section} is in the example`);
      const shown = doc[section] as Record<string, unknown>;
      const actual = defaults[section] as Record<string, unknown>;
      assert.deepEqual(Object.keys(shown).sort(), Object.keys(actual).sort(), `README.md:${example.line}: every key of ${section}`);
      for (const [key, value] of Object.entries(shown)) assert.deepEqual(value, actual[key], `README.md:${example.line}: ${section}.${key} is shown as ${JSON.stringify(value)}, its default is ${JSON.stringify(actual[key])}`);
    }
  });

  test('a value a synopsis shows for a flag is its default', async () => {
    let checked = 0;
    for (const b of all.filter((x) => x.lang === '')) {
      for (const part of b.text.split(/^(?=kvgate \w)/m).filter((p) => /^kvgate [\w-]+ /.test(p))) {
        const sub = /^kvgate ([\w-]+)/.exec(part)![1]!;
        const program = await buildCli(['node', 'kvgate', sub]);
        const cmd = program.commands.find((c) => c.name() === sub)!;
        // `[--flag value]`; an upper-case value (FILE, N) is a placeholder, `a|b` a list of choices.
        for (const m of part.matchAll(/\[(--[a-z][\w-]*) ([^\]\s|A-Z][^\]\s|]*)\]/g)) {
          const option = cmd.options.find((o) => o.long === m[1]);
          // A flag without a default is shown with an example value (`--lora-modules a,b`).
          if (option?.defaultValue === undefined) continue;
          assert.equal(String(option?.defaultValue), m[2], `README.md:${b.line}: kvgate ${sub} ${m[1]} defaults to ${String(option?.defaultValue)}`);
          checked++;
        }
      }
    }
    assert.ok(checked >= 5, `${checked} flag values checked`);
  });

  test('the Layout lists folders that exist, and every folder of src/', () => {
    const layout = all.find((b) => b.lang === '' && /^src\/$/m.test(b.text));
    assert.ok(layout, 'a Layout block');
    let parent = '';
    const listed: string[] = [];
    for (const line of layout.text.split('\n')) {
      const m = /^(\s*)([\w.-]+\/)/.exec(line);
      if (!m) continue;
      const dir = m[1] ? `${parent}${m[2]}` : m[2]!;
      if (!m[1]) parent = m[2]!;
      listed.push(dir);
      // dist/ is built, not committed.
      if (dir !== 'dist/') assert.ok(existsSync(path.join(ROOT, dir)), `Layout lists ${dir}, which does not exist`);
    }
    for (const d of readdirSync(path.join(ROOT, 'src'), { withFileTypes: true }).filter((e) => e.isDirectory())) {
      assert.ok(listed.includes(`src/${d.name}/`), `src/${d.name}/ is in the Layout`);
    }
  });

  test("the Kubernetes steps create every Secret kvgate's pods read, before the pods start", () => {
    // A container reads an env var from a Secret when it starts: a Secret created after the apply
    // (even one marked optional) reaches no running pod until it is restarted, so the steps must
    // create each one first. The admin token's Secret is optional, and a pod started without it
    // serves an admin API that anyone reaching the port may use to drain workers.
    const start = README.indexOf('\n### Kubernetes\n');
    assert.ok(start > 0, 'the README has a Kubernetes section');
    const section = README.slice(start, README.indexOf('\n### ', start + 1));
    const steps = blocks(section).find((b) => b.lang === 'sh' && /kubectl apply/.test(b.text));
    assert.ok(steps, 'the Kubernetes section has the kubectl steps');
    const lines = steps.text.split('\n');
    const applyAt = lines.findIndex((l) => /kubectl apply .*envoy\/kubernetes\/kvgate\.yaml/.test(l));
    assert.ok(applyAt >= 0, 'the steps apply envoy/kubernetes/kvgate.yaml');
    const created = new Set(lines.slice(0, applyAt).flatMap((l) => [...l.matchAll(/create secret generic ([\w-]+)/g)].map((m) => m[1]!)));
    const manifest = readFileSync(path.join(ROOT, 'envoy', 'kubernetes', 'kvgate.yaml'), 'utf8');
    const referenced = new Set([...manifest.matchAll(/secretKeyRef:\s*\{\s*name:\s*([\w-]+)/g)].map((m) => m[1]!));
    assert.ok(referenced.size > 0, 'the manifest reads Secrets');
    for (const name of referenced) assert.ok(created.has(name), `the steps create the Secret ${name} before kvgate's pods start`);
  });

  test('no sentence appears twice', () => {
    const prose = README.replace(/```[\s\S]*?```/g, '').replace(/\s+/g, ' ');
    const seen = new Set<string>();
    for (const s of prose.split(/(?<=[.!?])\s+/).map((x) => x.trim()).filter((x) => x.length > 40)) {
      assert.ok(!seen.has(s), `said twice: ${s}`);
      seen.add(s);
    }
  });

  /** The rows of the table under a README heading: each row's first cell. */
  function firstCells(heading: string): string[] {
    const start = README.indexOf(`\n${heading}\n`);
    assert.ok(start >= 0, `the README has ${heading}`);
    const section = README.slice(start + heading.length + 2).split(/\n#{1,3} /)[0]!;
    return section.split('\n').filter((l) => /^\| `/.test(l)).map((l) => l.split(' | ')[0]!);
  }

  test('the span attribute table names exactly the attributes the code sets', () => {
    const source = readFileSync(path.join(ROOT, 'src/telemetry/request-telemetry.ts'), 'utf8');
    // The span's name and the store_error event's attribute are named in the prose, not the table.
    const inCode = new Set([...source.matchAll(/'(kvgate\.[a-z_.]+)'/g)].map((m) => m[1]!).filter((n) => n !== 'kvgate.route' && n !== 'kvgate.store.operation'));
    const documented = new Set(firstCells('### Traces').flatMap((cell) => [...cell.matchAll(/`(kvgate\.[a-z_.]+)`/g)].map((m) => m[1]!)));
    assert.deepEqual([...documented].filter((n) => !inCode.has(n)).sort(), [], 'documented but never set');
    assert.deepEqual([...inCode].filter((n) => !documented.has(n)).sort(), [], 'set but not documented (write each name in full, so a Jaeger user can search for it)');
    assert.match(README, /`kvgate\.route` \(kind SERVER\)/);
    assert.match(README, /`store_error` event \(`kvgate\.store\.operation`/);
  });

  test('the metrics table names exactly the metrics kvgate declares, with their labels', async () => {
    const { Metrics } = await import('../../src/telemetry/metrics.js');
    const m = new Metrics({ fleet: () => [], processMetrics: false });
    const declared = new Map((await m.registry.getMetricsAsJSON()).map((x) => [x.name, x]));
    const documented = new Map<string, string[]>();
    for (const cell of firstCells('### Metrics')) {
      for (const [, name, labels] of cell.matchAll(/`(kvgate_[a-z_]+)(?:\{([a-z_,]+)\})?`/g)) documented.set(name!, labels ? labels.split(',') : []);
    }
    assert.deepEqual([...documented.keys()].filter((n) => !declared.has(n)).sort(), [], 'documented but not declared');
    assert.deepEqual([...declared.keys()].filter((n) => !documented.has(n)).sort(), [], 'declared but not documented');
    // Labels as declared: prom-client keeps them on the metric object.
    for (const [name, labels] of documented) {
      const metric = m.registry.getSingleMetric(name) as unknown as { labelNames?: readonly string[] };
      assert.deepEqual([...labels].sort(), [...(metric.labelNames ?? [])].sort(), `labels of ${name}`);
    }
  });

  test('the log buffer bound the README gives is the one the logger uses', async () => {
    const { DEFAULTS } = await import('../../src/config/defaults.js');
    const m = /through a buffer of at most (\d+) MiB/.exec(README);
    assert.ok(m, 'the Logs section states the bound');
    assert.equal(Number(m[1]) * 1024 * 1024, DEFAULTS.logBufferMaxBytes);
  });

  test('documented: prefix_hit, /debug/decisions, workers without metrics_url, exit statuses, every sim policy', async () => {
    for (const outcome of ['affinity_hit', 'new', 'migrated', 'prefix_hit', 'unkeyed', 'shed', 'rejected', 'fallback']) {
      assert.match(README, new RegExp(`\`${outcome}\` \\(`), `outcome ${outcome} is explained`);
    }
    assert.match(README, /`GET \/debug\/decisions\?limit=N` \| the last decisions/);
    assert.match(README, /\*\*A worker without `metrics_url`\*\* has no load signals/);
    assert.match(README, /\*\*Exit status\*\*/);
    const { POLICY_FACTORIES, POOLED_BOUND } = await import('../../src/sim/policies/registry.js');
    for (const p of [...Object.keys(POLICY_FACTORIES), POOLED_BOUND]) assert.match(README, new RegExp(`^\\| \`${p}\` \\| `, 'm'), `sim policy ${p} is in the README`);
  });

  test('the Jaeger recipe from a checkout: the compose file\'s Jaeger, the ports kvgate and Envoy send to, the names to pick in the UI, the startup line', async () => {
    const heading = '### Traces in Jaeger from a checkout';
    const start = README.indexOf(`\n${heading}\n`);
    assert.ok(start >= 0, `the README has ${heading}`);
    const section = README.slice(start, README.indexOf('\n### ', start + 1));
    const sh = blocks(section).find((b) => b.lang === 'sh');
    assert.ok(sh, 'the recipe has its commands');
    const compose = parse(readFileSync(path.join(ROOT, 'envoy/demo/compose.yaml'), 'utf8')) as {
      services: Record<string, { image?: string; environment?: Record<string, string>; ports?: string[] }>;
    };
    const jaeger = compose.services['jaeger']!;
    const run = commands(sh.text).find((c) => c[0] === 'docker' && c[1] === 'run');
    assert.ok(run, 'the recipe starts Jaeger with docker run');
    // The same image and settings as the compose demo.
    assert.equal(run.at(-1), jaeger.image, 'the image the compose demo runs');
    const envs = run.flatMap((w, i) => (run[i - 1] === '-e' ? [w] : []));
    assert.deepEqual(envs.sort(), Object.entries(jaeger.environment ?? {}).map(([k, v]) => `${k}=${v}`).sort(), 'the environment the compose demo gives Jaeger');
    // Published: the UI port the compose demo publishes, and the OTLP ports its kvgate (HTTP) and its Envoy (gRPC) send to.
    const published = new Set(run.flatMap((w, i) => (run[i - 1] === '-p' ? [w] : [])));
    const otlpHttp = new URL(compose.services['kvgate']!.environment!['OTEL_EXPORTER_OTLP_ENDPOINT']!).port;
    const envoyDemo = readFileSync(path.join(ROOT, 'envoy/demo/envoy.yaml'), 'utf8');
    const otlpGrpc = /address: jaeger, port_value: (\d+)/.exec(envoyDemo)?.[1];
    assert.ok(otlpGrpc, "the compose demo's Envoy sends spans to Jaeger");
    for (const p of [...(jaeger.ports ?? []), `${otlpHttp}:${otlpHttp}`, `${otlpGrpc}:${otlpGrpc}`]) assert.ok(published.has(p), `docker run publishes ${p}`);
    // Each endpoint the gate is given is a published port on this host, the HTTP one for HTTP and the gRPC one for grpc.
    const { tracingRequested, TRACER_NAME } = await import('../../src/telemetry/tracing.js');
    const starts = [...commands(sh.text), ...inlineCommands().filter((c) => section.includes(c)).map(words)].filter((c) => c.some((w) => w.startsWith('OTEL_EXPORTER_OTLP_ENDPOINT=')));
    assert.ok(starts.length >= 2, 'the recipe starts the gate over HTTP and over gRPC');
    for (const c of starts) {
      const env = Object.fromEntries(c.filter((w) => /^OTEL_[A-Z_]+=/.test(w)).map((w) => [w.slice(0, w.indexOf('=')), w.slice(w.indexOf('=') + 1)]));
      const url = new URL(env['OTEL_EXPORTER_OTLP_ENDPOINT']!);
      assert.equal(url.hostname, 'localhost', `${c.join(' ')}: Jaeger on this host`);
      assert.equal(url.port, tracingRequested(env).protocol === 'grpc' ? otlpGrpc : otlpHttp, `${c.join(' ')}: the OTLP port for its protocol`);
    }
    // The startup line, as serve logs it for the HTTP command above.
    const httpEnv = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://localhost:${otlpHttp}` };
    assert.ok(section.includes(`"tracing":true,"detail":"${tracingRequested(httpEnv).description}"`), 'the startup line shown is the one kvgate writes');
    assert.ok(section.includes('`"msg":"tracing"`'), 'the line is named by its msg');
    assert.match(readFileSync(path.join(ROOT, 'src/cli/serve-command.ts'), 'utf8'), /logger\.info\(\{ tracing: tracing\.enabled, detail: tracing\.description \}, 'tracing'\)/);
    // What to pick in the UI: the service name kvgate gives its spans, their name, a parentless span's trace_parent.
    const requestTelemetry = readFileSync(path.join(ROOT, 'src/telemetry/request-telemetry.ts'), 'utf8');
    assert.ok(section.includes(`**Service** \`${TRACER_NAME}\``), 'the service name');
    assert.match(readFileSync(path.join(ROOT, 'src/telemetry/tracing.ts'), 'utf8'), /\[ATTR_SERVICE_NAME\]: TRACER_NAME/);
    assert.match(requestTelemetry, /startSpan\(\s*'kvgate\.route'/);
    assert.ok(section.includes('**Operation** `kvgate.route`'), 'the span name');
    assert.match(requestTelemetry, /let source: ParentSource = 'none'/);
    assert.ok(section.includes('`kvgate.trace_parent` is `none`'), 'a span with no parent');
    assert.match(section, /Not run here/, 'says it was not run');
  });

  test('the Admin API curl examples use the admin port npm start serves on, a path and method the table lists, and a worker envoy/kvgate.yaml has', () => {
    const section = README.slice(README.indexOf('## Admin API'), README.indexOf('## Endpoint-picker mode'));
    const curls = blocks(section).filter((b) => b.lang === 'sh').flatMap((b) => b.text.split('\n')).filter((l) => l.startsWith('curl '));
    assert.ok(curls.length >= 3, 'the Admin API section has curl examples');
    const exampleWorkers = new Set([...readFileSync(path.join(ROOT, 'envoy/kvgate.yaml'), 'utf8').matchAll(/id: (\w+)/g)].map((m) => m[1]!));
    for (const line of curls) {
      const url = /'?127\.0\.0\.1:(\d+)(\/[^\s?']*)/.exec(line);
      assert.ok(url, `${line}: names 127.0.0.1:PORT/PATH`);
      assert.equal(url[1], '9090', `${line}: the admin port`);
      const method = /-X (\w+)/.exec(line)?.[1] ?? 'GET';
      const worker = /^\/workers\/([^/]+)\/state$/.exec(url[2]!)?.[1];
      if (worker) assert.ok(exampleWorkers.has(worker), `${line}: ${worker} is a worker of envoy/kvgate.yaml`);
      const templ = worker ? '/workers/<id>/state' : url[2]!;
      assert.ok([`| \`${method} ${templ}\``, `| \`${method} ${templ}?`].some((row) => section.includes(row)), `${line}: the table lists ${method} ${templ}`);
    }
  });

  test("the quick start names every address envoy/envoy.yaml's worker clusters send to, so a newcomer starts a model server there", () => {
    type Cluster = { name: string; load_assignment?: { endpoints: Array<{ lb_endpoints: Array<{ endpoint: { address: { socket_address: { address: string; port_value: number } } } }> }> } };
    const envoy = parse(readFileSync(path.join(ROOT, 'envoy/envoy.yaml'), 'utf8')) as { static_resources: { clusters: Cluster[] } };
    const workers = envoy.static_resources.clusters.filter((c) => /^worker_\d+$/.test(c.name));
    assert.ok(workers.length >= 1, 'envoy/envoy.yaml has worker clusters');
    const quickStart = README.slice(README.indexOf('## Quick start'), README.indexOf('## The command line'));
    for (const c of workers) {
      for (const e of c.load_assignment!.endpoints.flatMap((x) => x.lb_endpoints)) {
        const { address, port_value } = e.endpoint.address.socket_address;
        assert.ok(quickStart.includes(address), `the quick start names ${c.name}'s host ${address}`);
        assert.match(quickStart, new RegExp(`:${port_value}\\b`), `the quick start names ${c.name}'s port ${port_value}`);
      }
    }
  });
});
