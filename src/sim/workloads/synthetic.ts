/**
 * Built-in workloads, so every comparison runs with no trace file. Each is a seeded generator of
 * prompts made of named segments (a system prompt, a document, a user turn, a tool result); a
 * segment's text is fixed by its name (pseudo-text.ts), so prompts that share segments share
 * prefixes exactly as real ones do. Sizes are chosen so that the hot working set is larger than
 * one worker's KV cache (400k tokens by default) but near the fleet's: that is where routing
 * decides the hit rate. Rates are sized for the default 8 workers (~27.5k prefill tok/s each).
 */
import { pseudoText } from '../pseudo-text.js';
import { CHARS_PER_TOKEN, textBlockIds, TEXT_BLOCK_TOKENS } from '../blocks.js';
import { Rng, Zipf } from '../rng.js';
import { finishWorkload, type SimRequest, type Workload } from '../workload.js';

export const SYNTHETIC_WORKLOADS = ['chat', 'system-prompt', 'rag', 'agent', 'mixed'] as const;
export type SyntheticName = (typeof SYNTHETIC_WORKLOADS)[number];

export const SYNTHETIC_DESCRIPTIONS: Record<SyntheticName, string> = {
  chat: 'multi-turn chat: 4 apps with 1k-token system prompts; sessions of 2-10 turns, each turn resends the conversation; ~16 req/s',
  'system-prompt': 'shared system prompts (SGLang generated-shared-prefix shape): 256 groups of 4k-token prompts + 128-token questions; ~12 req/s',
  rag: 'RAG over 500 shared documents of 4k-16k tokens with Zipf(1) popularity, single turn; ~6 req/s',
  agent: 'agent loops: 3 agents with 4k-8k-token instructions; sessions of 8-30 steps, each appending a tool result; ~4.75 req/s',
  mixed: 'all four at a quarter of their rates each, interleaved',
};

export interface SyntheticOptions {
  requests: number;
  seed: number;
  rateScale?: number;
}

interface Segment {
  key: string;
  tokens: number;
}

type RawRequest = Omit<SimRequest, 'index'>;

function makeRequest(segments: readonly Segment[], arrivalS: number, outputTokens: number, sessionId?: string): RawRequest {
  const segs = segments.slice();
  const text = () => segs.map((s) => pseudoText(s.key, s.tokens * CHARS_PER_TOKEN)).join('');
  const promptTokens = segs.reduce((n, s) => n + s.tokens, 0);
  return { arrivalS, promptTokens, outputTokens, blocks: textBlockIds(text(), TEXT_BLOCK_TOKENS), sessionId, text };
}

/**
 * Each generator starts sessions (or single requests) as a Poisson process until it has at least
 * `count` requests and has covered the time those should span (`count / rate`), always finishing a
 * session it started; the caller keeps the first `count` by arrival, so sessions are never cut in
 * the middle of the run and the arrival rate holds steady to the end.
 */
function enough(out: readonly RawRequest[], count: number, t: number, rate: number): boolean {
  return out.length >= count && t >= count / rate;
}

function chat(count: number, rng: Rng, rate: number, out: RawRequest[]): void {
  const turnsMean = 6;
  const apps = 4;
  let t = 0;
  for (let s = 0; !enough(out, count, t, rate); s++) {
    t += rng.exp(turnsMean / rate);
    const segs: Segment[] = [{ key: `chat:sys:${rng.int(0, apps - 1)}`, tokens: 1000 }];
    const turns = rng.int(2, 10);
    let at = t;
    for (let k = 0; k < turns; k++) {
      segs.push({ key: `chat:${s}:u${k}`, tokens: rng.int(30, 300) });
      const answer = rng.int(100, 600);
      out.push(makeRequest(segs, at, answer, `chat-${s}`));
      segs.push({ key: `chat:${s}:a${k}`, tokens: answer });
      at += 5 + rng.exp(20); // the answer streams, then the user reads and types
    }
  }
}

function systemPrompt(count: number, rng: Rng, rate: number, out: RawRequest[]): void {
  const groups = 256;
  let t = 0;
  for (let i = 0; !enough(out, count, t, rate); i++) {
    t += rng.exp(1 / rate);
    const g = rng.int(0, groups - 1);
    out.push(makeRequest([{ key: `sp:sys:${g}`, tokens: 4096 }, { key: `sp:q:${i}`, tokens: 128 }], t, 256));
  }
}

function rag(count: number, rng: Rng, rate: number, out: RawRequest[]): void {
  const docs = 500;
  const docTokens = Array.from({ length: docs }, () => rng.int(4000, 16000));
  const popularity = new Zipf(docs, 1.0, rng.fork(1));
  let t = 0;
  for (let i = 0; !enough(out, count, t, rate); i++) {
    t += rng.exp(1 / rate);
    const d = popularity.sample();
    out.push(
      makeRequest(
        [
          { key: 'rag:sys', tokens: 300 },
          { key: `rag:doc:${d}`, tokens: docTokens[d]! },
          { key: `rag:q:${i}`, tokens: rng.int(20, 200) },
        ],
        t,
        rng.int(50, 300),
      ),
    );
  }
}

function agent(count: number, rng: Rng, rate: number, out: RawRequest[]): void {
  const instructions = [4000, 6000, 8000];
  const stepsMean = 19;
  let t = 0;
  for (let s = 0; !enough(out, count, t, rate); s++) {
    t += rng.exp(stepsMean / rate);
    const a = rng.int(0, instructions.length - 1);
    const segs: Segment[] = [
      { key: `agent:instr:${a}`, tokens: instructions[a]! },
      { key: `agent:${s}:task`, tokens: rng.int(100, 500) },
    ];
    const steps = rng.int(8, 30);
    let at = t;
    for (let k = 0; k < steps; k++) {
      const action = rng.int(30, 300);
      out.push(makeRequest(segs, at, action, `agent-${s}`));
      segs.push({ key: `agent:${s}:act${k}`, tokens: action }, { key: `agent:${s}:obs${k}`, tokens: rng.int(100, 3000) });
      at += 2 + rng.exp(3); // the tool runs, then the loop calls the model again
    }
  }
}

const GENERATORS: Record<Exclude<SyntheticName, 'mixed'>, { rate: number; run: typeof chat }> = {
  chat: { rate: 16, run: chat },
  'system-prompt': { rate: 12, run: systemPrompt },
  rag: { rate: 6, run: rag },
  agent: { rate: 4.75, run: agent },
};

export function isSyntheticName(name: string): name is SyntheticName {
  return (SYNTHETIC_WORKLOADS as readonly string[]).includes(name);
}

export function syntheticWorkload(name: SyntheticName, opts: SyntheticOptions): Workload {
  const root = new Rng(opts.seed);
  const raw: RawRequest[] = [];
  if (name === 'mixed') {
    const parts = Object.entries(GENERATORS);
    for (const [i, [, g]] of parts.entries()) {
      const share = Math.ceil(opts.requests / parts.length);
      const part: RawRequest[] = [];
      g.run(share, root.fork(i), g.rate / parts.length, part);
      raw.push(...part);
    }
  } else {
    const g = GENERATORS[name];
    g.run(opts.requests, root.fork(0), g.rate, raw);
  }
  return finishWorkload(`synthetic:${name}`, SYNTHETIC_DESCRIPTIONS[name], TEXT_BLOCK_TOKENS, raw, {
    maxRequests: opts.requests,
    ...(opts.rateScale !== undefined ? { rateScale: opts.rateScale } : {}),
  });
}
