/**
 * Responses API through the Envoy harness playing envoy/envoy.yaml: the /v1/responses route's
 * per-route processing mode sends kvgate the response body; kvgate reads each response's id from
 * its first chunks and sends every request continuing it (`previous_response_id`) to the worker
 * that produced it, on the memory store and across two replicas sharing Redis. Bad cases get
 * their defined answers: an unknown id is routed by its other keys, a draining or down worker is a
 * 503 with retry-after, a worker gone from the pool is a 404.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { HarnessRequest, Outcome, UpstreamRequest, UpstreamResponse } from '../harness/envoy-harness.js';
import { loadEnvoyConfig } from '../harness/envoy-config.js';
import { startFakeWorker, type FakeWorker } from '../../src/fake-worker/server.js';
import { responseIdHash } from '../../src/request/keys.js';
import { chat, harness } from '../helpers/envoy.js';
import { setWorkerState, startTestGate, type TestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const WORKERS = ['worker_1', 'worker_2', 'worker_3'].map((id) => ({ id, cluster: id, max_inflight: 8 }));
// Long enough to reach the prefix path (many 256-character blocks): without the pin, a
// continuation would be placed by this prompt's blocks and by load.
const INSTRUCTIONS = 'You are a release engineer. Read the changelog and answer precisely. '.repeat(30);

function responsesRequest(body: Record<string, unknown>, headers: Record<string, string> = {}): HarnessRequest {
  return { method: 'POST', path: '/v1/responses', headers: { host: 'llm.example', 'content-type': 'application/json', ...headers }, body: JSON.stringify({ model: 'llama', ...body }) };
}

/** A worker answering with server-sent events; the id is split across the first two chunks. */
function sse(id: string): UpstreamResponse {
  const created = `event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"${id}","object":"response","status":"in_progress","output":[]}}\n\n`;
  const cut = created.indexOf(id) + 4;
  return {
    status: 200,
    headers: { 'content-type': 'text/event-stream' },
    chunks: [Buffer.from(created.slice(0, cut)), Buffer.from(created.slice(cut)), Buffer.from('event: response.completed\ndata: {"type":"response.completed"}\n\n')],
  };
}

/** A worker answering with one JSON object; which worker served it is in the id. */
const json = (req: UpstreamRequest): UpstreamResponse => ({
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ id: `resp_${req.cluster}_${Math.random().toString(36).slice(2)}`, object: 'response', output: [{ id: 'msg_1', type: 'message' }] }),
});

function idOf(o: Outcome): string {
  assert.equal(o.kind, 'upstream');
  if (o.kind !== 'upstream') throw new Error('not routed');
  return (JSON.parse(o.responseBody.toString()) as { id: string }).id;
}

function clusterOf(o: Outcome): string {
  assert.equal(o.kind, "upstream", `routed, not ${o.kind}: ${o.kind === "local" ? o.status + " " + o.body.toString() : ""}`);
  return o.kind === 'upstream' ? o.cluster : '';
}

