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
 * With a token (`--admin-token`, KVGATE_ADMIN_TOKEN), a state change needs `Authorization: Bearer
 * <token>`; reading stays open. The API has no other access control: bound beyond localhost (as
 * a pod must bind it for Prometheus), anyone who reaches the port could otherwise drain workers,
 * and a NetworkPolicy cannot tell a scrape from a PUT.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { KvgateError } from '../errors.js';
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
        opts.logger.error({ err: (err as Error).message }, 'admin request failed');
        send(res, 500, { error: 'internal error' });
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
    const url = new URL(req.url ?? '/', 'http://admin');
    const gate = this.opts.gate;
    if (req.method === 'GET' && url.pathname === '/healthz') return send(res, 200, { status: 'ok' });
    if (req.method === 'GET' && url.pathname === '/readyz') {
      const report = await this.opts.readiness.check();
      return send(res, report.ready ? 200 : 503, report);
    }
    if (req.method === 'GET' && url.pathname === '/metrics') {
      const { contentType, body } = await this.opts.metrics.exposition();
      if (res.headersSent) return;
      res.writeHead(200, { 'content-type': contentType });
      res.end(body);
      return;
    }
    if (req.method === 'GET' && url.pathname === '/workers') {
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
      return send(res, 200, { store: gate.store.backend, readiness: health, workers: out });
    }
    if (req.method === 'GET' && url.pathname === '/debug/decisions') {
      const limit = Math.min(100, Math.max(1, Number(url.searchParams.get('limit') ?? 20) || 20));
      // The gate keeps explanations as its TypeScript types have them; the API speaks snake_case.
      return send(res, 200, { decisions: snakeCaseKeys(gate.decisions.recent(limit)) });
    }
    const m = /^\/workers\/([^/]+)\/state$/.exec(url.pathname);
    if (m && (req.method === 'PUT' || req.method === 'POST')) {
      if (this.opts.token !== undefined && !bearerMatches(req.headers.authorization, this.opts.token)) {
        this.opts.logger.warn({ remote: req.socket.remoteAddress, path: url.pathname }, 'admin state change refused: missing or wrong bearer token');
        res.setHeader('www-authenticate', 'Bearer');
        return send(res, 401, { error: 'a state change needs the admin token: Authorization: Bearer <token>' });
      }
      const id = decodeURIComponent(m[1]!);
      const pool = gate.pools.poolOfWorker(id);
      if (!pool) return send(res, 404, { error: `no worker "${id}"` });
      const body = await readJson(req);
      const state = (body as { state?: unknown } | undefined)?.state;
      if (typeof state !== 'string' || !WORKER_STATES.includes(state as WorkerState)) {
        return send(res, 400, { error: `body must be {"state": one of ${WORKER_STATES.join(', ')}}` });
      }
      try {
        await gate.store.setWorkerState(pool.name, id, state as WorkerState);
      } catch (err) {
        // The store did not confirm in time (or is down): say so, not "internal error". The write
        // may still have landed; setting a state again is harmless, so the answer says to retry.
        if (!(err instanceof KvgateError) || err.code !== 'store_unavailable') throw err;
        this.opts.logger.warn({ worker: id, pool: pool.name, state, err: err.message }, 'worker state not recorded: the store did not answer');
        return send(res, 503, { error: `${err.message}; it may or may not have been recorded: set it again`, code: err.code });
      }
      this.opts.logger.info({ worker: id, pool: pool.name, state }, 'worker state set by operator');
      return send(res, 200, { id, state });
    }
    return send(res, 404, { error: 'not found' });
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
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_ADMIN_BODY) return undefined;
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return undefined;
  }
}
