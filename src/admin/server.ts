/**
 * The admin HTTP API (bound to localhost by default): liveness, readiness, Prometheus metrics,
 * the fleet as the gate sees it, and operator state changes such as draining a worker before
 * maintenance.
 *
 *   GET  /healthz                   200 while the process runs
 *   GET  /readyz                    200 when ready (src/health/readiness.ts), else 503; JSON says why
 *   GET  /metrics                   Prometheus text exposition (src/telemetry/metrics.ts)
 *   GET  /workers                   JSON: each worker's pool, state, in-flight count and limit
 *   PUT  /workers/<id>/state        body {"state": "draining" | "healthy" | "down" | "pressured"};
 *                                   503 when the store did not confirm the write (set it again)
 *   GET  /debug/decisions?limit=N   the last decisions and why: each candidate's load, prefix match, score
 *
 * Every GET path answers HEAD too; another method is a 405 naming the allowed ones, an unknown
 * path a 404, and a caller's mistake (a bad `limit`, a malformed worker id, a body too large or
 * not the JSON asked for) a 4xx with the error's code, all as JSON (`adminStatusFor`).
 *
 * With a token (`--admin-token`, KVGATE_ADMIN_TOKEN), a state change needs `Authorization: Bearer
 * <token>`; reading stays open. The API has no other access control: bound beyond localhost (as
 * a pod must bind it for Prometheus), anyone who reaches the port could otherwise drain workers,
 * and a NetworkPolicy cannot tell a scrape from a PUT.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { DEFAULTS } from '../config/defaults.js';
import { KvgateError, type ErrorCode } from '../errors.js';
import type { Gate } from '../gate/gate.js';
import type { Readiness } from '../health/readiness.js';
import { WORKER_STATES, type WorkerState } from '../routing/types.js';
import type { Metrics } from '../telemetry/metrics.js';

/** Admin bodies are tiny JSON documents; anything bigger is refused unread. */
const MAX_ADMIN_BODY = 64 * 1024;

export interface AdminServerOptions {
  gate: Gate;
  logger: Logger;
  readiness: Readiness;
  metrics: Metrics;
  /** Bearer token a state change must carry; none: state changes are open to whoever reaches the port. */
  token?: string;
}

export class AdminServer {
  private readonly server: http.Server;

