/**
 * The ext_proc protocol at the edges: wrong phase orders, half-close and cancel at every phase,
 * and nothing left behind (streams, leases) however a stream ends. Scripted with raw streams.
 */
import assert from 'node:assert/strict';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { after, before, describe, test } from 'node:test';
import type { ProcessingRequest } from '../../src/extproc/messages.js';
import { isClosed, isTimedOut, type EnvoyHarness, type RawStream } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { startLatencyProxy, type LatencyProxy } from '../helpers/latency-proxy.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const REQ_HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'x-session-id': 'proto' };
const body = (text: string, eos = true) => ({ request_body: { body: Buffer.from(text), end_of_stream: eos } }) as ProcessingRequest;
const respHeaders = (eos = false) =>
  ({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: eos } }) as ProcessingRequest;

let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  // A short idle limit: a stream cancelled before its first message can escape grpc-js's cancel
  // notification, and the idle sweep is what reclaims it.
  g = await startTestGate({ limits: { stream_idle_s: 1.5 }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] });
  h = harness(g.target);
});
after(async () => {
  h.close();
  await g.close(100);
});

async function reply(s: RawStream) {
  const ev = await s.next(2000);
  assert.ok(!isTimedOut(ev), 'a reply within 2 s');
  return ev;
}

async function settled(): Promise<void> {
  await waitFor(() => g.extproc.openStreams === 0, 3000, 'no open streams');
  await waitFor(async () => (await workers(g.admin)).every((w) => w.inflight === 0), 3000, 'no in-flight leases');
}

const phases: Array<[string, ProcessingRequest[]]> = [
  ['before any message', []],
  ['after request headers', [headersMsg(REQ_HEADERS, false) as never]],
  ['after the request body (lease held)', [headersMsg(REQ_HEADERS, false) as never, body('{"user":"a"}')]],
  ['after response headers', [headersMsg(REQ_HEADERS, false) as never, body('{"user":"a"}'), respHeaders()]],
  ['after a body-less request was routed', [headersMsg({ ...REQ_HEADERS, ':method': 'GET' }, true) as never]],
];

describe('ext_proc protocol', () => {
  test('headers twice is a protocol violation: the stream ends with INVALID_ARGUMENT', async () => {
    const s = h.openRawStream();
    s.write(headersMsg(REQ_HEADERS, false) as never);
    const first = await reply(s);
    assert.ok(!isClosed(first) && first.request_headers, "!isClosed(first) && first.request_headers");
    s.write(headersMsg(REQ_HEADERS, false) as never);
    const second = await reply(s);
    assert.ok(isClosed(second), "isClosed(second)");
    assert.equal(second.status.code, GrpcStatus.INVALID_ARGUMENT);
    assert.match(second.status.details, /request headers after request headers/);
    await settled();
  });

  test('a body after the request trailers is a protocol violation', async () => {
    const s = h.openRawStream();
    s.write(headersMsg(REQ_HEADERS, false) as never);
    await reply(s);
    s.write(body('{"user":"u"}', false));
    const routed = await reply(s);
    assert.ok(!isClosed(routed) && routedCluster(routed), "!isClosed(routed) && routedCluster(routed)");
    s.write({ request_trailers: { trailers: { headers: [] } } } as never);
    const t = await reply(s);
    assert.ok(!isClosed(t) && t.request_trailers, "!isClosed(t) && t.request_trailers");
    s.write(body('more'));
    const ev = await reply(s);
    assert.ok(isClosed(ev) && ev.status.code === GrpcStatus.INVALID_ARGUMENT, "isClosed(ev) && ev.status.code === GrpcStatus.INVALID_ARGUMENT");
    await settled();
  });

  test('a message with no phase set is a protocol violation', async () => {
    const s = h.openRawStream();
    s.write({} as never);
    const ev = await reply(s);
    assert.ok(isClosed(ev) && ev.status.code === GrpcStatus.INVALID_ARGUMENT, "isClosed(ev) && ev.status.code === GrpcStatus.INVALID_ARGUMENT");
    await settled();
  });

  test('response headers twice is a protocol violation; the lease is still released', async () => {
    const s = h.openRawStream();
    s.write(headersMsg({ ...REQ_HEADERS, ':method': 'GET' }, true) as never);
    await reply(s);
    s.write(respHeaders());
    await reply(s);
    s.write(respHeaders());
    const ev = await reply(s);
    assert.ok(isClosed(ev) && ev.status.code === GrpcStatus.INVALID_ARGUMENT, "isClosed(ev) && ev.status.code === GrpcStatus.INVALID_ARGUMENT");
    await settled();
  });

  test('response phases may arrive before the request body ends (directions interleave)', async () => {
    const s = h.openRawStream();
    s.write(headersMsg(REQ_HEADERS, false) as never);
    await reply(s);
    s.write(respHeaders());
    const r = await reply(s);
    assert.ok(!isClosed(r) && r.response_headers, "!isClosed(r) && r.response_headers");
    s.end();
    const end = await reply(s);
    assert.ok(isClosed(end) && end.status.code === GrpcStatus.OK, "isClosed(end) && end.status.code === GrpcStatus.OK");
    await settled();
  });

  for (const [when, msgs] of phases) {
    test(`half-close ${when}: the server finishes with OK and keeps nothing`, async () => {
      const s = h.openRawStream();
      for (const m of msgs) {
        s.write(m);
        assert.ok(!isClosed(await reply(s)), "!isClosed(await reply(s))");
      }
      s.end();
      const ev = await reply(s);
      assert.ok(isClosed(ev), "isClosed(ev)");
      assert.equal(ev.status.code, GrpcStatus.OK);
      await settled();
    });
    // Cancels after a message are checked below, on a gate whose idle sweep cannot hide a leak.
    if (msgs.length > 0) continue;
    test(`cancel ${when}: nothing is left behind`, async () => {
      const s = h.openRawStream();
      s.cancel();
      // The one case the idle sweep is for: a cancel racing the call's start can go unseen.
      await settled();
    });
  }
});

