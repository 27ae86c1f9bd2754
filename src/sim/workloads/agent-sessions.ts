/**
 * LMCache agent traces (LMCache/lmcache-agent-trace): one file per agent session, one JSON object
 * per line with `timestamp` (µs), `input` (the whole prompt text), `output` and `session_id`.
 * Token counts and blocks come from the text (blocks.ts). Each folder of sessions (one agent) is
 * replayed from its own first timestamp, so agents recorded on different days run side by side.
 */
import { textBlockIds, tokensOfText, TEXT_BLOCK_TOKENS } from '../blocks.js';
import { finishWorkload, type SimRequest, type Workload } from '../workload.js';

export interface AgentRecord {
  timestamp: number;
  input: string;
  output: string;
  session_id: string;
}

export function isAgentRecord(v: unknown): v is AgentRecord {
  if (v === null || typeof v !== 'object') return false;
  const o = v as Record<string, unknown>;
  return (
    typeof o['timestamp'] === 'number' &&
    typeof o['input'] === 'string' &&
    typeof o['output'] === 'string' &&
    typeof o['session_id'] === 'string'
  );
}

export interface AgentSessionFile {
  /** Shown in errors, e.g. `miniswe/abc.jsonl`. */
  source: string;
  /** Sessions in one group share a time origin (one agent's folder). */
  group: string;
  text: string;
}

export function parseAgentSessions(
  files: readonly AgentSessionFile[],
  name: string,
  opts: { rateScale?: number; maxRequests?: number } = {},
): Workload {
  const records: Array<{ rec: AgentRecord; group: string }> = [];
  for (const f of files) {
    for (const [i, line] of f.text.split('\n').entries()) {
      if (line.trim() === '') continue;
      let rec: unknown;
      try {
        rec = JSON.parse(line);
      } catch {
        throw new Error(`${f.source}:${i + 1}: not JSON`);
      }
      if (!isAgentRecord(rec)) throw new Error(`${f.source}:${i + 1}: not an agent-session record (timestamp, input, output, session_id)`);
      records.push({ rec, group: f.group });
    }
  }
  const origin = new Map<string, number>();
  for (const { rec, group } of records) origin.set(group, Math.min(origin.get(group) ?? Infinity, rec.timestamp));
  const raw = records.map(({ rec, group }): Omit<SimRequest, 'index'> => {
    const input = rec.input;
    return {
      arrivalS: (rec.timestamp - origin.get(group)!) / 1e6,
      promptTokens: tokensOfText(input),
      outputTokens: tokensOfText(rec.output),
      blocks: textBlockIds(input, TEXT_BLOCK_TOKENS),
      sessionId: rec.session_id,
      text: () => input,
    };
  });
  return finishWorkload(
    `agent-sessions:${name}`,
    `LMCache agent sessions ${name}: ${files.length} session files, full prompt text, session ids`,
    TEXT_BLOCK_TOKENS,
    raw,
    opts,
  );
}
