/**
 * `kvgate demo` end to end, in one process: fake workers (src/fake-worker/), the real gate
 * (startKvgate on the memory store, with a config generated for those workers), and sessions
 * driven through the gate the way Envoy drives it (./envoy-client.ts): ext_proc decides, the
 * request goes over HTTP to the worker of the chosen cluster, and the worker's response headers
 * go back to the gate. What the clients see (which worker answered, `cached_tokens` in the usage)
 * is what the view shows.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { startKvgate, type RunningKvgate } from '../app.js';
import { parseConfig } from '../config/load.js';
import { startFakeWorker, type FakeWorker } from '../fake-worker/server.js';
import { createLogger } from '../telemetry/logger.js';
import { demoSessions, type DemoSession, type Turn } from './conversations.js';
import { EnvoyLikeClient } from './envoy-client.js';
import { deadline, type Deadline } from '../util/deadline.js';

/** The demo fleet's workers: a slow prefill, so a cache hit visibly shortens time to first token. */
const DEMO_WORKER = {
  kvCapacityTokens: 100_000,
  prefillTokensPerS: 5000,
  prefillOverheadMs: 15,
  decodeMsPerToken: 8,
  maxBatch: 16,
  dcgm: true,
} as const;
/** Per-worker in-flight limit in the generated gate config. */
const DEMO_MAX_INFLIGHT = 8;
/**
 * Sessions start this far apart: about one cold prefill of a system prompt (1,500 tokens at 5,000
 * tokens/s), so the later sessions of a system prompt find it already computed somewhere.
 */
const SESSION_STAGGER_MS = 250;
/** After `--duration`, turns still running get this long before everything stops. */
const STOP_GRACE_MS = 5000;
const MODEL = 'llama';
const ROUTING_HEADER = 'x-kvgate-cluster';
const DEFAULT_ADMIN = 'http://127.0.0.1:9090';

export interface DemoOptions {
  workers: number;
  sessions: number;
  turns: number;
  durationS: number;
  /** Mean pause between a session's turns (a person reading the answer). */
  thinkMs: number;
  /** How long the Envoy stand-in waits for each gate reply before failing open (Envoy's message_timeout). */
  messageTimeoutMs?: number;
  logger?: Logger;
  /**
   * A running gate to drive instead of starting one: its ext_proc address (host:port). The demo
   * then starts a fake worker for each cluster the gate's admin API (`admin`) lists, or sends each
   * cluster's requests to the URL `upstreams` names for it.
   */
  target?: string;
  /** The running gate's admin API (with `target`). */
  admin?: string;
  /** cluster → base URL of a model server, for a running gate's clusters (with `target`). */
  upstreams?: Record<string, string>;
  /** The header the gate names the cluster in (routing.header of its config). */
  routingHeader?: string;
  signal?: AbortSignal;
  /** Called after each answered turn and each shed or failed request. */
  onEvent?: (event: DemoEvent, state: DemoState) => void;
  /** Called once everything is running, with the state the view draws from. */
  onStart?: (state: DemoState) => void;
}

export type DemoEvent =
  | { kind: 'turn'; atS: number; session: DemoSession; worker: string; moved: boolean; promptTokens: number; cachedTokens: number; ttftMs: number }
  | { kind: 'shed'; atS: number; session: DemoSession; status: number }
  | { kind: 'error'; atS: number; session: DemoSession; message: string };

export interface WorkerStats {
  id: string;
  /** The model server this cluster's requests go to: a fake worker, or a URL (`--upstream`). */
  worker: Upstream;
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  ttftMsTotal: number;
  /** Requests this client has open to the worker (what Envoy's least-request fallback counts). */
  active: number;
}

export interface DemoState {
  startedAt: number;
  options: DemoOptions;
  sessions: DemoSession[];
  workers: WorkerStats[];
  grpcTarget: string;
  adminUrl: string;
  /** The gate was already running (`--target`): the demo did not start it. */
  external: boolean;
  requests: number;
  shed: number;
  errors: number;
  /** Requests the gate set no routing header for (Envoy's fallback route took them). */
  unrouted: number;
}

