/**
 * `npm run bench:micro`: the gate's hot-path micro-benchmarks (src/bench/micro/suite.ts), each
 * against a baseline in the same run.
 *
 *   --quick      a few milliseconds per task: checks the suite runs (the tests use it)
 *   --json       one JSON object on stdout: { machine, options, rows }
 *   --only a,b   only groups starting with these (keying, hashing, decide, store, route)
 *   --source     run the TypeScript sources through tsx instead of the compiled build
 *
 * By default the suite runs from dist/ (`npm run bench:micro` builds it first), the code
 * `kvgate serve` runs: through tsx every closure kvgate's code creates is wrapped in a naming
 * call (esbuild's keepNames), which the baselines (JSON.parse, Map lookups) do not pay.
 */
import { parseArgs } from 'node:util';
import { describeMachine, machineLine } from '../src/bench/machine.js';
import { formatMicro } from '../src/bench/micro/format.js';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type * as Suite from '../src/bench/micro/suite.js';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    only: { type: 'string', default: '' },
    source: { type: 'boolean', default: false },
  },
});
const compiled = new URL('../dist/bench/micro/suite.js', import.meta.url);
const fromSource = values.source || !existsSync(fileURLToPath(compiled));
if (fromSource && !values.source) process.stderr.write('bench:micro: dist/ is not built (npm run build): running the sources through tsx\n');
const { DEFAULT_MICRO, QUICK_MICRO, runMicro } = (await import(fromSource ? '../src/bench/micro/suite.js' : compiled.href)) as typeof Suite;
const opts = { ...(values.quick ? QUICK_MICRO : DEFAULT_MICRO), only: values.only.split(',').map((s) => s.trim()).filter(Boolean) };
const machine = describeMachine();
const progress = values.json || !process.stderr.isTTY ? undefined : (g: string) => process.stderr.write(`bench:micro ${g}\n`);
const rows = await runMicro(opts, progress);
if (values.json) {
  process.stdout.write(`${JSON.stringify({ tool: 'bench:micro', build: fromSource ? 'source (tsx)' : 'compiled', machine, options: opts, rows })}\n`);
} else {
  process.stdout.write(`micro-benchmarks (${fromSource ? 'source through tsx' : 'compiled build'}): ${machineLine(machine)}\n\n${formatMicro(rows)}\n`);
}
