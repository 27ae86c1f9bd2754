/**
 * Requests for `kvgate bench` and the micro-benchmarks: realistic OpenAI chat-completions bodies
 * of a target size, with the shape that makes a router's work real: a few apps whose long system
 * prompts are shared by many sessions, multi-turn conversations, and a mix of how (and whether) a
 * request names its session.
 *
 * The key mix, fixed so runs compare: a quarter carry an `x-session-id` header (keyed on headers,
 * the body is still read), a quarter the OpenAI `user` field (keyed after JSON parsing), and half
 * no session at all (keyed on the canonical prompt: the most work per request).
 */
import { pseudoText } from '../sim/pseudo-text.js';
import { Rng } from '../sim/rng.js';

export type KeyMix = 'header' | 'body_user' | 'prefix';

export interface BenchRequest {
  /** Lower-case header names and values as Envoy sends them (pseudo-headers included). */
  headers: ReadonlyArray<readonly [string, string]>;
  body: Buffer;
  keyedBy: KeyMix;
}

/** Apps sharing a system prompt; each app's sessions share its prefix. */
const APPS = 4;
const MODEL = 'meta-llama/Llama-3.1-8B-Instruct';
/** System prompts take this share of a body, up to SYSTEM_MAX_CHARS (tool-heavy agents run ~16k). */
const SYSTEM_SHARE = 0.25;
const SYSTEM_MAX_CHARS = 16_384;

/** Parses `2k`, `32KB`, `400k`, `1m`, `2048` into bytes. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(k|kb|kib|m|mb|mib)?\s*$/i.exec(text);
  if (!m) throw new Error(`"${text}" is not a size (e.g. 2k, 32k, 400k)`);
  const unit = (m[2] ?? '').toLowerCase();
  const mult = unit.startsWith('k') ? 1024 : unit.startsWith('m') ? 1024 * 1024 : 1;
  const bytes = Math.round(Number(m[1]) * mult);
  if (bytes < 256) throw new Error(`"${text}" is too small: bodies start at 256 bytes`);
  return bytes;
}

/** `2048` → `2k`, `409600` → `400k`: labels for tables. */
export function sizeLabel(bytes: number): string {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)}m`;
  if (bytes >= 1024) return `${Math.round(bytes / 1024)}k`;
  return String(bytes);
}

/**
 * `count` requests of about `targetBytes` each (within ~2%), deterministic for a seed. Session s
 * belongs to app s % APPS; its turns differ, so bodies of one session share their beginning.
 */
export function benchRequests(targetBytes: number, count: number, seed = 1): BenchRequest[] {
  const rng = new Rng(seed ^ targetBytes);
  const systemChars = Math.min(SYSTEM_MAX_CHARS, Math.floor(targetBytes * SYSTEM_SHARE));
  const out: BenchRequest[] = [];
  const sessions = Math.max(1, Math.ceil(count / 4));
  for (let i = 0; i < count; i++) {
    const session = i % sessions;
    const app = session % APPS;
    const keyedBy: KeyMix = i % 4 === 0 ? 'header' : i % 4 === 1 ? 'body_user' : 'prefix';
    const sessionId = `sess-${seed}-${session}`;
    const base = {
      model: MODEL,
      stream: true,
      max_tokens: 512,
      temperature: 0.7,
      ...(keyedBy === 'body_user' ? { user: sessionId } : {}),
    };
    const messages: Array<{ role: string; content: string }> = [
      { role: 'system', content: pseudoText(`bench:app:${app}:system`, systemChars) },
    ];
    // Fill the rest with turns; the last user turn is what differs between requests of a session.
    const envelope = Buffer.byteLength(JSON.stringify({ ...base, messages })) + 64;
    let left = targetBytes - envelope;
    const turnChars = Math.max(64, Math.floor(left / 6));
    for (let turn = 0; left > 0; turn++) {
      const role = turn % 2 === 0 ? 'user' : 'assistant';
      const chars = Math.min(turnChars, Math.max(1, left - 32));
      const key = left - chars <= 32 ? `bench:${seed}:req:${i}` : `bench:${seed}:sess:${session}:t${turn}`;
      messages.push({ role, content: pseudoText(key, chars) });
      left -= chars + 32;
    }
    if (messages[messages.length - 1]!.role !== 'user') messages.push({ role: 'user', content: pseudoText(`bench:${seed}:q:${i}`, 24) });
    const body = Buffer.from(JSON.stringify({ ...base, messages }));
    const headers: Array<readonly [string, string]> = [
      [':method', 'POST'],
      [':scheme', 'https'],
      [':authority', 'llm.example.com'],
      [':path', '/v1/chat/completions'],
      ['content-type', 'application/json'],
      ['content-length', String(body.length)],
      ['authorization', `Bearer sk-bench-${rng.int(0, 1 << 30).toString(36)}`],
      ['user-agent', 'OpenAI/Python 1.54.0'],
      ['accept', 'text/event-stream'],
      ['x-request-id', `${seed}-${i}-${rng.int(0, 1 << 30).toString(16)}`],
      ['x-forwarded-for', `10.0.${(i >> 8) & 255}.${i & 255}`],
      ['x-envoy-expected-rq-timeout-ms', '600000'],
      ...(keyedBy === 'header' ? [['x-session-id', sessionId] as const] : []),
    ];
    out.push({ headers, body, keyedBy });
  }
  return out;
}

/** The response headers a streaming OpenAI server answers with. */
export const RESPONSE_HEADERS: ReadonlyArray<readonly [string, string]> = [
  [':status', '200'],
  ['content-type', 'text/event-stream; charset=utf-8'],
  ['cache-control', 'no-cache'],
  ['x-request-id', 'bench'],
];
