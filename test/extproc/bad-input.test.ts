/**
 * Bad input through the whole path (Envoy harness → real gRPC → kvgate): each case gets its
 * defined answer and a log line, and nothing crashes or leaks.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { EnvoyHarness } from '../harness/envoy-harness.js';
import { isClosed } from '../harness/envoy-harness.js';
import { chat, harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';

const FLEET = [
  { id: 'worker_1', cluster: 'worker_1' },
  { id: 'worker_2', cluster: 'worker_2' },
];

let g: TestGate;
let strict: TestGate;
let h: EnvoyHarness;
let hs: EnvoyHarness;
let lines: Array<Record<string, unknown>>;

before(async () => {
  const rec = recordingLogger('debug');
  lines = rec.lines;
  // stream_idle_s: a cancel racing a stream's start escapes grpc-js; the idle sweep reclaims it.
  g = await startTestGate({ limits: { max_body_bytes: 64 * 1024, stream_idle_s: 1.5 }, workers: FLEET }, { logger: rec.logger });
  strict = await startTestGate({ limits: { malformed_body: 'reject' }, workers: FLEET });
  h = harness(g.target);
  hs = harness(strict.target);
});
after(async () => {
  h.close();
  hs.close();
  await g.close(100);
  await strict.close(100);
});

function post(body: Buffer | string, path = '/v1/chat/completions', headers: Record<string, string> = {}) {
  return { method: 'POST', path, headers: { 'content-type': 'application/json', ...headers }, body };
}

function logged(msg: string): boolean {
  return lines.some((l) => l['msg'] === msg);
}

describe('bad input gets a defined answer', () => {
  test('malformed JSON is routed without a body key, with a log line', async () => {
    const out = await h.request(post('{"model": "m", "messages": [ {"role": '));
    assert.equal(out.kind, 'upstream');
    assert.ok(logged('request body unusable; routing without a body key'));
    const last = g.results.at(-1)!;
    assert.equal(last.kind === 'route' && last.outcome, 'unkeyed');
  });

  test('with malformed_body: reject, malformed JSON is a 400 with an OpenAI-style error', async () => {
    const out = await hs.request(post('{nope'));
    assert.equal(out.kind, 'local');
    assert.equal(out.kind === 'local' && out.status, 400);
    const err = JSON.parse(out.kind === 'local' ? out.body.toString() : '{}') as { error: { type: string; code: string } };
    assert.equal(err.error.code, 'bad_request');
    assert.equal(err.error.type, 'invalid_request_error');
  });

  test('a non-UTF-8 body is routed without a body key', async () => {
    const out = await h.request(post(Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])));
    assert.equal(out.kind, 'upstream');
  });

  test('a JSON body that is not an object, or has prompts of unexpected types, is routed', async () => {
    for (const body of ['[1,2]', '"text"', '42', 'null', '{"messages": 5}', '{"messages": [null, {"role": 3, "content": {"x": [1]}}]}', '{"prompt": {"a": 1}}']) {
      const out = await h.request(post(body));
      assert.equal(out.kind, 'upstream', body);
    }
  });

  test('a body over the gate’s limit is a 413 from the gate', async () => {
    const out = await h.request(post(JSON.stringify({ model: 'm', prompt: 'x'.repeat(100 * 1024) }), '/v1/completions'));
    assert.equal(out.kind === 'local' && out.status, 413);
    assert.equal(out.kind === 'local' && out.details, 'kvgate_body_too_large');
    assert.ok(logged('request rejected'), "logged('request rejected')");
  });

  test('a body over Envoy’s buffer is Envoy’s own 413; the gate never sees the body', async () => {
    const before = g.results.length;
    const out = await h.request(post(Buffer.alloc(9 * 1024 * 1024, 0x61)));
    assert.equal(out.kind === 'local' && out.status, 413);
    assert.equal(g.results.length, before);
  });

  test('unknown paths and body-less requests are routed by load', async () => {
    for (const req of [post('{"user": "u"}', '/v1/embeddings'), { method: 'GET', path: '/health' }, { method: 'DELETE', path: '/' }]) {
      const out = await h.request(req);
      assert.equal(out.kind, 'upstream');
    }
  });

  test('a request with no pseudo-headers at all is answered, not crashed on', async () => {
    const s = h.openRawStream();
    s.write(headersMsg({}, true) as never);
    const ev = await s.next(2000);
    assert.ok(!isClosed(ev) && 'request_headers' in ev && routedCluster(ev), "!isClosed(ev) && 'request_headers' in ev && routedCluster(ev)");
    s.end();
  });

  test('non-UTF-8 header bytes are a stable session id', async () => {
    const id = Buffer.from([0x73, 0xff, 0x80, 0x01, 0x7a]);
    const a = await h.request({ method: 'GET', path: '/v1/models', headers: { 'x-session-id': id } });
    const b = await h.request({ method: 'GET', path: '/v1/models', headers: { 'x-session-id': id } });
    assert.equal(a.kind, 'upstream');
    assert.equal(a.cluster, b.cluster);
    assert.equal(g.results.at(-1)?.kind === 'route' && g.results.at(-1)?.kind === 'route' && (g.results.at(-1) as { outcome: string }).outcome, 'affinity_hit');
  });

  test('a header flood is answered (extra headers ignored)', async () => {
    const headers: Record<string, string> = { 'x-session-id': 'flood' };
    for (let i = 0; i < 2000; i++) headers[`x-h-${i}`] = 'v';
    const out = await h.request({ method: 'GET', path: '/v1/models', headers });
    assert.equal(out.kind, 'upstream');
  });

  test('streams that end early, at every point, leak nothing', async () => {
    // Its own gate with the idle sweep far off (60 s): on the gate above (1.5 s) the sweep freed
    // what the stream's end and cancel handlers should, and this passed with them removed.
    const quiet = await startTestGate({ limits: { max_body_bytes: 64 * 1024, stream_idle_s: 60 }, workers: FLEET });
    const qh = harness(quiet.target);
    try {
      const chatHeaders = headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions', 'x-session-id': 'early' }, false);
      const chatBody = { request_body: { body: Buffer.from('{"messages":[]}'), end_of_stream: true } };
      const points: Array<[string, unknown[]]> = [
        ['before any message', []],
        ['after the request headers', [chatHeaders]],
        ['after the request body (lease held)', [chatHeaders, chatBody]],
      ];
      for (const [when, msgs] of points) {
        for (const how of ['end', 'cancel'] as const) {
          const s = qh.openRawStream();
          for (const m of msgs) {
            s.write(m as never);
            const ev = await s.next(1000);
            assert.ok(!isClosed(ev), `${when}: answered`);
          }
          // End once the server has the stream: a cancel racing the call's start can escape
          // grpc-js (what the sweep is for), and a check before the server sees it proves nothing.
          await waitFor(() => quiet.extproc.openStreams === 1, 500, `${when}: stream open on the server`);
          if (how === 'cancel') s.cancel();
          else s.end();
          await waitFor(() => quiet.extproc.openStreams === 0, 500, `${how} ${when}: stream closed`);
          await waitFor(async () => (await workers(quiet.admin)).every((w) => w.inflight === 0), 500, `${how} ${when}: no leases`);
        }
      }
    } finally {
      qh.close();
      await quiet.close(100);
    }
  });

  test('the gate is still healthy after all of the above', async () => {
    const out = await h.request(chat({ session: 'after' }));
    assert.equal(out.kind, 'upstream');
    const res = await fetch(`${g.admin}/healthz`);
    assert.equal(res.status, 200);
  });
});
