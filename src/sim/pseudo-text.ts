/**
 * Deterministic stand-in text. Mooncake traces carry block ids and no text, and the synthetic
 * workloads only need prompts of known shape; but kvgate must see a real request body, so each
 * block or segment becomes a fixed pseudo-text chunk derived from its id. Equal ids give equal
 * chunks, so equal id prefixes give equal text prefixes, which is all prefix caching and prefix
 * keys care about. Each chunk starts with its id written out, so distinct ids never share text.
 */
import { hashString32, mix32, Rng } from './rng.js';

const WORDS = [
  'the', 'model', 'request', 'cache', 'token', 'worker', 'prefix', 'session', 'answer', 'context',
  'user', 'system', 'tool', 'result', 'value', 'query', 'document', 'section', 'table', 'report',
  'agent', 'step', 'plan', 'check', 'file', 'error', 'output', 'input', 'number', 'list',
  'and', 'of', 'to', 'in', 'for', 'with', 'on', 'is', 'a', 'by',
  'latency', 'memory', 'route', 'block', 'batch', 'queue', 'score', 'index', 'order', 'state',
  'please', 'explain', 'summarize', 'compare', 'describe', 'write', 'read', 'find', 'update', 'return',
  'first', 'next', 'last', 'every',
] as const;

/**
 * One fixed 1 MiB body of pseudo-words; a chunk is its id label followed by a window of it at an
 * offset derived from the id. Slicing one corpus is ~100× faster than drawing words per chunk,
 * which matters when a Mooncake replay synthesizes hundreds of megabytes of prompts.
 */
const CORPUS_CHARS = 1 << 20;
let corpus: string | undefined;

function body(): string {
  if (corpus !== undefined) return corpus;
  const rng = new Rng(0x6b766761); // "kvga"
  const parts: string[] = [];
  let len = 0;
  while (len < CORPUS_CHARS * 2) {
    const w = WORDS[Math.floor(rng.next() * WORDS.length)]!;
    const sep = rng.next() < 0.08 ? '.\n' : ' ';
    parts.push(w, sep);
    len += w.length + sep.length;
  }
  corpus = parts.join('');
  return corpus;
}

/** `chars` characters of pseudo-text that depend only on `key`. */
export function pseudoText(key: string | number, chars: number): string {
  if (chars <= 0) return '';
  const label = `[${key}] `;
  if (chars <= label.length) return label.slice(0, chars);
  const text = body();
  let seed = typeof key === 'number' ? mix32(Math.imul(key | 0, 0x9e3779b1) ^ Math.floor(key / 4294967296)) : hashString32(key);
  const parts = [label];
  let left = chars - label.length;
  while (left > 0) {
    const take = Math.min(left, CORPUS_CHARS);
    const at = seed % (text.length - take + 1);
    parts.push(text.slice(at, at + take));
    left -= take;
    seed = mix32(seed + 1);
  }
  return parts.join('');
}
