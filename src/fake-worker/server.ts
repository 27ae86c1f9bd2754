/**
 * The fake worker's HTTP server: an OpenAI-compatible model server in front of the simulated
 * engine, with vLLM's `/metrics` and the test hooks.
 *
 *   POST /v1/chat/completions   chat completion; SSE stream with `"stream": true`
 *   POST /v1/completions        text completion; SSE stream with `"stream": true`
 *   POST /v1/messages           Anthropic Messages; Anthropic's named SSE events with `"stream": true`
 *   POST /v1/responses          OpenAI Responses, stored in memory (`previous_response_id` continues one); SSE events
 *   GET  /v1/models             the one model served
 *   GET  /health                200 (or what the `health` hook says)
 *   GET  /metrics               Prometheus text (or what the `metrics` hook says)
 *   GET  /control               the current test hooks, JSON
 *   POST /control               change them: a JSON object of fields (controls.ts)
 *
 * Every response carries `x-fake-worker-id`, so a client (the demo, a test) sees who served it.
 * Bad input gets vLLM's answer shape (`{"error": {message, type, param, code}}`) and never takes
 * the process down.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { initHashing } from '../request/hashing.js';
import { createLogger } from '../telemetry/logger.js';
import { applyControlPatch, normalControls, parseControlPatch, type ControlPatch, type ControlState } from './controls.js';
import { FAKE_WORKER_DEFAULTS, type FakeWorkerOptions } from './defaults.js';
import { EngineRefusal, FakeEngine } from './engine.js';
import { CONTENT_TYPE, GARBAGE_TEXT, truncated, WorkerMetrics, withTimestamps } from './metrics.js';
import { chunkBody, completionBody, completionId, errorBody, sse, usage, usageChunk, type FinishReason } from './openai.js';
import { parseCompletionRequest, type Endpoint } from './request.js';
import {
  anthropicError,
  messageBody,
  messageDeltaEvent,
  messageEndEvents,
  messageStartEvents,
  namedEvent,
  newId,
  parseMessagesRequest,
  parseResponsesRequest,
  ResponseStore,
  responseBody,
  type Outcome as ApiOutcome,
} from './apis.js';

/** `/control` bodies are a handful of fields. */
const MAX_CONTROL_BODY = 64 * 1024;

export interface FakeWorker {
  readonly id: string;
  readonly port: number;
  /** `http://host:port`, the base URL for requests. */
  readonly url: string;
  readonly engine: FakeEngine;
  readonly metrics: WorkerMetrics;
  /** The test hooks now in force. */
  controls(): ControlState;
  /** Changes test hooks in-process, as `POST /control` does. */
  control(patch: ControlPatch): Promise<ControlState>;
  /** Stops serving: aborts running generations and drops open connections (held ones included). */
  close(): Promise<void>;
}

export interface StartFakeWorkerOptions extends Partial<FakeWorkerOptions> {
  /** Test hooks in force from the start (the CLI's flags); `reset` returns here. */
  controls?: Partial<ControlState>;
  logger?: Logger;
}

