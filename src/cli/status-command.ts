/**
 * `kvgate status`: the fleet at a glance, from a running gate's admin API (`GET /workers`): one
 * line per worker with its state and in-flight count against its limit, then every other field
 * the gate reports for it (load signals such as KV use, queue, temperature, the age of the data),
 * whatever they are: the line follows the JSON, so new signals show up without a change here.
 * `--json` prints the admin API's answer as it came.
 */
import { Command, Option } from 'commander';
import { plural } from '../util/plural.js';

/** How long to wait for the admin API: it answers from memory, so a slow answer is a sick gate. */
const ADMIN_TIMEOUT_MS = 5000;
const DEFAULT_ADMIN = 'http://127.0.0.1:9090';

export interface StatusOutput {
  write(text: string): void;
}

interface WorkerRow {
  pool: string;
  id: string;
  state: string;
  inflight: string;
  signals: string;
}

/** Fields every line shows in its own columns; everything else is a signal. */
const COLUMN_FIELDS = new Set(['pool', 'id', 'cluster', 'state', 'inflight', 'max_inflight']);

export function registerStatusCommand(program: Command, out: StatusOutput = process.stdout): void {
  program
    .command('status')
    .description("print each worker's state, in-flight load and signals, and the store's health, from a running gate's admin API")
    .addOption(new Option('--admin <url>', "the gate's admin API").env('KVGATE_ADMIN').default(DEFAULT_ADMIN))
    .addOption(new Option('--json', 'print the admin API answer (JSON) unchanged'))
    .action(async (o: { admin: string; json?: boolean }) => {
      const { text, body } = await fetchWorkers(o.admin);
      if (o.json) {
        out.write(text.endsWith('\n') ? text : `${text}\n`);
        return;
      }
      out.write(formatStatus(body));
    });
}

async function fetchWorkers(admin: string): Promise<{ text: string; body: { store?: unknown; readiness?: ReadinessView; workers: Array<Record<string, unknown>> } }> {
  let url: URL;
  try {
    url = new URL('/workers', admin);
  } catch {
    throw new Error(`--admin must be a URL such as ${DEFAULT_ADMIN} (got "${admin}")`);
  }
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(ADMIN_TIMEOUT_MS) });
  } catch (err) {
    throw new Error(unreachableMessage(url.origin, err));
  }
  const text = await res.text();
  if (res.status !== 200) throw new Error(`the admin API at ${url.origin} answered ${res.status}: ${text.slice(0, 200)}`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`the admin API at ${url.origin} answered something that is not JSON: ${JSON.stringify(text.slice(0, 80))}`);
  }
  const workers = (body as { workers?: unknown } | null)?.workers;
  if (!Array.isArray(workers) || !workers.every((w) => w !== null && typeof w === 'object' && !Array.isArray(w))) {
    throw new Error(`the admin API at ${url.origin} answered JSON without a "workers" list of objects`);
  }
  return { text, body: body as { store?: unknown; readiness?: ReadinessView; workers: Array<Record<string, unknown>> } };
}