describe('previous_response_id affinity (memory store, envoy/envoy.yaml)', () => {
  let g: TestGate;
  let h: ReturnType<typeof harness>;
  before(async () => {
    g = await startTestGate({ workers: WORKERS });
    h = harness(g.target);
  });
  after(async () => {
    h.close();
    await g.close(100);
  });

  test('the Responses route sends kvgate its response body; chat does not', async () => {
    const r = await h.request(responsesRequest({ instructions: INSTRUCTIONS, input: 'hello' }), json);
    assert.ok(r.messages.some((m) => m.sent === 'response_body' && m.reply === 'response_body'), JSON.stringify(r.messages));
    const c = await h.request(chat({ system: INSTRUCTIONS }), { status: 200, body: '{"id":"chatcmpl-1"}' });
    assert.equal(c.messages.filter((m) => m.sent === 'response_body').length, 0);
  });

  test('every continuation reaches the worker that produced its response, whatever its prompt and load', async () => {
    // Three conversations started with unrelated prompts, spread over the fleet.
    const produced: Array<{ id: string; worker: string }> = [];
    for (let i = 0; i < 6; i++) {
      const r = await h.request(responsesRequest({ input: `conversation ${i}: ${'tell me about topic number ' .repeat(20)}${i}` }), json);
      produced.push({ id: idOf(r), worker: clusterOf(r) });
    }
    assert.ok(new Set(produced.map((p) => p.worker)).size >= 2, `spread over workers: ${JSON.stringify(produced)}`);
    for (const p of produced) {
      for (let turn = 0; turn < 3; turn++) {
        // Each continuation shares INSTRUCTIONS with the others (a prefix another worker holds
        // after the first) and names a session; only the pin can keep all of them right.
        const r = await h.request(responsesRequest({ previous_response_id: p.id, instructions: INSTRUCTIONS, input: `turn ${turn}` }, { 'x-session-id': `s-${turn}` }), json);
        assert.equal(clusterOf(r), p.worker, `continuation of ${p.id}`);
      }
    }
  });

  test('the id is read from a streamed answer whose first chunk ends inside it', async () => {
    let worker = '';
    const r = await h.request(responsesRequest({ input: 'stream please', stream: true }), (req) => {
      worker = req.cluster;
      return sse('resp_streamed_1');
    });
    assert.equal(r.kind, 'upstream');
    assert.equal(await g.store.responseWorker('default', responseIdHash('resp_streamed_1')), worker);
    for (let i = 0; i < 4; i++) {
      assert.equal(clusterOf(await h.request(responsesRequest({ previous_response_id: 'resp_streamed_1', input: `next ${i}` }, { 'x-session-id': `other-${i}` }), json)), worker);
    }
  });

  test('retrieving, listing items of, cancelling or deleting a stored response reaches its worker', async () => {
    const first = await h.request(responsesRequest({ input: `to be read back ${'z'.repeat(500)}` }), json);
    const id = idOf(first);
    for (const [method, path] of [['GET', `/v1/responses/${id}`], ['GET', `/v1/responses/${id}/input_items`], ['POST', `/v1/responses/${id}/cancel`], ['DELETE', `/v1/responses/${id}`]] as const) {
      for (let i = 0; i < 3; i++) {
        const r = await h.request({ method, path, headers: { host: 'llm.example', 'x-session-id': `reader-${i}` } }, { status: 200, body: '{}' });
        assert.equal(clusterOf(r), clusterOf(first), `${method} ${path}`);
      }
    }
  });

  test('error answers teach nothing; an unknown id is routed by its other keys', async () => {
    const bad = await h.request(responsesRequest({ input: 'x' }), { status: 400, body: '{"id":"resp_not_really","error":{"message":"bad"}}' });
    assert.equal(bad.kind, 'upstream');
    assert.equal(await g.store.responseWorker('default', responseIdHash('resp_not_really')), undefined);
    const r = await h.request(responsesRequest({ previous_response_id: 'resp_never_seen', input: 'x' }), json);
    assert.equal(r.kind, 'upstream');
  });

  test('a draining or down worker holding the response: 503 with retry-after, never another worker', async () => {
    const first = await h.request(responsesRequest({ input: 'to be drained' }), json);
    const id = idOf(first);
    const worker = clusterOf(first);
    for (const state of ['draining', 'down']) {
      await setWorkerState(g.admin, worker, state);
      let reached = false;
      const r = await h.request(responsesRequest({ previous_response_id: id, input: 'more' }), (req) => {
        reached = true;
        return json(req);
      });
      assert.equal(r.kind, 'local');
      assert.equal(reached, false);
      if (r.kind === 'local') {
        assert.equal(r.status, 503);
        assert.equal(r.headers.get('retry-after'), '1');
        assert.equal((JSON.parse(r.body.toString()) as { error: { code: string } }).error.code, 'previous_response_unavailable');
      }
    }
    // A pressured worker keeps its conversations: the continuation is served there.
    await setWorkerState(g.admin, worker, 'pressured');
    assert.equal(clusterOf(await h.request(responsesRequest({ previous_response_id: id, input: 'more' }), json)), worker);
    await setWorkerState(g.admin, worker, 'healthy');
  });

  test('a worker gone from the pool: 404 previous_response_not_found', async () => {
    await g.store.recordResponse('default', responseIdHash('resp_from_retired_worker'), 'worker_9', 60_000);
    const r = await h.request(responsesRequest({ previous_response_id: 'resp_from_retired_worker', input: 'x' }), json);
    assert.equal(r.kind, 'local');
    if (r.kind === 'local') {
      assert.equal(r.status, 404);
      assert.equal((JSON.parse(r.body.toString()) as { error: { code: string } }).error.code, 'previous_response_not_found');
    }
  });

  test('a full worker holding the response sheds (429) rather than sending the request elsewhere', async () => {
    const small = await startTestGate({ workers: WORKERS.map((w) => ({ ...w, max_inflight: 1 })) });
    const hs = harness(small.target);
    try {
      const id = idOf(await hs.request(responsesRequest({ input: 'first' }), json));
      const worker = (await small.store.responseWorker('default', responseIdHash(id)))!;
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      // Hold the worker's one slot with a continuation that waits upstream.
      const pending = hs.request(responsesRequest({ previous_response_id: id, input: 'slow' }), async (req) => {
        await held;
        return json(req);
      });
      await new Promise((r) => setTimeout(r, 200));
      const r = await hs.request(responsesRequest({ previous_response_id: id, input: 'meanwhile' }), json);
      assert.equal(r.kind, 'local');
      if (r.kind === 'local') assert.equal(r.status, 429);
      release();
      assert.equal(clusterOf(await pending), worker);
    } finally {
      hs.close();
      await small.close(100);
    }
  });
});