/**
 * Cancels with the idle sweep set far beyond the test (60 s), so only the cancel path can free
 * what a stream holds. With the sweep at 1.5 s (the gate above) these passed with every stream
 * event handler removed.
 */
describe('cancel, with no idle sweep to hide a leak', () => {
  let quiet: TestGate;
  let qh: EnvoyHarness;
  let redis: TestRedis;
  let proxy: LatencyProxy;
  let slow: TestGate;
  let sh: EnvoyHarness;
  before(async () => {
    quiet = await startTestGate({ limits: { stream_idle_s: 60 }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] });
    qh = harness(quiet.target);
    redis = await startRedis();
    proxy = await startLatencyProxy(redis.port);
    slow = await startTestGate(
      { limits: { stream_idle_s: 60 }, store: { timeout_ms: 3000 }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] },
      { store: `redis://${proxy.address}` },
    );
    sh = harness(slow.target);
    proxy.setLatency(150);
  });
  after(async () => {
    qh.close();
    await quiet.close(100);
    sh.close();
    await slow.close(100);
    await proxy.close();
    await redis.stop();
  });

  test('a request decided at the body stays in flight until its response headers', async () => {
    // On the gate with no idle sweep in reach (60 s): the short-swept gate's 1.5 s would release
    // the lease within this test's old 2 s wait even with the response-headers release removed.
    const s = qh.openRawStream();
    s.write(headersMsg(REQ_HEADERS, false) as never);
    await reply(s);
    s.write(body('{"user":"inflight"}'));
    const routed = await reply(s);
    assert.ok(!isClosed(routed), "!isClosed(routed)");
    const total = async () => (await workers(quiet.admin)).reduce((n, w) => n + w.inflight, 0);
    assert.equal(await total(), 1);
    s.write(respHeaders());
    await reply(s);
    await waitFor(async () => (await total()) === 0, 300, 'released at response headers');
    s.end();
    await waitFor(() => quiet.extproc.openStreams === 0, 3000, 'no open streams');
  });

  for (const [when, msgs] of phases) {
    if (msgs.length === 0) continue;
    test(`cancel ${when}: nothing is left behind`, async () => {
      const s = qh.openRawStream();
      for (const m of msgs) {
        s.write(m);
        assert.ok(!isClosed(await reply(s)), "!isClosed(await reply(s))");
      }
      s.cancel();
      await waitFor(() => quiet.extproc.openStreams === 0, 3000, 'no open streams');
      await waitFor(async () => (await workers(quiet.admin)).every((w) => w.inflight === 0), 3000, 'no in-flight leases');
    });
  }

  test('cancel while the decision is in progress: the lease it then takes is released by the cancel', async () => {
    for (let i = 0; i < 5; i++) {
      const decided = slow.results.length;
      const s = sh.openRawStream();
      s.write(headersMsg({ ...REQ_HEADERS, ':method': 'GET', 'x-session-id': `race-${i}` }, true) as never);
      // The call has reached the server (a cancel racing its start could go unseen), and the
      // decision has begun: the store takes at least 300 ms to answer.
      await waitFor(() => slow.extproc.openStreams === 1, 3000, 'the stream is open on the server');
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(slow.results.length, decided, 'still deciding when the cancel is sent');
      s.cancel();
      await waitFor(() => slow.results.length === decided + 1, 5000, 'the decision finished after the cancel');
      const r = slow.results.at(-1)!;
      assert.equal(r.kind, 'route', 'a lease was taken for the cancelled stream');
      await waitFor(() => slow.extproc.openStreams === 0, 3000, 'the cancelled stream is gone');
      await waitFor(async () => (await workers(slow.admin)).every((w) => w.inflight === 0), 3000, 'its lease is released');
    }
  });
});
