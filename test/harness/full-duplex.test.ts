/**
 * FULL_DUPLEX_STREAMED, the body mode inference gateways use (Istio's InferencePool filter, llm-d,
 * Envoy AI Gateway), and protocol_config, through the harness's model of Envoy.
 *
 * First the harness's own rules, against scripted servers, so a harness that stopped modelling
 * Envoy would turn these red; then kvgate end to end: the ext_proc settings Istio gives an InferencePool's routes,
 * 2 KB and 400 KB prompts echoed byte for byte in both directions, sheds and bad input as
 * immediate responses, and the body mode Envoy declares winning over the config's fallback.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { parse, stringify } from 'yaml';
import type { ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from '../../src/extproc/messages.js';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import { ENVOY_YAML, chat, eachObject } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';
import { parseEnvoyConfig, type ParsedEnvoyConfig, type ProcessingMode } from './envoy-config.js';
import { EnvoyHarness, type EnvoyHarnessOptions, type LocalOutcome, type Outcome, type UpstreamOutcome } from './envoy-harness.js';

const EPP_ENVOY = path.resolve(import.meta.dirname, '../../envoy/endpoint-picker/envoy.yaml');

const DUPLEX: Partial<ProcessingMode> = {
  request_body_mode: 'FULL_DUPLEX_STREAMED',
  response_body_mode: 'FULL_DUPLEX_STREAMED',
  request_trailer_mode: 'SEND',
  response_trailer_mode: 'SEND',
};

/**
 * The ext_proc settings an InferencePool's routes run with under Istio, as one filter. Istio builds
 * a listener-level filter that sends nothing and fails open (pilot/pkg/xds/filters/filters.go,
 * InferencePoolExtProc: header modes SKIP, failure_mode_allow true) and gives each InferencePool
 * route an ExtProcPerRoute override with these processing modes, its picker's grpc_service, and
 * failure_mode_allow from the pool's endpointPickerRef.failureMode (pilot/pkg/networking/core/
 * route/route.go; default FailClose, so false). The merged result for the default is what is
 * written here; the FailOpen path (a per-route fail-open) is not modelled this way.
 */
const ISTIO_INFERENCE_POOL_FILTER = {
  '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
  grpc_service: { envoy_grpc: { cluster_name: 'kvgate_ext_proc' }, timeout: '10s' },
  failure_mode_allow: false,
  processing_mode: {
    request_header_mode: 'SEND',
    request_body_mode: 'FULL_DUPLEX_STREAMED',
    request_trailer_mode: 'SEND',
    response_header_mode: 'SEND',
    response_body_mode: 'FULL_DUPLEX_STREAMED',
    response_trailer_mode: 'SEND',
  },
  message_timeout: '1000s',
  metadata_options: {
    receiving_namespaces: { untyped: ['envoy.lb'] },
    forwarding_namespaces: { untyped: ['envoy.lb'] },
  },
};

type Node = Record<string, unknown>;

/**
 * envoy/endpoint-picker/envoy.yaml with its ext_proc filter replaced by the merged InferencePool
 * settings above (and its own per-route ext_proc overrides dropped: the merge already holds Istio's).
 */
function istioInferencePoolEnvoy(failOpen = false): ParsedEnvoyConfig {
  const doc = parse(readFileSync(EPP_ENVOY, 'utf8')) as Node;
  let replaced = 0;
  eachObject(doc, (o) => {
    if (o.name === 'envoy.filters.http.ext_proc' && o.typed_config) {
      o.typed_config = { ...structuredClone(ISTIO_INFERENCE_POOL_FILTER), failure_mode_allow: failOpen };
      replaced++;
    }
    // The merged settings stand for Istio's per-route override: no other per-route config.
    const perFilter = o.typed_per_filter_config as Node | undefined;
    if (perFilter) {
      delete perFilter['envoy.filters.http.ext_proc'];
      if (Object.keys(perFilter).length === 0) delete o.typed_per_filter_config;
    }
  });
  assert.equal(replaced, 1, 'the picker config has one ext_proc filter');
  return parseEnvoyConfig(stringify(doc));
}

/** A prompt of `blocks` distinct 256-character blocks (kvgate's prefix block size). */
function prompt(blocks: number, seed: string): string {
  let out = '';
  for (let i = 0; i < blocks; i++) out += `${seed} block ${String(i).padStart(6, '0')} `.padEnd(256, 'abcdefghij'.charAt(i % 10));
  return out;
}

