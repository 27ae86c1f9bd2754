/**
 * `kvgate try`: plays Envoy against any running gate, for one request or a short conversation,
 * and prints what the gate decided and why. Each turn is the ext_proc exchange envoy/envoy.yaml
 * configures (request headers, the buffered body, then the response headers that end the
 * request's lease); no model server is called, so it works against a gate whose workers are not
 * running. The explanation (every candidate's state, load, prefix match and score) comes from the
 * gate's admin API (`GET /debug/decisions`), matched by the session's key hash.
 */
import { randomBytes } from 'node:crypto';
import { Command, InvalidArgumentError, Option } from 'commander';
import { hostPort, positiveIntUpTo, positiveNumber } from './arg-parsers.js';
import { ENVOY_MESSAGE_TIMEOUT_MS, EnvoyLikeClient, type RouteAnswer } from '../demo/envoy-client.js';
import { hashSessionId } from '../request/hashing.js';
import { plural } from '../util/plural.js';

const DEFAULT_TARGET = '127.0.0.1:9002';
const DEFAULT_ADMIN = 'http://127.0.0.1:9090';

/**
 * The default system prompt: about 2,000 characters (eight 256-character prefix blocks), so the
 * gate's prefix index has something to match when another session sends the same one.
 */
const DEFAULT_SYSTEM = Array.from(
  { length: 16 },
  (_, i) => `Rule ${i + 1}: you are the support assistant of an example shop; answer briefly, cite the order number, and never invent a policy. `,
).join('');

export interface TryOutput {
  write(text: string): void;
}

interface TryFlags {
  target: string;
  admin: string;
  /** false with --no-session */
  session?: string | false;
  turns: number;
  system: string;
  message: string;
  model: string;
  path: string;
  header: Record<string, string>;
  routingHeader: string;
  messageTimeoutMs: number;
  /** The gate's session hash key, when it has one: the decision record is found by the keyed hash. */
  sessionHashKey?: string;
  json?: boolean;
}

interface Candidate {
  worker: string;
  state: string;
  inflight: number;
  max_inflight: number;
  prefix_blocks: number;
  kv_usage?: number;
  /** Past KV pressure: the free KV, in tokens, a request without a session had to fit in. */
  kv_room_tokens?: number;
  work?: number;
  score?: number;
}

interface DecisionRecord {
  at: string;
  pool?: string;
  key_kind?: string;
  key_hash?: string;
  outcome: string;
  worker?: string;
  from?: string;
  reason?: string;
  explanation?: { mode?: string; total_blocks?: number; rule?: string; spilled?: boolean; candidates?: Candidate[] };
}

export interface TurnReport {
  turn: number;
  /** `routed`: Envoy would send it to `cluster`; `answered`: the gate answered the client itself; `fallback`: no answer in time (failure mode open). */
  result: 'routed' | 'answered' | 'fallback';
  cluster?: string;
  /** Headers the gate set on the request (the routing header among them). */
  headers_set?: Record<string, string>;
  status?: number;
  body?: string;
  /** The gate's record of this decision, when its admin API could be read. */
  decision?: DecisionRecord;
  /** Why there is no decision record. */
  explanation_missing?: string;
}

function header(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = value.indexOf(':');
  if (at <= 0) throw new InvalidArgumentError('must be NAME:VALUE, e.g. x-tenant:acme');
  return { ...previous, [value.slice(0, at).trim().toLowerCase()]: value.slice(at + 1).trim() };
}