  constructor(private readonly opts: AdminServerOptions) {
    this.server = http.createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        // A KvgateError with an answer of its own (a caller's mistake, a store that did not
        // confirm) is answered with what happened; anything else is the gate's own failure: an
        // error line, and no detail to the caller.
        const status = err instanceof KvgateError ? adminStatusFor(err.code) : 500;
        if (status === 500 || !(err instanceof KvgateError)) {
          opts.logger.error({ err: (err as Error).message }, 'admin request failed');
          return send(res, 500, { error: 'internal error' });
        }
        // The client may still be sending the body refused: the connection is not reused.
        if (status === 413 && !res.headersSent) res.setHeader('connection', 'close');
        send(res, status, { error: err.message, code: err.code });
      });
    });
  }

  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => resolve((this.server.address() as AddressInfo).port));
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.closeAllConnections();
      this.server.close(() => resolve());
    });
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = pathOf(req.url);
    const route = routeOf(path);
    if (!route) return send(res, 404, { error: `no such path: ${path.length > 200 ? `${path.slice(0, 200)}…` : path}` });
    // HEAD is GET without the body (Node's server writes none for a HEAD request).
    const method = req.method === 'HEAD' ? 'GET' : req.method;
    if (!route.methods.includes(method as AdminMethod)) {
      const allow = route.methods.flatMap((m) => (m === 'GET' ? ['GET', 'HEAD'] : [m])).join(', ');
      res.setHeader('allow', allow);
      return send(res, 405, { error: `${req.method} is not served at ${route.name}: use ${allow}` });
    }
    const gate = this.opts.gate;
    switch (route.name) {
      case '/healthz':
        return send(res, 200, { status: 'ok' });
      case '/readyz': {
        const report = await this.opts.readiness.check();
        return send(res, report.ready ? 200 : 503, report);
      }
      case '/metrics': {
        const { contentType, body } = await this.opts.metrics.exposition();
        if (res.headersSent) return;
        res.writeHead(200, { 'content-type': contentType });
        res.end(body);
        return;
      }
      case '/workers':
        return send(res, 200, await this.workers());
      case '/debug/decisions': {
        const limit = decisionsLimit(new URLSearchParams(queryOf(req.url)).get('limit'));
        // The gate keeps explanations as its TypeScript types have them; the API speaks snake_case.
        return send(res, 200, { decisions: snakeCaseKeys(gate.decisions.recent(limit)) });
      }
      case '/workers/<id>/state':
        return this.setState(req, res, route.id);
    }
  }

  private async workers(): Promise<unknown> {
    const gate = this.opts.gate;
    const out = [];
    for (const pool of gate.pools.all()) {
      const snap = await gate.store.snapshot({ pool: pool.name, key: undefined, workers: pool.workerIds, blocks: [] });
      for (const w of gate.views(snap, pool)) {
        const sig = gate.signalsOf(w.id);
        const s = sig?.record?.signals;
        out.push({
          id: w.id,
          pool: pool.name,
          cluster: pool.workers.get(w.id)?.cluster,
          state: w.state,
          inflight: w.inflight,
          max_inflight: w.maxInflight,
          ...(sig
            ? {
                reasons: sig.verdict.reasons,
                signals: {
                  running: s?.running,
                  waiting: s?.waiting,
                  kv_usage: s?.kvUsage,
                  gpu_temp_c: s?.gpuTempC,
                  fb_used_mib: s?.fbUsedMiB,
                  fb_free_mib: s?.fbFreeMiB,
                  age_ms: sig.record && Number.isFinite(sig.record.ageMs) ? Math.round(sig.record.ageMs) : null,
                  // How old the figures already were when scraped, where the page stamps its samples.
                  ...(typeof s?.sampleAgeMs === 'number' ? { sample_age_ms: Math.round(s.sampleAgeMs) } : {}),
                  scrape_failures: sig.record?.failures ?? 0,
                  // Why the last scrape failed (connection refused, a timeout, no engine series).
                  ...(sig.record?.error ? { last_error: sig.record.error } : {}),
                },
              }
            : {}),
        });
      }
    }
    // The store's health beside the fleet, so `kvgate status` shows a Redis outage too.
    const r = this.opts.readiness.report;
    const health = { ready: r.ready, status: r.status, store: r.store, ...(r.reason ? { reason: r.reason } : {}), ...(r.store_error ? { store_error: r.store_error } : {}) };
    return { store: gate.store.backend, readiness: health, workers: out };
  }

  private async setState(req: http.IncomingMessage, res: http.ServerResponse, rawId: string): Promise<void> {
    const gate = this.opts.gate;
    if (this.opts.token !== undefined && !bearerMatches(req.headers.authorization, this.opts.token)) {
      this.opts.logger.warn({ remote: req.socket.remoteAddress, path: pathOf(req.url).slice(0, 200) }, 'admin state change refused: missing or wrong bearer token');
      res.setHeader('www-authenticate', 'Bearer');
      return send(res, 401, { error: 'a state change needs the admin token: Authorization: Bearer <token>' });
    }
    let id: string;
    try {
      id = decodeURIComponent(rawId);
    } catch {
      throw new KvgateError('bad_request', 'the worker id in the path is not valid percent-encoding');
    }
    const pool = gate.pools.poolOfWorker(id);
    if (!pool) return send(res, 404, { error: `no worker "${id.length > 200 ? `${id.slice(0, 200)}…` : id}"` });
    const body = await readJson(req);
    const state = (body as { state?: unknown } | undefined)?.state;
    if (typeof state !== 'string' || !WORKER_STATES.includes(state as WorkerState)) {
      throw new KvgateError('bad_request', `body must be {"state": one of ${WORKER_STATES.join(', ')}}`);
    }
    try {
      await gate.store.setWorkerState(pool.name, id, state as WorkerState);
    } catch (err) {
      // The store did not confirm in time (or is down): say so, not "internal error". The write
      // may still have landed; setting a state again is harmless, so the answer says to retry.
      if (!(err instanceof KvgateError) || err.code !== 'store_unavailable') throw err;
      this.opts.logger.warn({ worker: id, pool: pool.name, state, err: err.message }, 'worker state not recorded: the store did not answer');
      throw new KvgateError('store_unavailable', `${err.message}; it may or may not have been recorded: set it again`, { cause: err });
    }
    this.opts.logger.info({ worker: id, pool: pool.name, state }, 'worker state set by operator');
    return send(res, 200, { id, state });
  }
}

type AdminMethod = 'GET' | 'PUT' | 'POST';

/** The admin API's paths, each with the methods it serves (GET also answers HEAD). */
const ROUTES = {
  '/healthz': ['GET'],
  '/readyz': ['GET'],
  '/metrics': ['GET'],
  '/workers': ['GET'],
  '/debug/decisions': ['GET'],
  '/workers/<id>/state': ['PUT', 'POST'],
} as const satisfies Record<string, readonly AdminMethod[]>;