/** A chat request with a body of about `bytes`, cut into Envoy-sized chunks. */
function bigChat(bytes: number, opts: { user?: string; seed?: string; chunk?: number; trailers?: Record<string, string> } = {}) {
  const base = chat({ text: prompt(Math.max(1, Math.ceil(bytes / 256)), opts.seed ?? 'p'), ...(opts.user ? { user: opts.user } : {}) });
  const body = Buffer.from(base.body);
  const size = opts.chunk ?? 16 * 1024;
  const chunks: Buffer[] = [];
  for (let at = 0; at < body.length; at += size) chunks.push(body.subarray(at, at + size));
  return { ...base, body: undefined, chunks, ...(opts.trailers ? { trailers: opts.trailers } : {}), whole: body };
}

function asUpstream(o: Outcome): UpstreamOutcome {
  assert.equal(o.kind, 'upstream', `expected upstream, got ${JSON.stringify({ kind: o.kind, ...(o.kind === 'local' ? { status: o.status, details: o.details, body: o.body.toString() } : {}), messages: o.messages })}`);
  return o as UpstreamOutcome;
}

function asLocal(o: Outcome): LocalOutcome {
  assert.equal(o.kind, 'local', `expected a local reply, got ${o.kind}`);
  return o as LocalOutcome;
}

/** An SSE-like response body of about `bytes`, in chunks, so the response direction is exercised too. */
function bigResponse(bytes: number, trailers?: Record<string, string>) {
  const chunks: Buffer[] = [];
  let n = 0;
  for (let total = 0; total < bytes; n++) {
    const c = Buffer.from(`data: {"choices":[{"delta":{"content":"token ${n} \u00e9\u4e2d"}}]}\n\n`.padEnd(4096, ' '));
    chunks.push(c);
    total += c.length;
  }
  return { status: 200, headers: { 'content-type': 'text/event-stream' }, chunks, ...(trailers ? { trailers } : {}) };
}

// ---- the harness's model of Envoy, against scripted servers -----------------------------------

type ServerCall = grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

