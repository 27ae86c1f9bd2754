/**
 * Requests as the gate takes them (RequestInfo: headers in a Map, the body as bytes), for tests
 * that call Gate.route directly. Requests through the Envoy harness are built in envoy.ts.
 */
import type { RequestInfo } from '../../src/request/request.js';

/**
 * A chat completion whose one user message is `text`, with `model` in the body only when given
 * (a body without one is a case of its own) and a session header when `session` is given.
 */
export function chatRequest(text: string, opts: { model?: string; session?: string; headers?: Record<string, string> } = {}): RequestInfo {
  const headers = new Map<string, string>([['content-type', 'application/json']]);
  if (opts.session !== undefined) headers.set('x-session-id', opts.session);
  for (const [name, value] of Object.entries(opts.headers ?? {})) headers.set(name, value);
  const body = { ...(opts.model !== undefined ? { model: opts.model } : {}), messages: [{ role: 'user', content: text }] };
  return { method: 'POST', path: '/v1/chat/completions', headers, body: Buffer.from(JSON.stringify(body)) };
}