export function registerTryCommand(program: Command, out: TryOutput = process.stdout): void {
  program
    .command('try')
    .description('play Envoy against a running gate: send one request (or a short conversation) and print where it was routed and why')
    .addOption(new Option('--target <host:port>', "the gate's ext_proc address").env('KVGATE_TARGET').argParser(hostPort).default(DEFAULT_TARGET))
    .addOption(new Option('--admin <url>', "the gate's admin API, for the decision's explanation").env('KVGATE_ADMIN').default(DEFAULT_ADMIN))
    .addOption(new Option('--session <id>', 'session id sent in x-session-id (default: a new one per run)'))
    .addOption(new Option('--no-session', 'send no session id: the gate keys the request by its prompt prefix'))
    .addOption(new Option('--turns <n>', 'turns of one conversation (each resends the history, as chat clients do)').argParser(positiveIntUpTo(100)).default(1))
    .addOption(new Option('--system <text>', 'system prompt (default: ~2,000 characters, so prefix matching has blocks to match)').default(DEFAULT_SYSTEM, 'a fixed shop-assistant prompt'))
    .addOption(new Option('--message <text>', 'user message of each turn').default('Where is my order?'))
    .addOption(new Option('--model <name>', 'the body\'s "model" (chooses the pool when the gate has several)').default('llama'))
    .addOption(new Option('--path <path>', 'request path').default('/v1/chat/completions'))
    .addOption(new Option('--header <name:value>', 'extra request header (repeatable)').argParser(header).default({}, 'none'))
    .addOption(new Option('--routing-header <name>', 'the header the gate names the cluster in (its routing.header)').default('x-kvgate-cluster'))
    .addOption(new Option('--message-timeout-ms <ms>', "how long to wait for each gate reply (Envoy's message_timeout; past it Envoy fails open)").argParser(positiveNumber).default(ENVOY_MESSAGE_TIMEOUT_MS * 4))
    .addOption(
      new Option(
        '--session-hash-key <key>',
        "the gate's session hash key, when it hashes session ids under one: its decision records are found by the keyed hash (prefer the environment variable: a flag shows in the process list)",
      ).env('KVGATE_SESSION_HASH_KEY'),
    )
    .addOption(new Option('--json', 'print one JSON array, one object per turn'))
    .action(async (o: TryFlags) => {
      const session = o.session === false ? undefined : (o.session ?? `try-${randomBytes(4).toString('hex')}`);
      const client = new EnvoyLikeClient(o.target, o.routingHeader, o.messageTimeoutMs);
      try {
        try {
          await client.ready(3000);
        } catch {
          throw new Error(`no gate answers ext_proc at ${o.target}: is it running? Pass its address (its --grpc-port, 9002 by default) with --target`);
        }
        const reports: TurnReport[] = [];
        const messages: Array<{ role: string; content: string }> = [{ role: 'system', content: o.system }];
        if (!o.json) out.write(`kvgate try: ${plural(o.turns, 'turn')} to the gate at ${o.target}, ${session ? `session ${session}` : 'no session id (keyed by prompt prefix)'}\n`);
        for (let turn = 1; turn <= o.turns; turn++) {
          messages.push({ role: 'user', content: turn === 1 ? o.message : `${o.message} (turn ${turn})` });
          const body = Buffer.from(JSON.stringify({ model: o.model, messages }));
          const headers: Record<string, string> = { 'content-type': 'application/json', ...o.header, ...(session ? { 'x-session-id': session } : {}) };
          const answer = await client.route({ method: 'POST', path: o.path, authority: 'kvgate-try', headers, body });
          const report = await describe(turn, answer, headers, o.routingHeader);
          // The upstream's response headers end the request's lease on the gate, as Envoy's would.
          if (answer.kind === 'upstream') await answer.exchange.responseHeaders(200, { 'content-type': 'application/json' });
          if (report.result !== 'fallback') await explain(report, o.admin, session, o.sessionHashKey);
          reports.push(report);
          if (!o.json) out.write(formatTurn(report));
          messages.push({ role: 'assistant', content: `(answer to turn ${turn})` });
        }
        if (o.json) out.write(`${JSON.stringify(reports)}\n`);
      } finally {
        client.close();
      }
    });
}

async function describe(turn: number, answer: RouteAnswer, sent: Record<string, string>, routingHeader: string): Promise<TurnReport> {
  if (answer.kind === 'local') return { turn, result: 'answered', status: answer.status, body: answer.body };
  const set = Object.fromEntries(Object.entries(answer.headers).filter(([k, v]) => sent[k] !== v));
  if (answer.cluster === undefined) {
    // A gate that set other headers answered, on a header other than --routing-header (endpoint-picker
    // mode's x-gateway-destination-endpoint, or a routing.header of its own): name it.
    const other = Object.keys(set)[0];
    const missing = other === undefined
      ? `the gate set no ${routingHeader} in time: Envoy would take its fallback route`
      : `the gate set no ${routingHeader} but did set ${other}: if it routes on that (its routing.header, or x-gateway-destination-endpoint in endpoint-picker mode), pass --routing-header ${other}`;
    return { turn, result: 'fallback', headers_set: set, explanation_missing: missing };
  }
  return { turn, result: 'routed', cluster: answer.cluster, headers_set: set };
}