async function scripted(onMessage: (m: ProcessingRequest, call: ServerCall, seen: ProcessingRequest[]) => void) {
  const server = new grpc.Server();
  const received: ProcessingRequest[] = [];
  server.addService(extProcServiceDefinition(), {
    Process: (call: ServerCall) => {
      const seen: ProcessingRequest[] = [];
      call.on('data', (m: ProcessingRequest) => {
        seen.push(m);
        received.push(m);
        onMessage(m, call, seen);
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { target: `127.0.0.1:${port}`, received, close: () => server.forceShutdown() };
}

const streamed = (body: Buffer, eos: boolean) => ({ body_mutation: { streamed_response: { body, end_of_stream: eos } } });

/** A correct full-duplex server: waits for the whole request, answers the headers, echoes the body. */
function echoServer(delayMs = 0) {
  return (m: ProcessingRequest, call: ServerCall, seen: ProcessingRequest[]): void => {
    const answer = (): void => {
      call.write({ request_headers: { response: {} } });
      for (const b of seen.filter((x) => x.request === 'request_body')) call.write({ request_body: { response: streamed(b.request_body!.body, b.request_body!.end_of_stream) } });
      if (m.request === 'request_trailers') call.write({ request_trailers: {} });
    };
    if (m.request === 'request_headers' && m.request_headers?.end_of_stream) call.write({ request_headers: { response: {} } });
    else if ((m.request === 'request_body' && m.request_body?.end_of_stream) || m.request === 'request_trailers') setTimeout(answer, delayMs);
    else if (m.request === 'response_headers') call.write({ response_headers: { response: {} } });
    else if (m.request === 'response_body') call.write({ response_body: { response: streamed(m.response_body!.body, m.response_body!.end_of_stream) } });
    else if (m.request === 'response_trailers') call.write({ response_trailers: {} });
  };
}

const envoyYaml = () => parseEnvoyConfig(readFileSync(ENVOY_YAML, 'utf8'));

function duplexHarness(target: string, opts: Partial<EnvoyHarnessOptions> = {}): EnvoyHarness {
  return new EnvoyHarness({ config: envoyYaml(), target, processingModeOverride: DUPLEX, ...opts });
}

describe('harness: FULL_DUPLEX_STREAMED as Envoy runs it', () => {
  test('headers, every chunk and the trailers go out before any reply; protocol_config rides on the first message only', async () => {
    let repliedAfter = -1;
    const srv = await scripted((m, call, seen) => {
      if (m.request === 'request_trailers') {
        repliedAfter = seen.length;
        echoServer()(m, call, seen);
      } else if (m.request !== 'request_body' && m.request !== 'request_headers') echoServer()(m, call, seen);
    });
    const h = duplexHarness(srv.target);
    try {
      const req = bigChat(40 * 1024, { chunk: 8 * 1024, trailers: { 'x-trailer': 'yes' } });
      const out = asUpstream(await h.request(req, { status: 200, body: 'ok' }));
      assert.deepEqual(out.requestBody, req.whole);
      const reqMsgs = srv.received.filter((x) => x.request?.startsWith('request'));
      // The server answered nothing until the trailers, and still saw every chunk: Envoy did not wait.
      assert.equal(repliedAfter, 1 + req.chunks.length + 1);
      assert.deepEqual(reqMsgs.map((x) => x.request), ['request_headers', ...req.chunks.map(() => 'request_body'), 'request_trailers']);
      assert.equal(srv.received[0]?.protocol_config?.request_body_mode, 'FULL_DUPLEX_STREAMED');
      assert.equal(srv.received[0]?.protocol_config?.response_body_mode, 'FULL_DUPLEX_STREAMED');
      assert.ok(srv.received.slice(1).every((x) => x.protocol_config === null), 'protocol_config only on the first message');
    } finally {
      h.close();
      srv.close();
    }
  });

  test('an Envoy older than 1.35 sends no protocol_config', async () => {
    const srv = await scripted((m, call) => call.write(m.request === 'request_headers' ? { request_headers: { response: {} } } : { response_headers: { response: {} } }));
    const h = new EnvoyHarness({ config: envoyYaml(), target: srv.target, processingModeOverride: { request_body_mode: 'NONE' }, extProcOverride: { sendsProtocolConfig: false } });
    try {
      asUpstream(await h.request({ method: 'GET', path: '/v1/models' }, { status: 200 }));
      assert.ok(srv.received.length > 0 && srv.received.every((x) => x.protocol_config === null), "srv.received.length > 0 && srv.received.every((x) => x.protocol_config === null)");
    } finally {
      h.close();
      srv.close();
    }
  });

  test('a plain body reply is a spurious message: 500, not the body', async () => {
    const srv = await scripted((m, call) => {
      if (m.request === 'request_body' && m.request_body?.end_of_stream) {
        call.write({ request_headers: { response: {} } });
        call.write({ request_body: { response: {} } }); // CONTINUE, as in BUFFERED/STREAMED
      }
    });
    const h = duplexHarness(srv.target);
    try {
      const out = asLocal(await h.request(bigChat(2048), { status: 200 }));
      assert.equal(out.status, 500);
      assert.match(out.details ?? '', /Normal_body_mutation/);
      assert.equal(out.stats?.spuriousMsgsReceived, 1);
    } finally {
      h.close();
      srv.close();
    }
  });

  test('a body reply before the headers reply is spurious (ServerSendOutOfOrderResponseDuplexStreamed)', async () => {
    const srv = await scripted((m, call) => {
      if (m.request === 'request_body' && m.request_body?.end_of_stream) call.write({ request_body: { response: streamed(Buffer.from('x'), true) } });
    });
    const h = duplexHarness(srv.target);
    try {
      const out = asLocal(await h.request(bigChat(2048), { status: 200 }));
      assert.equal(out.status, 500);
    } finally {
      h.close();
      srv.close();
    }
  });

  // Fail-open here is a per-route override's (extProcOverride); the filter's own is tested below.
  // Either way Filter::failureModeAllow turns it off once a body was sent.
  test("fail-open is off once a body was sent: a server error fails the request even with a per-route override's failure_mode_allow", async () => {
    const srv = await scripted((m, call) => {
      if (m.request === 'request_headers' && m.request_headers?.end_of_stream) call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'down' });
      if (m.request === 'request_body' && m.request_body?.end_of_stream) call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'down' });
    });
    const h = duplexHarness(srv.target, { extProcOverride: { failureModeAllow: true } });
    try {
      const withBody = asLocal(await h.request(bigChat(2048), { status: 200 }));
      assert.equal(withBody.status, 500);
      // The same failure on a request without a body is let through, as configured.
      asUpstream(await h.request({ method: 'GET', path: '/v1/models' }, { status: 200 }));
    } finally {
      h.close();
      srv.close();
    }
  });

  test('no message timer: a reply later than message_timeout still lands (BUFFERED would answer 504)', async () => {
    const srv = await scripted(echoServer(150));
    const h = duplexHarness(srv.target, { extProcOverride: { messageTimeoutMs: 20, failureModeAllow: false } });
    try {
      const req = bigChat(2048);
      const out = asUpstream(await h.request(req, { status: 200 }));
      assert.deepEqual(out.requestBody, req.whole);
    } finally {
      h.close();
      srv.close();
    }
    // The control: the same late server under BUFFERED hits the message timer.
    const late = await scripted((m, call) => {
      if (m.request === 'request_headers') call.write({ request_headers: { response: {} } });
      else if (m.request === 'request_body') setTimeout(() => call.write({ request_body: { response: {} } }), 150);
    });
    const b = new EnvoyHarness({ config: envoyYaml(), target: late.target, extProcOverride: { messageTimeoutMs: 20, failureModeAllow: false } });
    try {
      const out = asLocal(await b.request({ ...chat(), body: chat().body }, { status: 200 }));
      assert.equal(out.status, 504);
    } finally {
      b.close();
      late.close();
    }
  });

  test('Envoy refuses FULL_DUPLEX_STREAMED without trailer mode SEND, and takes it with failure_mode_allow', () => {
    const doc = parse(readFileSync(EPP_ENVOY, 'utf8')) as Node;
    const text = stringify(doc).replaceAll('request_body_mode: BUFFERED', 'request_body_mode: FULL_DUPLEX_STREAMED');
    assert.throws(() => parseEnvoyConfig(text), /requires request_trailer_mode: SEND/);
    // The shipped endpoint-picker config is fail-open; with duplex bodies and trailers sent, Envoy
    // takes it as it is (config.cc no longer checks failure_mode_allow against the body mode).
    const failOpen = text.replaceAll('request_trailer_mode: SKIP', 'request_trailer_mode: SEND');
    assert.match(failOpen, /failure_mode_allow: true/);
    assert.equal(parseEnvoyConfig(failOpen).extProc?.failureModeAllow, true);
    assert.doesNotThrow(() => parseEnvoyConfig(failOpen.replaceAll('failure_mode_allow: true', 'failure_mode_allow: false')));
    assert.doesNotThrow(() => istioInferencePoolEnvoy());
  });

  // The filter's own failure_mode_allow, with its own processing mode FULL_DUPLEX_STREAMED (as a
  // GIE InferencePool with failureMode FailOpen asks for): open until a body chunk went out.
  test("a fail-open full-duplex filter lets a failure through before any body went out, and fails the request after", async () => {
    const srv = await scripted((m, call) => {
      if (m.request === 'request_headers' && m.request_headers?.end_of_stream) call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'down' });
      if (m.request === 'request_body' && m.request_body?.end_of_stream) call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'down' });
    });
    const doc = parse(readFileSync(ENVOY_YAML, 'utf8')) as Node;
    let set = 0;
    eachObject(doc, (o) => {
      if (o['@type'] === ISTIO_INFERENCE_POOL_FILTER['@type'] && o.processing_mode) {
        o.processing_mode = { ...(o.processing_mode as Node), ...DUPLEX };
        o.failure_mode_allow = true;
        set++;
      }
    });
    assert.equal(set, 1, 'envoy.yaml has one ext_proc filter');
    const h = new EnvoyHarness({ config: parseEnvoyConfig(stringify(doc)), target: srv.target });
    try {
      asUpstream(await h.request({ method: 'GET', path: '/v1/models' }, { status: 200 }));
      const withBody = asLocal(await h.request(bigChat(2048), { status: 200 }));
      assert.equal(withBody.status, 500);
      assert.match(withBody.details ?? '', /ext_proc_error_gRPC_error_14/);
    } finally {
      h.close();
      srv.close();
    }
  });
});