/** The summary `--json` prints: snake_case, like every JSON kvgate writes. */
export interface DemoSummary {
  elapsed_s: number;
  requests: number;
  shed: number;
  errors: number;
  unrouted: number;
  /** Cached prompt tokens / prompt tokens, over every answered turn. */
  hit_rate: number;
  /** Turns after a session's first. */
  follow_ups: number;
  /** Of those, the ones served by the same worker as the session's previous turn. */
  stayed: number;
  sticky_rate: number;
  workers: Array<{ id: string; requests: number; hit_rate: number; mean_ttft_ms: number }>;
  sessions: Array<{ id: string; system_prompt: string; turns: number; workers: string[] }>;
}

/** Where a cluster's requests go; `engine` is there for fake workers the demo started (the live view reads it). */
export interface Upstream {
  id: string;
  url: string;
  engine?: FakeWorker['engine'];
  close(): Promise<void>;
}

/** A running gate's clusters, from its admin API's `GET /workers`. */
async function clustersOf(admin: string): Promise<string[]> {
  let res: Response;
  try {
    res = await fetch(new URL('/workers', admin), { signal: AbortSignal.timeout(5000) });
  } catch (err) {
    const code = (err as { cause?: { code?: string } }).cause?.code;
    throw new Error(
      `cannot read the gate's workers from its admin API at ${admin} (${code ?? (err as Error).message}): pass --admin with its admin address, or name every cluster's model server with --upstream CLUSTER=URL`,
    );
  }
  if (res.status !== 200) throw new Error(`the admin API at ${admin} answered ${res.status} to GET /workers`);
  const body = (await res.json()) as { workers?: Array<{ cluster?: unknown; id?: unknown }> };
  const clusters = (body.workers ?? []).map((w) => String(w.cluster ?? w.id));
  if (clusters.length === 0) throw new Error(`the gate at ${admin} lists no workers`);
  return [...new Set(clusters)];
}

export async function runDemo(opts: DemoOptions): Promise<DemoSummary> {
  const logger = opts.logger ?? createLogger('silent');
  const workers: Upstream[] = [];
  let gate: RunningKvgate | undefined;
  let client: EnvoyLikeClient | undefined;
  let stop: Deadline | undefined;
  const routingHeader = opts.routingHeader ?? ROUTING_HEADER;
  try {
    if (opts.target !== undefined) {
      // A running gate: stand in for the model servers behind the clusters it routes to.
      const clusters = opts.upstreams && !opts.admin ? Object.keys(opts.upstreams) : await clustersOf(opts.admin ?? DEFAULT_ADMIN);
      for (const cluster of clusters) {
        const url = opts.upstreams?.[cluster];
        if (url !== undefined) workers.push({ id: cluster, url: url.replace(/\/$/, ''), close: async () => {} });
        else workers.push(await startFakeWorker({ ...DEMO_WORKER, id: cluster, model: MODEL, host: '127.0.0.1', port: 0, logger }));
      }
      client = new EnvoyLikeClient(opts.target, routingHeader, opts.messageTimeoutMs);
      try {
        await client.ready(5000);
      } catch {
        throw new Error(`no gate answers ext_proc at ${opts.target}: is it running, and is that its --grpc-port?`);
      }
    } else {
      for (let i = 1; i <= opts.workers; i++) {
        workers.push(await startFakeWorker({ ...DEMO_WORKER, id: `worker_${i}`, model: MODEL, host: '127.0.0.1', port: 0, logger }));
      }
    }
    const config = opts.target !== undefined ? undefined : parseConfig(
      {
        routing: { header: ROUTING_HEADER },
        // The gate scrapes its workers' /metrics as it would a vLLM fleet's, so its decisions (and
        // `kvgate status`) see their running and queued requests and KV use.
        workers: workers.map((w) => ({ id: w.id, cluster: w.id, max_inflight: DEMO_MAX_INFLIGHT, kv_capacity_tokens: DEMO_WORKER.kvCapacityTokens, metrics_url: `${w.url}/metrics` })),
      },
      'demo config',
    );
    if (config) {
      gate = await startKvgate({ config, logger, store: 'memory', grpcHost: '127.0.0.1', grpcPort: 0, adminHost: '127.0.0.1', adminPort: 0 });
      client = new EnvoyLikeClient(`127.0.0.1:${gate.grpcPort}`, routingHeader, opts.messageTimeoutMs);
    }
    await warmUp(client!);
    const state: DemoState = {
      startedAt: performance.now(),
      options: opts,
      sessions: demoSessions(opts.sessions),
      workers: workers.map((w) => ({ id: w.id, worker: w, requests: 0, promptTokens: 0, cachedTokens: 0, ttftMsTotal: 0, active: 0 })),
      grpcTarget: gate ? `127.0.0.1:${gate.grpcPort}` : opts.target!,
      adminUrl: gate ? `http://127.0.0.1:${gate.adminPort}` : (opts.admin ?? DEFAULT_ADMIN),
      external: gate === undefined,
      requests: 0,
      shed: 0,
      errors: 0,
      unrouted: 0,
    };
    opts.onStart?.(state);
    const endAt = state.startedAt + opts.durationS * 1000;
    // Turns still running at the end get a grace period, then every request is cut off.
    // (Not AbortSignal.any over AbortSignal.timeout: on Node 20 a GC can lose that timeout; ../util/deadline.ts.)
    const hardStop = (stop = deadline(opts.durationS * 1000 + STOP_GRACE_MS, opts.signal ? [opts.signal] : [])).signal;
    const driver = new Driver(client!, state, hardStop, opts.onEvent);
    await Promise.all(
      state.sessions.map(async (s, i) => {
        if (!(await pause(SESSION_STAGGER_MS * i, hardStop))) return;
        while (s.turns < opts.turns && performance.now() < endAt && !opts.signal?.aborted && !hardStop.aborted) {
          const outcome = await driver.turn(s);
          const wait = outcome === 'done' ? opts.thinkMs * (0.5 + Math.random()) : outcome === 'shed' ? 500 : 200;
          if (!(await pause(wait, hardStop))) return;
        }
      }),
    );
    return summarize(state);
  } finally {
    stop?.clear();
    client?.close();
    await gate?.close(1000);
    await Promise.all(workers.map((w) => w.close()));
  }
}

