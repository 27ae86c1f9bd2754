/**
 * `npm run bench:micro`: the gate's hot-path micro-benchmarks (src/bench/micro/suite.ts), each
 * against a baseline in the same run.
 *
 *   --quick      a few milliseconds per task: checks the suite runs (the tests use it)
 *   --json       one JSON object on stdout: { machine, options, rows }
 *   --only a,b   only groups starting with these (keying, hashing, decide, store, route)
 */
import { parseArgs } from 'node:util';
import { describeMachine, machineLine } from '../src/bench/machine.js';
import { formatMicro } from '../src/bench/micro/format.js';
import { DEFAULT_MICRO, QUICK_MICRO, runMicro } from '../src/bench/micro/suite.js';

const { values } = parseArgs({
  options: { quick: { type: 'boolean', default: false }, json: { type: 'boolean', default: false }, only: { type: 'string', default: '' } },
});
const opts = { ...(values.quick ? QUICK_MICRO : DEFAULT_MICRO), only: values.only.split(',').map((s) => s.trim()).filter(Boolean) };
const machine = describeMachine();
const progress = values.json || !process.stderr.isTTY ? undefined : (g: string) => process.stderr.write(`bench:micro ${g}\n`);
const rows = await runMicro(opts, progress);
if (values.json) {
  process.stdout.write(`${JSON.stringify({ tool: 'bench:micro', machine, options: opts, rows })}\n`);
} else {
  process.stdout.write(`micro-benchmarks: ${machineLine(machine)}\n\n${formatMicro(rows)}\n`);
}