// ---- kvgate end to end ------------------------------------------------------------------------

const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';
const C = '10.0.0.3:8000';

describe('kvgate in FULL_DUPLEX_STREAMED', () => {
  let picker: TestGate;
  let clusters: TestGate;
  let strict: TestGate;
  let small: TestGate;
  let pickerLines: Array<Record<string, unknown>>;
  const harnesses: EnvoyHarness[] = [];
  const istio = (g: TestGate, opts: Partial<EnvoyHarnessOptions> = {}): EnvoyHarness => {
    const h = new EnvoyHarness({ config: istioInferencePoolEnvoy(), target: g.target, ...opts });
    harnesses.push(h);
    return h;
  };

  before(async () => {
    const rec = recordingLogger('info');
    pickerLines = rec.lines;
    // routing.request_body_mode is left at its default (buffered): Envoy's protocol_config must win.
    picker = await startTestGate(
      { routing: { protocol: 'endpoint_picker' }, workers: [{ id: 'a', address: A }, { id: 'b', address: B }, { id: 'c', address: C }] },
      { logger: rec.logger },
    );
    clusters = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] });
    strict = await startTestGate({
      routing: { protocol: 'endpoint_picker' },
      limits: { malformed_body: 'reject', max_body_bytes: 64 * 1024 },
      workers: [{ id: 'a', address: A, max_inflight: 1 }],
    });
    small = await startTestGate({ routing: { request_body_mode: 'none' }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] });
  });
  after(async () => {
    for (const h of harnesses) h.close();
    await Promise.all([picker, clusters, strict, small].map((g) => g?.close(100)));
  });

  for (const [label, bytes] of [['2 KB', 2 * 1024], ['400 KB', 400 * 1024]] as const) {
    test(`Istio's InferencePool filter, ${label} prompt: routed on the body, both bodies echoed byte for byte`, async () => {
      const h = istio(picker);
      const req = bigChat(bytes, { user: `user-${label}`, seed: label });
      const resp = bigResponse(bytes);
      const before = picker.results.length;
      const out = asUpstream(await h.request(req, resp));
      assert.equal(out.cluster, 'original_destination_cluster');
      assert.ok(out.endpoint && [A, B, C].includes(out.endpoint), `endpoint ${out.endpoint}`);
      assert.equal((out.dynamicMetadata['envoy.lb'] as Record<string, unknown> | undefined)?.['x-gateway-destination-endpoint'], out.endpoint);
      assert.ok(out.routeCleared, 'the headers reply cleared the route cache');
      assert.ok(out.requestBody.equals(req.whole), `request body differs (${out.requestBody.length} vs ${req.whole.length} bytes)`);
      assert.ok(out.responseBody.equals(Buffer.concat(resp.chunks)), 'response body differs');
      // The decision read the body: its key is the body's `user`, and the prompt's blocks were hashed.
      const r = picker.results[before];
      assert.equal(r?.kind, 'route');
      assert.equal(r?.key?.source, 'body_user');
      assert.ok(r?.kind === 'route' && r.explanation.totalBlocks >= Math.min(8, bytes / 256 - 1), `blocks ${r?.kind === 'route' ? r.explanation.totalBlocks : '-'}`);
      // The request body came back as streamed replies (kvgate re-cuts it into pieces of at most
      // 64 KiB, so there may be fewer replies than chunks); each response chunk got its own at once.
      assert.ok(out.messages.some((m) => m.sent === 'request_body' && m.reply === 'request_body'), "out.messages.some((m) => m.sent === 'request_body' && m.reply === 'request_body')");
      assert.ok(out.messages.filter((m) => m.sent === 'response_body').every((m) => m.reply === 'response_body'), "out.messages.filter((m) => m.sent === 'response_body').every((m) => m.reply === 'response_body')");
      assert.equal(out.stats?.spuriousMsgsReceived, 0);
      // The same user sticks to the same endpoint.
      const again = asUpstream(await h.request(bigChat(bytes, { user: `user-${label}`, seed: label }), { status: 200, body: 'ok' }));
      assert.equal(again.endpoint, out.endpoint);
    });
  }

  // failureMode: FailOpen puts failure_mode_allow: true beside the full-duplex modes (Istio's
  // BuildInferencePoolExtProcFilter takes it from the pool). Envoy 1.35.0 refused that config;
  // later Envoys take it, and kvgate serves it as it serves FailClose.
  test("Istio's InferencePool filter with failureMode FailOpen: taken, and routed the same", async () => {
    const h = new EnvoyHarness({ config: istioInferencePoolEnvoy(true), target: picker.target });
    harnesses.push(h);
    assert.equal(h.config.extProc?.failureModeAllow, true);
    const req = bigChat(8 * 1024, { user: 'fail-open-pool' });
    const out = asUpstream(await h.request(req, bigResponse(8 * 1024)));
    assert.ok(out.endpoint && [A, B, C].includes(out.endpoint), `endpoint ${out.endpoint}`);
    assert.ok(out.requestBody.equals(req.whole), 'request body differs');
    assert.equal(out.stats?.failureModeAllowed, 0);
  });

  test('trailers end the body on both paths; they reach the upstream and the client', async () => {
    const h = istio(picker);
    const req = bigChat(20 * 1024, { user: 'trailers', trailers: { 'x-req-trailer': 'r' } });
    const resp = bigResponse(20 * 1024, { 'x-resp-trailer': 's' });
    const out = asUpstream(await h.request(req, resp));
    assert.ok(out.requestBody.equals(req.whole), "out.requestBody.equals(req.whole)");
    assert.ok(out.responseBody.equals(Buffer.concat(resp.chunks)), "out.responseBody.equals(Buffer.concat(resp.chunks))");
    assert.equal(out.requestTrailers?.get('x-req-trailer'), 'r');
    assert.equal(out.responseTrailers?.get('x-resp-trailer'), 's');
    assert.deepEqual(out.messages.filter((m) => m.sent.endsWith('trailers')).map((m) => m.reply), ['request_trailers', 'response_trailers']);
  });

  test('cluster_header protocol: routing mutation and clear_route_cache on the headers reply, body echoed', async () => {
    const h = new EnvoyHarness({ config: envoyYaml(), target: clusters.target, processingModeOverride: DUPLEX, extProcOverride: { messageTimeoutMs: 20 } });
    harnesses.push(h);
    const req = bigChat(64 * 1024, { user: 'cluster-user' });
    const out = asUpstream(await h.request(req, bigResponse(8 * 1024)));
    assert.ok(['worker_1', 'worker_2'].includes(out.cluster), `cluster ${out.cluster}`);
    assert.ok(out.routeCleared, "out.routeCleared");
    assert.ok(out.requestBody.equals(req.whole), "out.requestBody.equals(req.whole)");
    assert.equal(clusters.results.at(-1)?.key?.source, 'body_user');
  });

  test('a path whose decision does not read the body is decided on the headers; its chunks are echoed', async () => {
    const h = istio(picker);
    const body = Buffer.from(prompt(40, 'embeddings'));
    const chunks = [body.subarray(0, 4000), body.subarray(4000)];
    const out = asUpstream(await h.request({ method: 'POST', path: '/v1/embeddings', headers: { host: 'llm' }, chunks }, { status: 200, body: 'ok' }));
    assert.ok(out.requestBody.equals(body), "out.requestBody.equals(body)");
    assert.ok(out.endpoint, "out.endpoint");
  });

  test('shedding is an immediate 429 in full duplex', async () => {
    const h = istio(strict);
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const upstreamReached = new Promise<void>((r) => (reached = r));
    const first = h.request(bigChat(4096, { user: 'one' }), async () => {
      reached();
      await held;
      return { status: 200, body: 'ok' };
    });
    await upstreamReached;
    const shed = asLocal(await h.request(bigChat(4096, { user: 'two' }), { status: 200 }));
    assert.equal(shed.status, 429);
    release();
    asUpstream(await first);
  });

  test('bad JSON is an immediate 400 with malformed_body: reject; forwarded unchanged otherwise', async () => {
    const bad = Buffer.from(`{"model":"m","messages":[{"role":"user","content":"${prompt(20, 'bad')}"}`); // never closed
    const chunks = [bad.subarray(0, 1000), bad.subarray(1000)];
    const req = { method: 'POST', path: '/v1/chat/completions', headers: { host: 'llm', 'content-type': 'application/json' }, chunks };
    const rejected = asLocal(await istio(strict).request(req, { status: 200 }));
    assert.equal(rejected.status, 400);
    assert.match(rejected.body.toString(), /invalid_request_error/);
    const forwarded = asUpstream(await istio(picker).request(req, { status: 200 }));
    assert.ok(forwarded.requestBody.equals(bad), "forwarded.requestBody.equals(bad)");
  });

  test('a body past limits.max_body_bytes is a 413 as soon as it crosses the limit', async () => {
    const h = istio(strict);
    const req = bigChat(200 * 1024, { user: 'big' });
    const out = asLocal(await h.request(req, { status: 200 }));
    assert.equal(out.status, 413);
  });

  test('protocol_config wins over routing.request_body_mode, and the mismatch is logged once a minute, not per request', async () => {
    const h = istio(picker);
    for (let i = 0; i < 3; i++) asUpstream(await h.request(bigChat(2048, { user: `log-${i}` }), { status: 200 }));
    const logged = pickerLines.filter((l) => String(l.msg).includes('different request body mode'));
    assert.equal(logged.length, 1, 'logged once, not per request');
    assert.equal(logged[0]?.declared_request_body_mode, 'FULL_DUPLEX_STREAMED');
    assert.equal(logged[0]?.request_body_mode, 'buffered');
  });

  test('Envoy declaring BUFFERED overrides request_body_mode: none (the body steers routing); without protocol_config the config holds', async () => {
    // envoy/envoy.yaml is BUFFERED; this gate's config says none (decide on the headers).
    const declared = new EnvoyHarness({ config: envoyYaml(), target: small.target, extProcOverride: { messageTimeoutMs: 5000 } });
    const older = new EnvoyHarness({ config: envoyYaml(), target: small.target, extProcOverride: { messageTimeoutMs: 5000, sendsProtocolConfig: false } });
    harnesses.push(declared, older);
    const n = small.results.length;
    asUpstream(await declared.request(chat({ user: 'from-body' }), { status: 200 }));
    assert.equal(small.results[n]?.key?.source, 'body_user', 'decided on the body Envoy declared it sends');
    asUpstream(await older.request(chat({ user: 'from-body' }), { status: 200 }));
    assert.notEqual(small.results[n + 1]?.key?.source, 'body_user', 'an older Envoy: the config (none) decides on the headers');
  });
});