/**
 * Connects to the gate and sends it one body-less request (routed by load alone, so it teaches
 * the gate nothing): a cold process's first decision can take longer than Envoy's 500 ms message
 * timeout, and the demo's clock should start on a warm path, as a real Envoy's would.
 */
async function warmUp(client: EnvoyLikeClient): Promise<void> {
  await client.ready(5000);
  const answer = await client.route({ method: 'GET', path: '/v1/models', authority: 'llm.demo', headers: {} });
  if (answer.kind === 'upstream') await answer.exchange.responseHeaders(200, {});
}

/** Sleeps unless the signal fires first; false when it did. */
async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return false;
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}

class Driver {
  private readonly byCluster: Map<string, WorkerStats>;

  constructor(
    private readonly client: EnvoyLikeClient,
    private readonly state: DemoState,
    private readonly signal: AbortSignal,
    private readonly onEvent: DemoOptions['onEvent'],
  ) {
    this.byCluster = new Map(state.workers.map((w) => [w.id, w]));
  }

  private at(): number {
    return (performance.now() - this.state.startedAt) / 1000;
  }

  private emit(e: DemoEvent): void {
    this.onEvent?.(e, this.state);
  }

  /** One turn of a session through the gate and a worker. */
  async turn(s: DemoSession): Promise<'done' | 'shed' | 'error'> {
    const turn = s.nextTurn(MODEL);
    try {
      return await this.exchange(s, turn);
    } catch (err) {
      if (this.signal.aborted) return 'error';
      this.state.errors++;
      this.emit({ kind: 'error', atS: this.at(), session: s, message: (err as Error).message });
      return 'error';
    }
  }