/** Attaches the gate's record of the decision: the newest one for this session's key hash. */
async function explain(report: TurnReport, admin: string, session: string | undefined, gateKey: string | undefined): Promise<void> {
  if (report.result === 'answered' && report.status === 404 && report.body?.includes('"model_not_found"')) {
    report.explanation_missing = "no pool of the gate serves this model: pass --model with one of the models its config's pools list";
    return;
  }
  if (session === undefined) {
    report.explanation_missing = 'a request without a session id is matched by its prompt-prefix hash, which only the gate knows: see GET /debug/decisions';
    return;
  }
  // Without the gate's key (when it has one) the decision is not found by its hash.
  const hash = hashSessionId(session, gateKey ? Buffer.from(gateKey, 'utf8') : undefined);
  try {
    const res = await fetch(new URL('/debug/decisions?limit=100', admin), { signal: AbortSignal.timeout(3000) });
    if (res.status !== 200) throw new Error(`answered ${res.status}`);
    const body = (await res.json()) as { decisions?: DecisionRecord[] };
    const record = body.decisions?.find((d) => d.key_hash === hash);
    if (record) report.decision = record;
    else report.explanation_missing = `the gate has no record of this decision (a rejected request before any worker was considered, over 100 newer decisions${gateKey ? '' : ', or a gate hashing session ids under a key: pass it here too, in KVGATE_SESSION_HASH_KEY or --session-hash-key'})`;
  } catch (err) {
    const code = (err as { cause?: { code?: string } }).cause?.code;
    report.explanation_missing = `cannot read ${admin}/debug/decisions (${code ?? (err as Error).message}): pass the gate's admin address with --admin for the explanation`;
  }
}

const OUTCOMES: Record<string, string> = {
  affinity_hit: 'stayed on the worker holding this session',
  new: 'a new key, placed by score',
  migrated: 'moved off its worker',
  unkeyed: 'no key: placed by load alone',
  shed: 'shed',
};

/** KV use, and past pressure the free KV a one-off had to fit in ("91.0%, 4,000 tokens free"). */
function kvUse(c: Candidate): string {
  if (c.kv_usage === undefined) return '-';
  const use = `${(c.kv_usage * 100).toFixed(1)}%`;
  return c.kv_room_tokens === undefined ? use : `${use}, ${c.kv_room_tokens.toLocaleString('en-US')} tokens free`;
}

export function formatTurn(r: TurnReport): string {
  const lines: string[] = [];
  if (r.result === 'answered') {
    lines.push(`turn ${r.turn}: the gate answered the client itself: ${r.status} ${r.body ?? ''}`.trimEnd());
  } else if (r.result === 'fallback') {
    lines.push(`turn ${r.turn}: no routing answer: ${r.explanation_missing}`);
  } else {
    const d = r.decision;
    const why = d ? `${d.outcome}: ${OUTCOMES[d.outcome] ?? d.outcome}${d.from ? ` (from ${d.from}${d.reason ? `, ${d.reason}` : ''})` : ''}` : '';
    lines.push(`turn ${r.turn}: → cluster ${r.cluster}${why ? `  (${why})` : ''}`);
    lines.push(`  headers set: ${Object.entries(r.headers_set ?? {}).map(([k, v]) => `${k}: ${v}`).join(', ') || 'none'}`);
  }
  const d = r.decision;
  if (d?.explanation?.candidates && d.explanation.candidates.length > 0) {
    const e = d.explanation;
    lines.push(`  pool ${d.pool ?? '-'}, key ${d.key_kind ?? 'none'} ${d.key_hash ? `${d.key_hash.slice(0, 12)}…` : ''}, policy ${e.mode ?? '-'}, rule ${e.rule ?? '-'}${e.spilled ? ' (spilled: too many requests of this session in flight)' : ''}, prompt ${e.total_blocks ?? 0} blocks`);
    const rows = [['', 'WORKER', 'STATE', 'IN-FLIGHT', 'PREFIX BLOCKS', 'KV USE', 'ENGINE WORK', 'SCORE']];
    for (const c of e.candidates!) {
      rows.push([
        c.worker === d.worker ? '*' : '',
        c.worker,
        c.state,
        `${c.inflight}/${c.max_inflight}`,
        `${c.prefix_blocks}/${e.total_blocks ?? 0}`,
        kvUse(c),
        c.work === undefined ? '-' : String(c.work),
        c.score === undefined ? '-' : c.score.toFixed(3),
      ]);
    }
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
    for (const row of rows) lines.push(`  ${row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd()}`);
    if (e.rule === 'sticky') lines.push('  (sticky: the session stays on its worker while it is healthy and below its limits; scores are not computed)');
  } else if (r.explanation_missing && r.result !== 'fallback') {
    lines.push(`  (${r.explanation_missing})`);
  }
  return `${lines.join('\n')}\n`;
}