/** Why the admin API could not be read, and what to try: fetch's own text is "fetch failed". */
export function unreachableMessage(origin: string, err: unknown): string {
  if ((err as Error).name === 'TimeoutError') return `the admin API at ${origin} did not answer in ${ADMIN_TIMEOUT_MS} ms: is the gate overloaded or stopped?`;
  const cause = (err as { cause?: { code?: string; message?: string; name?: string } }).cause;
  const code = cause?.code ?? '';
  // An HTTP/2-only port answers fetch's HTTP/1.1 request with bytes its parser rejects. Node 20
  // and 22 (undici 6) give the error an HPE_ code; Node 24 and later (undici 7) give the same
  // HTTPParserError no code, so its name says it.
  if (code.startsWith('HPE_') || cause?.name === 'HTTPParserError' || /parse error/i.test(cause?.message ?? '')) {
    return `${origin} does not answer HTTP/1.1: it looks like the gate's ext_proc gRPC port; the admin API is on the port of --admin-port (9090 by default; \`kvgate serve\` logs it as admin_port): pass that with --admin`;
  }
  if (code === 'ECONNREFUSED') return `nothing is listening at ${origin} (ECONNREFUSED): is the gate running? Pass its admin address with --admin (its --admin-port, 9090 by default; \`kvgate serve\` logs it as admin_port)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `cannot resolve the host of ${origin}: check --admin`;
  return `cannot reach the admin API at ${origin}: ${code || cause?.message || (err as Error).message}`;
}

/**
 * The table: a header, one line per worker, signals as `name=value` after the fixed columns. A
 * POOL column comes first when the workers span several pools (one pool needs no column).
 */
export function formatStatus(body: { store?: unknown; readiness?: ReadinessView; workers: Array<Record<string, unknown>> }): string {
  const rows: WorkerRow[] = body.workers.map((w) => ({
    pool: String(w['pool'] ?? '-'),
    id: String(w['id'] ?? '?') + (w['cluster'] !== undefined && w['cluster'] !== w['id'] ? ` (${String(w['cluster'])})` : ''),
    state: String(w['state'] ?? '?'),
    inflight: `${fmtCount(w['inflight'])}/${fmtCount(w['max_inflight'])}`,
    signals: signalsOf(w),
  }));
  // A worker without a metrics_url has no signals: its state is kvgate's own in-flight count and
  // an operator's setting, not a measured load. Said once, under the table.
  const unmeasured = body.workers.filter((w) => w['signals'] === undefined && w['reasons'] === undefined).length;
  const note = unmeasured > 0 ? `${unmeasured === body.workers.length ? 'no worker has' : `${plural(unmeasured, 'worker')} without`} a metrics_url: healthy unless drained or down by an operator; load is kvgate's own in-flight count\n` : '';
  const pools = new Set(rows.map((r) => r.pool)).size > 1;
  const header: WorkerRow = { pool: 'POOL', id: 'WORKER', state: 'STATE', inflight: 'IN-FLIGHT', signals: 'SIGNALS' };
  const width = (k: keyof WorkerRow) => Math.max(...[header, ...rows].map((r) => r[k].length));
  const line = (r: WorkerRow) => `${pools ? `${r.pool.padEnd(width('pool'))}  ` : ''}${r.id.padEnd(width('id'))}  ${r.state.padEnd(width('state'))}  ${r.inflight.padEnd(width('inflight'))}  ${r.signals}`.trimEnd();
  const head = `${plural(body.workers.length, 'worker')}${typeof body.store === 'string' ? `, store: ${body.store}` : ''}${readinessOf(body.readiness)}`;
  return `${head}\n${[header, ...rows].map(line).join('\n')}\n${note}${problemOf(body.readiness)}`;
}

interface ReadinessView {
  ready?: unknown;
  status?: unknown;
  store?: unknown;
  reason?: unknown;
  store_error?: unknown;
}

/** `(reachable, ready)` after the store's name; gates older than the readiness field show nothing. */
function readinessOf(r: ReadinessView | undefined): string {
  if (!r || typeof r !== 'object') return '';
  return ` (${[r.store, r.status].filter((x) => typeof x === 'string' && x !== 'unknown').join(', ')})`;
}

/** A line under the table when the gate is not plainly ready: why, and the store's error. */
function problemOf(r: ReadinessView | undefined): string {
  if (!r || typeof r !== 'object' || r.status === 'ready' || typeof r.reason !== 'string') return '';
  return `${r.ready === true ? 'warning' : 'NOT READY'}: ${r.reason}${typeof r.store_error === 'string' ? ` (${r.store_error})` : ''}\n`;
}

function fmtCount(v: unknown): string {
  return typeof v === 'number' ? String(v) : '?';
}

/** Every field outside the fixed columns, nested objects flattened with dots. */
function signalsOf(w: Record<string, unknown>): string {
  const parts: string[] = [];
  const walk = (prefix: string, v: unknown) => {
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k, x] of Object.entries(v)) walk(prefix ? `${prefix}.${k}` : k, x);
      return;
    }
    parts.push(`${prefix}=${fmtValue(prefix, v)}`);
  };
  for (const [k, v] of Object.entries(w)) if (!COLUMN_FIELDS.has(k)) walk(k, v);
  return parts.join(' ');
}

/** Units read off the field's name: shares as percentages, `_ms` and `_s` as durations. */
function fmtValue(name: string, v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (Array.isArray(v)) return v.map((x) => fmtValue(name, x)).join(',');
  if (typeof v !== 'number') return String(v);
  if (!Number.isFinite(v)) return String(v);
  const leaf = name.slice(name.lastIndexOf('.') + 1);
  if (/(usage|perc|util|frac|ratio|share)/.test(leaf) && v >= 0 && v <= 1) return `${(v * 100).toFixed(1)}%`;
  if (/_ms$/.test(leaf)) return v >= 1000 ? `${(v / 1000).toFixed(1)}s` : `${Math.round(v)}ms`;
  if (/_s$/.test(leaf)) return `${v.toFixed(1)}s`;
  if (/(temp|temperature)(_c)?$/.test(leaf)) return `${v}°C`;
  return Number.isInteger(v) ? String(v) : v.toFixed(3);
}