describe('an Envoy running FULL_DUPLEX_STREAMED without protocol_config (before 1.35)', () => {
  let declared: TestGate;
  let undeclared: TestGate;
  const harnesses: EnvoyHarness[] = [];
  const olderIstio = (g: TestGate): EnvoyHarness => {
    const h = new EnvoyHarness({ config: istioInferencePoolEnvoy(), target: g.target, extProcOverride: { sendsProtocolConfig: false } });
    harnesses.push(h);
    return h;
  };
  before(async () => {
    const workers = [{ id: 'a', address: A }, { id: 'b', address: B }];
    declared = await startTestGate({ routing: { protocol: 'endpoint_picker', request_body_mode: 'full_duplex', response_body_mode: 'full_duplex' }, workers });
    undeclared = await startTestGate({ routing: { protocol: 'endpoint_picker' }, workers });
  });
  after(async () => {
    for (const h of harnesses) h.close();
    await Promise.all([declared, undeclared].map((g) => g?.close(100)));
  });

  test('routing.request_body_mode / response_body_mode: full_duplex serve it: routed on the body, both bodies echoed', async () => {
    const req = bigChat(32 * 1024, { user: 'older-envoy', seed: 'older' });
    const resp = bigResponse(8 * 1024);
    const before = declared.results.length;
    const out = asUpstream(await olderIstio(declared).request(req, resp));
    assert.ok(out.endpoint && [A, B].includes(out.endpoint), `endpoint ${out.endpoint}`);
    assert.ok(out.routeCleared, "out.routeCleared");
    assert.ok(out.requestBody.equals(req.whole), "out.requestBody.equals(req.whole)");
    assert.ok(out.responseBody.equals(Buffer.concat(resp.chunks)), "out.responseBody.equals(Buffer.concat(resp.chunks))");
    assert.equal(declared.results[before]?.key?.source, 'body_user');
    assert.equal(out.stats?.spuriousMsgsReceived, 0);
  });

  test('control: left at the buffered default, the same Envoy fails the request (kvgate answers in the wrong mode)', async () => {
    const out = await olderIstio(undeclared).request(bigChat(32 * 1024, { user: 'older-envoy-2', seed: 'older' }), bigResponse(1024));
    assert.notEqual(out.kind, 'upstream', 'a gate that does not know the mode cannot serve a full-duplex Envoy');
  });
});
