/**
 * Run as a child process with a small heap (see test/faults/request-properties.test.ts): feeds
 * request understanding (src/request/) adversarial inputs at the largest body size kvgate accepts
 * and prints, as one JSON line, each shape's time as a multiple of a plain prompt of the same
 * size, measured in this same run. Running out of heap kills the process: that is the memory bound.
 */
import { DEFAULTS } from '../../src/config/defaults.js';
import { parseConfig } from '../../src/config/load.js';
import { initHashing } from '../../src/request/hashing.js';
import { understand } from '../../src/request/keys.js';
import type { RequestInfo } from '../../src/request/request.js';

const SIZE = Number(process.env.KVGATE_BOUNDS_BYTES ?? DEFAULTS.maxBodyBytes) - 1024;
const cfg = parseConfig({ workers: [{ id: 'w', cluster: 'w' }] });

/** Repeats `unit` between `head` and `tail` until the whole is about SIZE bytes. */
function fill(head: string, unit: string, sep: string, tail: string): string {
  const n = Math.floor((SIZE - head.length - tail.length) / (unit.length + sep.length));
  return head + Array.from({ length: n }, () => unit).join(sep) + tail;
}
const nest = (open: string, close: string) => {
  const n = Math.floor(SIZE / (open.length + close.length));
  return open.repeat(n) + close.repeat(n);
};

const chat = (body: string | Buffer, headers: Record<string, string> = {}, path = '/v1/chat/completions'): RequestInfo => ({
  method: 'POST',
  path,
  headers: new Map(Object.entries(headers)),
  body: Buffer.isBuffer(body) ? body : Buffer.from(body),
});

const SHAPES: Record<string, () => RequestInfo> = {
  'deep arrays': () => chat(nest('[', ']')),
  'deep objects': () => chat(nest('{"a":', '}')),
  'deep arrays in message content': () => chat(`{"messages":[{"role":"user","content":${nest('[', ']').slice(0, SIZE - 64)}}]}`),
  'escape-heavy string': () => chat(fill('{"messages":[{"role":"user","content":"', '\\u0041', '', '"}]}')),
  'tiny messages': () => chat(fill('{"messages":[', '{"role":"user","content":"x"}', ',', ']}')),
  'tiny content parts': () => chat(fill('{"messages":[{"role":"user","content":[', '{"type":"text","text":"x"}', ',', ']}]}')),
  'token ids': () => chat(fill('{"prompt":[', '7', ',', ']}'), {}, '/v1/completions'),
  'brackets inside strings': () => chat(fill('{"messages":[{"role":"user","content":"', '[{', '', '"}]}')),
  'sibling nests at the depth limit': () => chat(fill('{"tools":[', `${'['.repeat(120)}${']'.repeat(120)}`, ',', ']}')),
  'millions of empty arrays': () => chat(fill('{"tools":[', '[]', ',', ']}')),
  'containers just under the limit': () => chat(`{"tools":[${Array.from({ length: 99_000 }, () => '{"a":1}').join(',')}]}`),
  'millions of short strings': () => chat(fill('{"messages":[{"role":"user","content":[', '"a"', ',', ']}]}')),
  'invalid UTF-8 at the very end': () => chat(Buffer.concat([Buffer.from(fill('{"messages":[{"role":"user","content":"', 'a', '', '')), Buffer.from([0xff, 0x22, 0x7d, 0x5d, 0x7d])])),
  'Messages: tiny system blocks': () => chat(fill('{"system":[', '{"type":"text","text":"x"}', ',', '],"messages":[]}'), {}, '/v1/messages'),
  'Messages: tiny messages of tiny blocks': () => chat(fill('{"messages":[', '{"role":"user","content":[{"type":"text","text":"x"}]}', ',', ']}'), {}, '/v1/messages'),
  'Responses: tiny input items': () => chat(fill('{"input":[', '{"type":"function_call","call_id":"c","arguments":"{}"}', ',', ']}'), {}, '/v1/responses'),
  'Responses: a stored-response id of the whole body': () => chat(fill('{"input":"hi","previous_response_id":"', 'r', '', '"}'), {}, '/v1/responses'),
  'a cookie header of 100 000 cookies': () => ({ method: 'GET', path: '/', headers: new Map([['cookie', fill('', 'c=v', '; ', '; kvgate-session=s')]]) }),
};

function timeOf(make: () => RequestInfo): number {
  let best = Infinity;
  // Best of three: one run can land on a GC pause or a scheduler stall on a shared machine.
  for (let i = 0; i < 3; i++) {
    const req = make();
    const t = process.hrtime.bigint();
    understand(req, cfg);
    best = Math.min(best, Number(process.hrtime.bigint() - t) / 1e6);
  }
  return best;
}

await initHashing();
const baseline = () => chat(fill('{"model":"m","messages":[{"role":"user","content":"', 'lorem ipsum ', '', '"}]}'));
const base = timeOf(baseline);
const ratios: Record<string, number> = {};
for (const [name, make] of Object.entries(SHAPES)) ratios[name] = timeOf(make) / base;
process.stdout.write(`${JSON.stringify({ baseMs: base, bytes: SIZE, ratios })}\n`);