export async function startFakeWorker(options: StartFakeWorkerOptions = {}): Promise<FakeWorker> {
  await initHashing();
  const { controls: initialControls, logger: givenLogger, ...rest } = options;
  const opts: FakeWorkerOptions = { ...FAKE_WORKER_DEFAULTS, ...stripUndefined(rest) };
  const logger = (givenLogger ?? createLogger('silent')).child({ component: 'fake-worker', worker: opts.id });
  const engine = new FakeEngine(opts);
  const initial: ControlState = { ...normalControls(opts.dcgm), ...stripUndefined(initialControls ?? {}) };
  let controls: ControlState = { ...initial };
  engine.slowFactor = controls.slow_factor;
  const metrics = new WorkerMetrics(engine, opts, () => controls);
  /** The exposition frozen when `metrics: stale` was set. */
  let frozen: { text: string; atMs: number } | undefined;
  const inFlight = new Set<AbortController>();
  const held = new Set<http.ServerResponse>();

  const setControls = async (patch: ControlPatch): Promise<ControlState> => {
    const before = controls;
    const next = applyControlPatch(controls, patch, initial);
    if (next.metrics === 'stale' && (before.metrics !== 'stale' || frozen === undefined)) {
      // Freeze what a scraper saw last, before the new hooks bend it.
      frozen = { text: await metrics.text(), atMs: Date.now() };
    }
    if (next.metrics !== 'stale') frozen = undefined;
    controls = next;
    engine.slowFactor = controls.slow_factor;
    return controls;
  };
  if (controls.metrics === 'stale') frozen = { text: await metrics.text(), atMs: Date.now() };

  /** Keeps a response open without answering (a hung exporter or health check). */
  const hold = (res: http.ServerResponse) => {
    held.add(res);
    res.on('close', () => held.delete(res));
  };

  const serveMetrics = async (res: http.ServerResponse) => {
    const c = controls;
    if (c.metrics_delay_ms > 0) await new Promise((r) => setTimeout(r, c.metrics_delay_ms));
    switch (c.metrics) {
      case 'error':
        return sendText(res, 500, 'internal server error\n');
      case 'timeout':
        return hold(res);
      case 'garbage':
        return sendText(res, 200, GARBAGE_TEXT, CONTENT_TYPE);
      case 'empty':
        return sendText(res, 200, '', CONTENT_TYPE);
      case 'partial':
        return sendText(res, 200, truncated(await metrics.text()), CONTENT_TYPE);
      case 'stale':
        return sendText(res, 200, frozen ? withTimestamps(frozen.text, frozen.atMs) : '', CONTENT_TYPE);
      default:
        return sendText(res, 200, await metrics.text(), CONTENT_TYPE);
    }
  };

  const serveCompletion = async (endpoint: Endpoint, req: http.IncomingMessage, res: http.ServerResponse) => {
    const body = await readBody(req, opts.maxBodyBytes);
    if (body === undefined) return sendJson(res, 413, errorBody(413, `the request body is larger than ${opts.maxBodyBytes} bytes`), true);
    const parsed = parseCompletionRequest(endpoint, body);
    if (!parsed.ok) {
      logger.debug({ endpoint, err: parsed.message }, 'bad completion request');
      return sendJson(res, 400, errorBody(400, parsed.message, parsed.param));
    }
    const r = parsed.value;
    const maxTokens = r.maxTokens ?? opts.defaultOutputTokens;
    const finish: FinishReason = r.maxTokens === undefined ? 'stop' : 'length';
    const meta = { id: completionId(endpoint), created: Math.floor(Date.now() / 1000), model: r.model ?? opts.model };
    const abort = new AbortController();
    inFlight.add(abort);
    // The client (or Envoy) went away: stop generating and free the batch slot and KV blocks.
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    let started = false;
    const startStream = () => {
      if (started) return;
      started = true;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders();
    };
    try {
      // vLLM's streaming response starts (headers out) as soon as the request is accepted.
      const result = await engine.generate({
        prompt: r.prompt,
        maxTokens,
        signal: abort.signal,
        onToken: r.stream
          ? (text, i) => {
              if (res.writableEnded || res.destroyed) return;
              if (i === 0 && endpoint === 'chat') res.write(sse(chunkBody(endpoint, meta, { role: 'assistant', content: '' }, null)));
              res.write(sse(chunkBody(endpoint, meta, { content: text }, null)));
            }
          : undefined,
        ...(r.stream ? { onAccepted: startStream } : {}),
        ...(r.model !== undefined && opts.loraModules.includes(r.model) ? { adapter: r.model } : {}),
      });
      if (result.aborted) return;
      const u = usage(result.promptTokens, result.completionTokens, result.cachedTokens);
      if (r.stream) {
        startStream();
        res.write(sse(chunkBody(endpoint, meta, endpoint === 'chat' ? { content: '' } : undefined, finish)));
        if (r.includeUsage) res.write(sse(usageChunk(endpoint, meta, u)));
        res.end(sse('[DONE]'));
      } else {
        sendJson(res, 200, completionBody(endpoint, meta, result.output, finish, u));
      }
    } catch (err) {
      if (err instanceof EngineRefusal) {
        const status = err.reason === 'too_long' ? 400 : 503;
        logger.debug({ reason: err.reason }, 'request refused');
        return sendJson(res, status, errorBody(status, err.message));
      }
      throw err;
    } finally {
      inFlight.delete(abort);
    }
  };

  const stored = new ResponseStore();

  /** Anthropic Messages and OpenAI Responses: the same engine, each API's bodies and events. */
  const serveApi = async (api: 'messages' | 'responses', req: http.IncomingMessage, res: http.ServerResponse) => {
    const fail = (status: number, message: string, param?: string) =>
      sendJson(res, status, api === 'messages' ? anthropicError(status, message) : errorBody(status, message, param), status === 413);
    const body = await readBody(req, opts.maxBodyBytes);
    if (body === undefined) return fail(413, `the request body is larger than ${opts.maxBodyBytes} bytes`);
    const parsed = api === 'messages' ? parseMessagesRequest(body) : parseResponsesRequest(body, stored);
    if (!parsed.ok) {
      logger.debug({ api, err: parsed.message }, 'bad request');
      return fail(parsed.status, parsed.message, parsed.param);
    }
    const r = parsed.value;
    const outcome: ApiOutcome = { id: newId(api === 'messages' ? 'msg' : 'resp'), model: r.model ?? opts.model, text: '', promptTokens: 0, cachedTokens: 0, completionTokens: 0, truncated: false };
    const abort = new AbortController();
    inFlight.add(abort);
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    let seq = 0;
    const event = (type: string, data: Record<string, unknown>) => namedEvent(type, { type, sequence_number: seq++, ...data });
    let started = false;
    const startStream = () => {
      if (started) return;
      started = true;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(api === 'messages' ? messageStartEvents(outcome.id, outcome.model) : event('response.created', { response: responseBody(outcome, 'in_progress', r.previousResponseId) }));
    };
    try {
      const result = await engine.generate({
        prompt: r.prompt,
        maxTokens: r.maxTokens ?? opts.defaultOutputTokens,
        signal: abort.signal,
        onToken: r.stream
          ? (text) => {
              if (res.writableEnded || res.destroyed) return;
              res.write(api === 'messages' ? messageDeltaEvent(text) : event('response.output_text.delta', { item_id: `msg_${outcome.id.slice(5)}`, output_index: 0, content_index: 0, delta: text }));
            }
          : undefined,
        ...(r.stream ? { onAccepted: startStream } : {}),
        ...(r.model !== undefined && opts.loraModules.includes(r.model) ? { adapter: r.model } : {}),
      });
      if (result.aborted) return;
      Object.assign(outcome, { text: result.output, promptTokens: result.promptTokens, cachedTokens: result.cachedTokens, completionTokens: result.completionTokens, truncated: r.maxTokens !== undefined });
      if (api === 'responses' && r.store) stored.set(outcome.id, [...r.turns, { role: 'assistant', content: result.output }]);
      if (r.stream) {
        startStream();
        res.end(api === 'messages' ? messageEndEvents(outcome) : event('response.completed', { response: responseBody(outcome, 'completed', r.previousResponseId) }));
      } else {
        sendJson(res, 200, api === 'messages' ? messageBody(outcome) : responseBody(outcome, 'completed', r.previousResponseId));
      }
    } catch (err) {
      if (err instanceof EngineRefusal) return fail(err.reason === 'too_long' ? 400 : 503, err.message);
      throw err;
    } finally {
      inFlight.delete(abort);
    }
  };

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    res.setHeader('x-fake-worker-id', opts.id);
    const url = new URL(req.url ?? '/', 'http://fake-worker');
    const path = url.pathname;
    const route = `${req.method ?? ''} ${path}`;
    switch (route) {
      case 'POST /v1/chat/completions':
        return serveCompletion('chat', req, res);
      case 'POST /v1/completions':
        return serveCompletion('completions', req, res);
      case 'POST /v1/messages':
        return serveApi('messages', req, res);
      case 'POST /v1/responses':
        return serveApi('responses', req, res);
      case 'GET /v1/models':
        return sendJson(res, 200, {
          object: 'list',
          data: [{ id: opts.model, object: 'model', created: 0, owned_by: 'kvgate-fake-worker', root: opts.model, max_model_len: engine.maxModelLen }],
        });
      case 'GET /health':
        if (controls.health === 'timeout') return hold(res);
        if (controls.health === 'error') return sendJson(res, 503, errorBody(503, 'engine unhealthy (forced by /control)'));
        return sendText(res, 200, '');
      case 'GET /metrics':
        return serveMetrics(res);
      case 'GET /control':
        return sendJson(res, 200, controls);
      case 'POST /control': {
        const body = await readBody(req, MAX_CONTROL_BODY);
        let raw: unknown;
        try {
          raw = JSON.parse(body?.toString('utf8') ?? '');
        } catch {
          return sendJson(res, 400, { error: 'the body must be a JSON object of control fields' });
        }
        const patch = parseControlPatch(raw);
        if (!patch.ok) return sendJson(res, 400, { error: 'invalid control fields', problems: patch.problems });
        const next = await setControls(patch.value);
        logger.info({ controls: patch.value }, 'test hooks changed');
        return sendJson(res, 200, next);
      }
      default: {
        const known = ['/v1/chat/completions', '/v1/completions', '/v1/messages', '/v1/responses', '/v1/models', '/health', '/metrics', '/control'].includes(path);
        return known ? sendJson(res, 405, errorBody(405, `${req.method} is not allowed on ${path}`)) : sendJson(res, 404, errorBody(404, `no route for ${path}`));
      }
    }
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      logger.error({ err: (err as Error).message }, 'fake worker request failed');
      if (!res.headersSent) sendJson(res, 500, errorBody(500, 'internal error'));
      else res.destroy();
    });
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
  const hostForUrl = opts.host.includes(':') ? `[${opts.host}]` : opts.host === '0.0.0.0' ? '127.0.0.1' : opts.host;
  let closing: Promise<void> | undefined;
  return {
    id: opts.id,
    port,
    url: `http://${hostForUrl}:${port}`,
    engine,
    metrics,
    controls: () => controls,
    control: setControls,
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const a of inFlight) a.abort();
        for (const res of held) res.destroy();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

/** Reads a body up to `limit` bytes; undefined when it is larger (the rest is not read). */
async function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function sendJson(res: http.ServerResponse, status: number, body: unknown, close = false): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json', ...(close ? { connection: 'close' } : {}) });
  res.end(JSON.stringify(body));
}

function sendText(res: http.ServerResponse, status: number, text: string, contentType = 'text/plain; charset=utf-8'): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': contentType });
  res.end(text);
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