describe('previous_response_id affinity across replicas (Redis)', () => {
  let redis: TestRedis;
  let a: TestGate;
  let b: TestGate;
  before(async () => {
    redis = await startRedis();
    a = await startTestGate({ workers: WORKERS }, { store: `${redis.url}/3` });
    b = await startTestGate({ workers: WORKERS }, { store: `${redis.url}/3` });
  });
  after(async () => {
    await a.close(100);
    await b.close(100);
    await redis.stop();
  });

  test('a response learned by one replica is continued on its worker through the other', async () => {
    const ha = harness(a.target);
    const hb = harness(b.target);
    try {
      for (let i = 0; i < 4; i++) {
        const r = await ha.request(responsesRequest({ input: `replica conversation ${i} ${'x'.repeat(600)}` }), json);
        const id = idOf(r);
        for (let turn = 0; turn < 2; turn++) {
          assert.equal(clusterOf(await hb.request(responsesRequest({ previous_response_id: id, instructions: INSTRUCTIONS, input: `t${turn}` }, { 'x-session-id': `rs-${i}-${turn}` }), json)), r.kind === 'upstream' ? r.cluster : '');
        }
      }
    } finally {
      ha.close();
      hb.close();
    }
  });
});

describe('previous_response_id end to end: harness → kvgate → fake workers', () => {
  let g: TestGate;
  let h: ReturnType<typeof harness>;
  const workers: FakeWorker[] = [];
  before(async () => {
    for (const w of WORKERS) workers.push(await startFakeWorker({ id: w.id, decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 1e9 }));
    g = await startTestGate({ workers: WORKERS });
    h = harness(g.target);
  });
  after(async () => {
    h.close();
    await g.close(100);
    await Promise.all(workers.map((w) => w.close()));
  });

  /** The cluster's fake worker answers, as Envoy's upstream would. */
  const upstream = async (req: UpstreamRequest): Promise<UpstreamResponse> => {
    const w = workers[WORKERS.findIndex((x) => x.cluster === req.cluster)]!;
    const res = await fetch(`${w.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: req.body });
    const body = Buffer.from(await res.arrayBuffer());
    // Envoy hands the body over in pieces: a small first chunk, so the id has to be assembled.
    return { status: res.status, headers: { 'content-type': res.headers.get('content-type') ?? '' }, chunks: [body.subarray(0, 20), body.subarray(20)] };
  };

  test('multi-turn conversations by previous_response_id never hit a worker without the stored response', async () => {
    // Unrelated first turns spread over the fleet; every later turn carries the same long
    // instructions, so without the pin they would all meet on the worker holding that prefix.
    const last: string[] = [];
    const firstWorkers = new Set<string>();
    for (let c = 0; c < 6; c++) {
      const r = await h.request(responsesRequest({ input: `conversation ${c}: ${'an unrelated opening question '.repeat(20)}${c}`, max_output_tokens: 2 }), upstream);
      assert.equal(r.kind === 'upstream' && r.responseStatus, 200);
      firstWorkers.add(clusterOf(r));
      last.push(idOf(r));
    }
    assert.ok(firstWorkers.size >= 2, 'the conversations started on several workers');
    for (let turn = 0; turn < 3; turn++) {
      for (let c = 0; c < 6; c++) {
        const r = await h.request(responsesRequest({ instructions: INSTRUCTIONS, previous_response_id: last[c], input: `turn ${turn}`, max_output_tokens: 2 }), upstream);
        assert.equal(r.kind === 'upstream' && r.responseStatus, 200, r.kind === 'upstream' ? r.responseBody.toString() : r.kind);
        last[c] = idOf(r);
      }
    }
  });
});

describe('previous_response_id affinity in endpoint-picker mode (envoy/endpoint-picker/envoy.yaml)', () => {
  test('a continuation reaches the endpoint that produced the response', async () => {
    const endpoints = ['10.0.0.1:8000', '10.0.0.2:8000', '10.0.0.3:8000'];
    const g = await startTestGate({ routing: { protocol: 'endpoint_picker' }, workers: endpoints.map((address, i) => ({ id: `w${i}`, address, max_inflight: 8 })) });
    const h = harness(g.target, { config: loadEnvoyConfig(path.resolve(import.meta.dirname, '../../envoy/endpoint-picker/envoy.yaml')) });
    try {
      const byEndpoint = (req: UpstreamRequest): UpstreamResponse => ({ status: 200, body: JSON.stringify({ id: `resp_at_${req.endpoint}_${Math.random().toString(36).slice(2)}`, object: 'response' }) });
      const seen = new Set<string>();
      for (let c = 0; c < 5; c++) {
        const r = await h.request(responsesRequest({ input: `epp conversation ${c} ${'w'.repeat(400)}` }), byEndpoint);
        assert.equal(r.kind, 'upstream');
        if (r.kind !== 'upstream') continue;
        seen.add(r.endpoint!);
        for (let t = 0; t < 2; t++) {
          const next = await h.request(responsesRequest({ previous_response_id: idOf(r), instructions: INSTRUCTIONS, input: `t${t}` }, { 'x-session-id': `epp-${c}-${t}` }), byEndpoint);
          assert.equal(next.kind === 'upstream' && next.endpoint, r.endpoint);
        }
      }
      assert.ok(seen.size >= 2, 'conversations started on several endpoints');
      // A proxy-side retry served the response elsewhere and says so: the response is stored there.
      let chosen = '';
      const other = await h.request(responsesRequest({ input: 'retried upstream' }), (req) => {
        chosen = req.endpoint!;
        const elsewhere = endpoints.find((e) => e !== chosen)!;
        return { status: 200, body: JSON.stringify({ id: 'resp_served_elsewhere' }), metadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': elsewhere } } };
      });
      assert.equal(other.kind, 'upstream');
      const elsewhere = endpoints.find((e) => e !== chosen)!;
      const next = await h.request(responsesRequest({ previous_response_id: 'resp_served_elsewhere', input: 'next' }), byEndpoint);
      assert.equal(next.kind === 'upstream' && next.endpoint, elsewhere);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});

describe('stored responses in the logs', () => {
  test('ids are logged only as hashes, learned and pinned alike', async () => {
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate({ workers: WORKERS }, { logger });
    const h = harness(g.target);
    try {
      const id = 'resp_secret_9f8e7d6c5b4a';
      await h.request(responsesRequest({ input: 'hello' }), { status: 200, body: JSON.stringify({ id, object: 'response' }) });
      await h.request(responsesRequest({ previous_response_id: id, input: 'again' }), json);
      await h.request({ method: 'GET', path: `/v1/responses/${id}`, headers: { host: 'llm.example' } }, { status: 200, body: '{}' });
      const text = JSON.stringify(lines);
      assert.ok(lines.some((l) => l['msg'] === 'stored response learned' && l['response_hash'] === responseIdHash(id)), "lines.some((l) => l['msg'] === 'stored response learned' && l['response_hash'] === responseIdHash(id))");
      assert.equal(lines.filter((l) => String(l['msg']).startsWith('stored response: pinned')).length, 2);
      assert.ok(!text.includes('secret_9f8e7d6c5b4a'), 'the raw id never appears');
    } finally {
      h.close();
      await g.close(100);
    }
  });
});
