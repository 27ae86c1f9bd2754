/**
 * Where the shared replay traces are, and which replays to run on them. Traces are data for
 * development and CI only: they are read where they lie, by path, and never copied into the repo.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { detectFormat } from '../sim/workloads/trace.js';

/**
 * `explicit` (a flag), else $KVGATE_TRACES, else the nearest `shared/data/traces` beside the repo
 * or one of its parents (the team's layout puts it at ../shared/data/traces); undefined if none.
 */
export function findTracesDir(repoRoot: string, explicit?: string): string | undefined {
  const given = explicit ?? process.env['KVGATE_TRACES'];
  if (given !== undefined && given !== '') return existsSync(given) ? resolve(given) : undefined;
  for (let dir = resolve(repoRoot); ; dir = dirname(dir)) {
    const candidate = join(dir, '..', 'shared', 'data', 'traces');
    if (existsSync(candidate) && statSync(candidate).isDirectory()) return resolve(candidate);
    if (dirname(dir) === dir) return undefined;
  }
}

export interface TraceReplay {
  /** Relative to the traces folder, for tables. */
  name: string;
  path: string;
}

function firstLine(file: string): string {
  for (const line of readFileSync(file, 'utf8').split('\n', 64)) if (line.trim() !== '') return line;
  return '';
}

/**
 * One replay per Mooncake file (each is its own trace), and one per folder of agent-session files
 * (the sessions of a folder run together, as the simulator reads them), found one level down.
 */
export function traceReplays(tracesDir: string): TraceReplay[] {
  const out: TraceReplay[] = [];
  const visit = (dir: string) => {
    const entries = readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name));
    const files = entries.filter((e) => e.isFile() && e.name.endsWith('.jsonl')).map((e) => join(dir, e.name));
    const formats = files.map((f) => {
      try {
        return detectFormat(firstLine(f), f);
      } catch {
        return undefined;
      }
    });
    files.forEach((f, i) => {
      if (formats[i] === 'mooncake') out.push({ name: relative(tracesDir, f), path: f });
    });
    if (formats.some((f) => f === 'agent-sessions')) out.push({ name: `${relative(tracesDir, dir) || '.'}/`, path: dir });
    for (const e of entries) if (e.isDirectory()) visit(join(dir, e.name));
  };
  visit(tracesDir);
  return out;
}