type Route = { name: Exclude<keyof typeof ROUTES, '/workers/<id>/state'>; methods: readonly AdminMethod[] } | { name: '/workers/<id>/state'; methods: readonly AdminMethod[]; id: string };

function routeOf(path: string): Route | undefined {
  const m = /^\/workers\/([^/]+)\/state$/.exec(path);
  if (m) return { name: '/workers/<id>/state', methods: ROUTES['/workers/<id>/state'], id: m[1]! };
  if (path === '/workers/<id>/state' || !Object.hasOwn(ROUTES, path)) return undefined;
  const name = path as Exclude<keyof typeof ROUTES, '/workers/<id>/state'>;
  return { name, methods: ROUTES[name] };
}

/**
 * The request target's path, as sent (still percent-encoded). Read by hand, not with `new URL`,
 * which throws on targets a client may send (`//`, `//host:bad`) and would turn them into a 500,
 * and reads `//x` as a host, not a path.
 */
function pathOf(target: string | undefined): string {
  const t = originForm(target);
  const q = t.search(/[?#]/);
  return q < 0 ? t : t.slice(0, q);
}

function queryOf(target: string | undefined): string {
  const t = originForm(target).split('#')[0]!;
  const q = t.indexOf('?');
  return q < 0 ? '' : t.slice(q + 1);
}

/** A target in absolute form (`http://host/healthz`, as a proxy may send it) as its path and query; `/` if it is neither. */
function originForm(target: string | undefined): string {
  const t = target ?? '/';
  if (t.startsWith('/')) return t;
  try {
    const u = new URL(t);
    return `${u.pathname}${u.search}`;
  } catch {
    return '/';
  }
}

/**
 * `?limit=` of /debug/decisions: absent, the default; else a whole number from 1 to the number
 * the gate keeps. Anything else is the caller's mistake, answered as one: a script that asks for
 * `limit=1e9` or `limit=-5` learns the bounds instead of silently getting some other count.
 */
export function decisionsLimit(raw: string | null): number {
  if (raw === null) return DEFAULTS.debugDecisionsLimit;
  const n = /^\d{1,9}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 1 && n <= DEFAULTS.decisionLogSize)) {
    throw new KvgateError('bad_request', `limit must be a whole number from 1 to ${DEFAULTS.decisionLogSize} (default ${DEFAULTS.debugDecisionsLimit}); got "${raw.slice(0, 40)}"`);
  }
  return n;
}

/**
 * The admin API's HTTP status for each error code: the one place its errors become answers (the
 * ext_proc side has its own, src/extproc/status-map.ts, for what Envoy and LLM clients receive;
 * an operator's API answers a store that did not confirm with a 503 to retry, which a client's
 * request never sees).
 */
export function adminStatusFor(code: ErrorCode): number {
  switch (code) {
    case 'bad_request':
      return 400;
    case 'body_too_large':
      return 413;
    case 'store_unavailable':
      return 503;
    default:
      return 500;
  }
}

/**
 * Whether an Authorization header carries the token as a bearer credential. Compared as SHA-256
 * digests in constant time: neither the token's length nor a matching prefix shows in the timing.
 */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header ?? '');
  if (!m) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(m[1]!), digest(token));
}

/** A copy of plain JSON data with camelCase keys in snake_case (`totalBlocks` → `total_blocks`). */
export function snakeCaseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(snakeCaseKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), snakeCaseKeys(v)]));
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const body = await readBody(req);
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

/**
 * A request body of at most MAX_ADMIN_BODY bytes. One over it is refused: a declared length
 * before anything is read, else as soon as the count passes it. The rest is left to flow away
 * unread (memory stays bounded) rather than the request being destroyed: a destroyed socket can
 * reset the connection before the client has read the 413 that says why.
 */
function readBody(req: http.IncomingMessage): Promise<Buffer> {
  const tooLarge = () => new KvgateError('body_too_large', `an admin request body is at most ${MAX_ADMIN_BODY} bytes`);
  if (Number(req.headers['content-length'] ?? 0) > MAX_ADMIN_BODY) return Promise.reject(tooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_ADMIN_BODY) return void chunks.push(chunk);
      req.off('data', onData).off('end', onEnd);
      req.resume();
      reject(tooLarge());
    };
    const onEnd = () => resolve(Buffer.concat(chunks));
    req.on('data', onData).on('end', onEnd).once('error', reject);
  });
}
