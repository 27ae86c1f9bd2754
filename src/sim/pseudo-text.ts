/**
 * Deterministic stand-in text. Mooncake traces carry block ids and no text, and the synthetic
 * workloads only need prompts of known shape; but kvgate must see a real request body, so each
 * block or segment becomes a fixed pseudo-text chunk derived from its id. Equal ids give equal
 * chunks, so equal id prefixes give equal text prefixes, which is all prefix caching and prefix
 * keys care about. Each chunk starts with its id written out, so distinct ids never share text.
 */
import { LRUCache } from 'lru-cache';
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

/** Chunks are memoized by key; hot chunks (shared system prompts, block 0) are built once. */
const memo = new LRUCache<string, string>({ maxSize: 64 * 1024 * 1024, sizeCalculation: (v) => Math.max(1, v.length) });

/** `chars` characters of pseudo-text that depend only on `key`. */
export function pseudoText(key: string | number, chars: number): string {
  if (chars <= 0) return '';
  const memoKey = `${key}#${chars}`;
  const hit = memo.get(memoKey);
  if (hit !== undefined) return hit;
  const seed = typeof key === 'number' ? mix32((key * 2654435761) ^ (key / 4294967296)) : hashString32(key);
  const rng = new Rng(seed);
  const parts: string[] = [`[${key}] `];
  let len = parts[0]!.length;
  while (len < chars) {
    const w = WORDS[Math.floor(rng.next() * WORDS.length)]!;
    parts.push(w);
    len += w.length + 1;
    parts.push(rng.next() < 0.08 ? '.\n' : ' ');
  }
  const text = parts.join('').slice(0, chars);
  memo.set(memoKey, text);
  return text;
}
