/**
 * A/B of `understand()` (body decode, JSON parse, keys, prompt block hashing) of two kvgate trees
 * in one process, on the bench's chat bodies: the trees' modules are loaded side by side and timed
 * in alternating rounds, so a burst of someone else's work on a shared machine lands on both alike.
 * Checks first that both trees give the same answer for every body. Prints the medians and the
 * per-round ratio (this tree over the base).
 *
 *   npx tsx scripts/ab-understand.ts --base /path/to/other/tree [--size 32k] [--rounds 15] [--text ascii|sparse|early|late]
 *
 * `--text` puts characters outside ASCII into the bodies' message text, to see what a prompt that
 * is not all ASCII costs: `sparse` one 'ö' about every thousand characters, `early` an 'é' near the
 * start of every message, `late` one at the end of every message; `ascii` (the default) leaves
 * the bench's bodies as they are.
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import { benchRequests, parseSize } from '../src/bench/bodies.js';
import { benchConfig } from '../src/bench/servers.js';
import { median } from '../src/util/median.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string' },
    size: { type: 'string', default: '32k' },
    rounds: { type: 'string', default: '15' },
    text: { type: 'string', default: 'ascii' },
  },
});
if (!values.base) throw new Error('--base DIR: the tree to compare with');
const size = parseSize(values.size!);
const text = values.text!;
if (!['ascii', 'sparse', 'early', 'late'].includes(text)) throw new Error(`--text ${text}: ascii, sparse, early or late`);

type Understand = (req: unknown, cfg: unknown) => unknown;
async function load(tree: string): Promise<Understand> {
  const at = (m: string) => pathToFileURL(path.resolve(tree, 'src', m)).href;
  const hashing = (await import(at('request/hashing.ts'))) as { initHashing: () => Promise<void> };
  await hashing.initHashing();
  return ((await import(at('request/keys.ts'))) as { understand: Understand }).understand;
}
const fns = [await load(values.base), await load(path.resolve(import.meta.dirname, '..'))];

/** The body's text with characters outside ASCII put in, as `--text` says (the JSON stays valid). */
function withText(body: Buffer): Buffer {
  const s = body.toString('utf8');
  if (text === 'sparse') return Buffer.from(s.replace(/(.{999})o/g, '$1ö'));
  if (text === 'early') return Buffer.from(s.replace(/("content":"[^e"]*)e/g, '$1é'));
  if (text === 'late') return Buffer.from(s.replace(/e("\}\]|"\},)/g, 'é$1'));
  return body;
}
const cfg = benchConfig(16, 'ab');
const reqs = benchRequests(size, 64, 3).map((r) => ({ method: 'POST', path: '/v1/chat/completions', headers: new Map(r.headers), body: withText(r.body) }));
for (const r of reqs) {
  if (JSON.stringify(fns[0]!(r, cfg)) !== JSON.stringify(fns[1]!(r, cfg))) throw new Error('the two trees understand a body differently');
}

// About 20 MB of bodies per round and tree.
const inner = Math.max(1, Math.round(20_000_000 / (size * reqs.length)));
const per: number[][] = [[], []];
for (let r = 0; r < Number(values.rounds); r++) {
  for (let t = 0; t < 2; t++) {
    const f = fns[t]!;
    const t0 = process.hrtime.bigint();
    for (let k = 0; k < inner; k++) for (const q of reqs) f(q, cfg);
    per[t]!.push(Number(process.hrtime.bigint() - t0) / 1000 / (inner * reqs.length));
  }
}
const ratios = per[0]!.map((a, i) => per[1]![i]! / a);
console.log(
  `understand, ${values.size} ${text}: base ${median(per[0]!).toFixed(1)} µs, this ${median(per[1]!).toFixed(1)} µs (medians of ${ratios.length}); this/base per round median ${median(ratios).toFixed(3)}, range ${Math.min(...ratios).toFixed(3)}-${Math.max(...ratios).toFixed(3)}`,
);
