/**
 * `--trace <file|dir>`: finds the trace files and tells the two formats apart by their first
 * record, so the user never has to name the format.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import type { Workload } from '../workload.js';
import { isAgentRecord, parseAgentSessions, type AgentSessionFile } from './agent-sessions.js';
import { isMooncakeRecord, parseMooncake } from './mooncake.js';

export type TraceFormat = 'mooncake' | 'agent-sessions';

export function detectFormat(firstLine: string, source: string): TraceFormat {
  let rec: unknown;
  try {
    rec = JSON.parse(firstLine);
  } catch {
    throw new Error(`${source}: first line is not JSON`);
  }
  if (isMooncakeRecord(rec)) return 'mooncake';
  if (isAgentRecord(rec)) return 'agent-sessions';
  throw new Error(`${source}: neither a Mooncake record (hash_ids) nor an agent-session record (input, session_id)`);
}

export function loadTrace(path: string, opts: { rateScale?: number; maxRequests?: number } = {}): Workload {
  const st = statSync(path);
  const files = st.isDirectory() ? jsonlFiles(path) : [path];
  if (files.length === 0) throw new Error(`${path}: no .jsonl files`);
  const root = st.isDirectory() ? path : dirname(path);
  const loaded = files.map((f) => ({ file: f, source: relative(root, f) || basename(f), text: readFileSync(f, 'utf8') }));
  const formats = new Set(loaded.map((l) => detectFormat(firstLine(l.text), l.source)));
  if (formats.size > 1) throw new Error(`${path}: mixes Mooncake and agent-session files; pass one of them`);
  if (formats.has('mooncake')) {
    if (loaded.length > 1) throw new Error(`${path}: holds ${loaded.length} Mooncake traces; pass one file`);
    return parseMooncake(loaded[0]!.text, loaded[0]!.source, opts);
  }
  const sessionFiles: AgentSessionFile[] = loaded.map((l) => ({ source: l.source, group: dirname(l.file), text: l.text }));
  return parseAgentSessions(sessionFiles, basename(path), opts);
}

function firstLine(text: string): string {
  for (const line of text.split('\n', 64)) if (line.trim() !== '') return line;
  return '';
}

/** Every .jsonl file under `dir`, sorted, so the replay order never depends on the file system. */
function jsonlFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...jsonlFiles(p));
    else if (e.isFile() && e.name.endsWith('.jsonl')) out.push(p);
  }
  return out;
}
