/**
 * Mooncake FAST'25 traces (kvcache-ai/Mooncake `FAST25-release/traces/`): one JSON object per line
 * with `timestamp` (ms), `input_length`, `output_length` (tokens) and `hash_ids`, one id per
 * 512-token block, each id covering its block and all before it. No text and no session ids: the
 * prompt text is synthesized from the ids (pseudo-text.ts), and no session is invented.
 */
import { pseudoText } from '../pseudo-text.js';
import { CHARS_PER_TOKEN } from '../blocks.js';
import { finishWorkload, type SimRequest, type Workload } from '../workload.js';

export const MOONCAKE_BLOCK_TOKENS = 512;

export interface MooncakeRecord {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export function isMooncakeRecord(v: unknown): v is MooncakeRecord {
  if (v === null || typeof v !== 'object') return false;
  const o = v as Record<string, unknown>;
  return (
    typeof o['timestamp'] === 'number' &&
    typeof o['input_length'] === 'number' &&
    typeof o['output_length'] === 'number' &&
    Array.isArray(o['hash_ids']) &&
    o['hash_ids'].every((x) => Number.isSafeInteger(x))
  );
}

/** Parses the JSONL text of a Mooncake trace; `source` names it in errors. */
export function parseMooncake(
  text: string,
  source: string,
  opts: { rateScale?: number; maxRequests?: number } = {},
): Workload {
  const raw: Array<Omit<SimRequest, 'index'>> = [];
  const lines = text.split('\n');
  for (const [i, line] of lines.entries()) {
    if (line.trim() === '') continue;
    let rec: unknown;
    try {
      rec = JSON.parse(line);
    } catch {
      throw new Error(`${source}:${i + 1}: not JSON`);
    }
    if (!isMooncakeRecord(rec)) throw new Error(`${source}:${i + 1}: not a Mooncake record (timestamp, input_length, output_length, hash_ids)`);
    raw.push(mooncakeRequest(rec));
  }
  return finishWorkload(
    `mooncake:${source}`,
    `Mooncake trace ${source}: ${MOONCAKE_BLOCK_TOKENS}-token block ids, synthesized text, no sessions`,
    MOONCAKE_BLOCK_TOKENS,
    raw,
    opts,
  );
}

function mooncakeRequest(rec: MooncakeRecord): Omit<SimRequest, 'index'> {
  const ids = rec.hash_ids;
  const promptTokens = Math.max(1, rec.input_length);
  // The last id names a partial block unless the prompt fills it; only whole blocks are cached.
  const whole = Math.min(ids.length, Math.floor(promptTokens / MOONCAKE_BLOCK_TOKENS));
  return {
    arrivalS: rec.timestamp / 1000,
    promptTokens,
    outputTokens: rec.output_length,
    blocks: ids.slice(0, whole),
    sessionId: undefined,
    text: () => mooncakeText(ids, promptTokens),
  };
}

/** The prompt text for a block-id chain: a fixed ~2 KB chunk per id, the last one cut to length. */
export function mooncakeText(ids: readonly number[], promptTokens: number): string {
  const parts: string[] = [];
  let left = promptTokens * CHARS_PER_TOKEN;
  for (const id of ids) {
    if (left <= 0) break;
    const full = pseudoText(id, MOONCAKE_BLOCK_TOKENS * CHARS_PER_TOKEN);
    parts.push(left >= full.length ? full : full.slice(0, left));
    left -= full.length;
  }
  return parts.join('');
}