  private async exchange(s: DemoSession, turn: Turn): Promise<'done' | 'shed' | 'error'> {
    const answer = await this.client.route({
      method: 'POST',
      path: '/v1/chat/completions',
      authority: 'llm.demo',
      headers: { 'content-type': 'application/json', 'x-session-id': s.id },
      body: turn.body,
    });
    if (answer.kind === 'local') {
      if (answer.status === 429 || answer.status === 503) {
        this.state.shed++;
        this.emit({ kind: 'shed', atS: this.at(), session: s, status: answer.status });
        return 'shed';
      }
      throw new Error(`the gate answered ${answer.status}: ${answer.body.slice(0, 120)}`);
    }
    let target: WorkerStats | undefined;
    if (answer.cluster === undefined) {
      // Envoy's fallback route: least request over every worker.
      this.state.unrouted++;
      target = this.state.workers.reduce((a, b) => (b.active < a.active ? b : a));
    } else {
      target = this.byCluster.get(answer.cluster);
      if (!target) {
        answer.exchange.abandon();
        throw new Error(`the gate chose cluster "${answer.cluster}", which Envoy does not know (503)`);
      }
    }
    target.active++;
    const sent = performance.now();
    try {
      const res = await fetch(`${target.worker.url}/v1/chat/completions`, {
        method: 'POST',
        headers: answer.headers,
        body: turn.body,
        signal: this.signal,
      });
      await answer.exchange.responseHeaders(res.status, { 'content-type': res.headers.get('content-type') ?? '' });
      if (res.status !== 200) throw new Error(`${target.id} answered ${res.status}: ${(await res.text()).slice(0, 120)}`);
      const streamed = await readChatStream(res, sent);
      const previous = s.workers[s.workers.length - 1];
      s.answered(turn, streamed.text, target.id, streamed.promptTokens, streamed.cachedTokens);
      target.requests++;
      target.promptTokens += streamed.promptTokens;
      target.cachedTokens += streamed.cachedTokens;
      target.ttftMsTotal += streamed.ttftMs;
      this.state.requests++;
      this.emit({
        kind: 'turn',
        atS: this.at(),
        session: s,
        worker: target.id,
        moved: previous !== undefined && previous !== target.id,
        promptTokens: streamed.promptTokens,
        cachedTokens: streamed.cachedTokens,
        ttftMs: streamed.ttftMs,
      });
      return 'done';
    } catch (err) {
      answer.exchange.abandon();
      throw err;
    } finally {
      target.active--;
    }
  }
}

/** Reads an OpenAI chat SSE stream: the answer's text, time to its first token, and the usage chunk. */
async function readChatStream(res: Response, sentAt: number): Promise<{ text: string; ttftMs: number; promptTokens: number; cachedTokens: number }> {
  const out = { text: '', ttftMs: NaN, promptTokens: 0, cachedTokens: 0 };
  const decoder = new TextDecoder();
  let buffer = '';
  const onEvent = (data: string) => {
    if (data === '[DONE]') return;
    const chunk = JSON.parse(data) as {
      choices?: Array<{ delta?: { content?: string } }>;
      usage?: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } };
    };
    const content = chunk.choices?.[0]?.delta?.content;
    if (content) {
      if (Number.isNaN(out.ttftMs)) out.ttftMs = performance.now() - sentAt;
      out.text += content;
    }
    if (chunk.usage) {
      out.promptTokens = chunk.usage.prompt_tokens ?? 0;
      out.cachedTokens = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
  };
  for await (const piece of res.body ?? []) {
    buffer += decoder.decode(piece as Uint8Array, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) if (line.startsWith('data: ')) onEvent(line.slice(6));
    }
  }
  return out;
}

/** The fleet's totals so far: prompt and cached tokens, follow-up turns and those that stayed. */
export function demoTotals(state: DemoState): { prompt: number; cached: number; followUps: number; stayed: number } {
  let followUps = 0;
  let stayed = 0;
  let prompt = 0;
  let cached = 0;
  for (const s of state.sessions) {
    prompt += s.promptTokens;
    cached += s.cachedTokens;
    for (let i = 1; i < s.workers.length; i++) {
      followUps++;
      if (s.workers[i] === s.workers[i - 1]) stayed++;
    }
  }
  return { prompt, cached, followUps, stayed };
}

export function summarize(state: DemoState): DemoSummary {
  const { prompt, cached, followUps, stayed } = demoTotals(state);
  return {
    elapsed_s: (performance.now() - state.startedAt) / 1000,
    requests: state.requests,
    shed: state.shed,
    errors: state.errors,
    unrouted: state.unrouted,
    hit_rate: prompt > 0 ? cached / prompt : 0,
    follow_ups: followUps,
    stayed,
    sticky_rate: followUps > 0 ? stayed / followUps : 0,
    workers: state.workers.map((w) => ({
      id: w.id,
      requests: w.requests,
      hit_rate: w.promptTokens > 0 ? w.cachedTokens / w.promptTokens : 0,
      mean_ttft_ms: w.requests > 0 ? w.ttftMsTotal / w.requests : 0,
    })),
    sessions: state.sessions.map((s) => ({ id: s.id, system_prompt: s.systemPrompt, turns: s.turns, workers: [...s.workers] })),
  };
}
