/**
 * Shortcuts for driving a gate the way Envoy does, on top of the harness in test/harness/.
 */
import path from 'node:path';
import assert from 'node:assert/strict';
import { isClosed, isTimedOut, type Outcome, type RawStream } from '../harness/envoy-harness.js';
import { EnvoyHarness, type EnvoyHarnessOptions } from '../harness/envoy-harness.js';
import { loadEnvoyConfig, type ParsedEnvoyConfig } from '../harness/envoy-config.js';
import type { ReceivedProcessingResponse as ProcessingResponse } from '../../src/extproc/messages.js';

export const ENVOY_YAML = path.resolve(import.meta.dirname, '../../envoy/envoy.yaml');

export function envoyConfig(): ParsedEnvoyConfig {
  return loadEnvoyConfig(ENVOY_YAML);
}

/**
 * Request header limits high enough for the hostile inputs (2,000 headers, a 1 MB cookie, a 100 KB
 * query string) to reach kvgate at all. Under the HCM's defaults (100 headers, 60 KB) Envoy's
 * codec refuses such a request before ext_proc runs, and ext_proc refuses any mutation of a header
 * map past them (mutation_utils.cc, modelled in test/harness/mutations.ts and tested at the
 * defaults there); these tests stand for an Envoy whose limits were raised to let them in.
 */
const RAISED_HEADER_LIMITS = { maxHeadersKb: 8192, maxHeadersCount: 10_000 };

/**
 * A harness for envoy/envoy.yaml. Its message timeout is raised from the config's 0.5 s to 5 s:
 * these tests are about what the gate answers, and a loaded CI machine must not turn a slow answer
 * into Envoy's fail-open fallback. Tests about timeouts set their own. Header limits are raised
 * (RAISED_HEADER_LIMITS).
 */
export function harness(target: string, opts: Omit<EnvoyHarnessOptions, 'target' | 'config'> & { config?: ParsedEnvoyConfig } = {}): EnvoyHarness {
  const config = { ...(opts.config ?? envoyConfig()), requestHeaderLimits: RAISED_HEADER_LIMITS };
  return new EnvoyHarness({ target, ...opts, config, extProcOverride: { messageTimeoutMs: 5000, ...opts.extProcOverride } });
}

/**
 * Calls `fn` on every object of a parsed YAML or JSON document, each before what it holds (so
 * what `fn` puts in is visited too): for tests that edit an Envoy config in place.
 */
export function eachObject(doc: unknown, fn: (o: Record<string, unknown>) => void): void {
  if (Array.isArray(doc)) for (const x of doc) eachObject(x, fn);
  else if (doc !== null && typeof doc === 'object') {
    fn(doc as Record<string, unknown>);
    for (const v of Object.values(doc)) eachObject(v, fn);
  }
}

/** A chat completion request as an OpenAI client sends it. */
export function chat(opts: { session?: string; user?: string; system?: string; text?: string; model?: string; headers?: Record<string, string> } = {}) {
  const messages = [
    ...(opts.system ? [{ role: 'system', content: opts.system }] : []),
    { role: 'user', content: opts.text ?? 'hello' },
  ];
  return {
    method: 'POST',
    path: '/v1/chat/completions',
    headers: {
      host: 'llm.example',
      'content-type': 'application/json',
      ...(opts.session ? { 'x-session-id': opts.session } : {}),
      ...opts.headers,
    },
    body: JSON.stringify({ model: opts.model ?? 'llama', messages, ...(opts.user ? { user: opts.user } : {}) }),
  };
}

export function headersMsg(headers: Record<string, string>, endOfStream: boolean) {
  return {
    request_headers: {
      headers: { headers: Object.entries(headers).map(([key, v]) => ({ key, raw_value: Buffer.from(v, 'latin1') })) },
      end_of_stream: endOfStream,
    },
  };
}

/** The cluster a reply routes to (its x-kvgate-cluster set_header), if any. */
export function routedCluster(reply: ProcessingResponse, header = 'x-kvgate-cluster'): string | undefined {
  const common = reply.request_headers?.response ?? reply.request_body?.response;
  const h = common?.header_mutation?.set_headers?.find((s) => s.header?.key === header);
  return h?.header?.raw_value ? Buffer.from(h.header.raw_value).toString() : undefined;
}

/**
 * Opens a stream and sends a body-less request with a session header, so the gate decides on the
 * headers and the request then stays in flight until the stream ends: a way to hold load on a worker.
 */
export async function holdRequest(h: EnvoyHarness, session: string): Promise<{ cluster: string | undefined; reply: ProcessingResponse; stream: RawStream }> {
  const stream = h.openRawStream();
  stream.write(headersMsg({ ':method': 'GET', ':path': '/v1/models', ':scheme': 'http', ':authority': 'llm', 'x-session-id': session }, true) as never);
  const ev = await stream.next(3000);
  if (isClosed(ev) || isTimedOut(ev)) throw new Error(`no reply for ${session}: ${JSON.stringify(ev)}`);
  return { cluster: routedCluster(ev), reply: ev, stream };
}

export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs = 3000, what = 'condition'): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The cluster a request was sent to; fails the test when it was answered at once instead (shed,
 * rejected). Use it wherever a test asserts where a request went *not*: a shed request went nowhere.
 */
export function clusterOf(out: Outcome): string {
  assert.equal(out.kind, 'upstream', out.kind === 'local' ? `answered ${out.status} at once: ${out.body.toString()}` : `outcome ${out.kind}`);
  assert.ok(out.cluster, 'routed to a cluster');
  return out.cluster;
}
