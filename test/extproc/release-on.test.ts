/**
 * `routing.release_on: response_end`: the lease is held past the response headers and released
 * when the response ends (a body chunk with end_of_stream, the trailers, or headers that end it).
 * The idle sweep is set far beyond the test (60 s), so only the response's end can release.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { ProcessingRequest } from '../../src/extproc/messages.js';
import { isClosed, isTimedOut, type EnvoyHarness, type RawStream } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';

const GET = { ':method': 'GET', ':path': '/v1/models', ':scheme': 'http', ':authority': 'llm', 'x-session-id': 'release-on' };
const respHeaders = (eos = false) =>
  ({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] }, end_of_stream: eos } }) as ProcessingRequest;

let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  g = await startTestGate({
    limits: { stream_idle_s: 60 },
    routing: { release_on: 'response_end' },
    workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }],
  });
  h = harness(g.target);
});
after(async () => {
  h.close();
  await g.close(100);
});

async function reply(s: RawStream) {
  const ev = await s.next(2000);
  assert.ok(!isTimedOut(ev), 'a reply within 2 s');
  assert.ok(!isClosed(ev), 'the stream stays open');
  return ev;
}
const inflight = async () => (await workers(g.admin)).reduce((n, w) => n + w.inflight, 0);

/** Routes a body-less request and answers its response headers (no end_of_stream): the lease is still held. */
async function routedPastHeaders(session: string): Promise<RawStream> {
  const s = h.openRawStream();
  s.write(headersMsg({ ...GET, 'x-session-id': session }, true) as never);
  assert.ok(routedCluster(await reply(s)), "routedCluster(await reply(s))");
  s.write(respHeaders(false));
  await reply(s);
  // The release is asynchronous: give a wrong one time to land before checking it did not.
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(await inflight(), 1, 'still in flight after response headers under release_on: response_end');
  return s;
}

async function released(s: RawStream, what: string): Promise<void> {
  await waitFor(async () => (await inflight()) === 0, 300, `released at ${what}`);
  s.end();
  await waitFor(() => g.extproc.openStreams === 0, 2000, 'no open streams');
}

describe('routing.release_on: response_end', () => {
  test('released by a response body chunk with end_of_stream, not before', async () => {
    const s = await routedPastHeaders('body-eos');
    s.write({ response_body: { body: Buffer.from('partial'), end_of_stream: false } } as never);
    await reply(s);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(await inflight(), 1, 'a chunk without end_of_stream keeps the lease');
    s.write({ response_body: { body: Buffer.from('done'), end_of_stream: true } } as never);
    await reply(s);
    await released(s, 'the last response body chunk');
  });

  test('released by the response trailers', async () => {
    const s = await routedPastHeaders('trailers');
    s.write({ response_body: { body: Buffer.from('x'), end_of_stream: false } } as never);
    await reply(s);
    s.write({ response_trailers: { trailers: { headers: [] } } } as never);
    await reply(s);
    await released(s, 'the response trailers');
  });

  test('released by response headers that carry end_of_stream', async () => {
    const s = h.openRawStream();
    s.write(headersMsg({ ...GET, 'x-session-id': 'headers-eos' }, true) as never);
    assert.ok(routedCluster(await reply(s)), "routedCluster(await reply(s))");
    assert.equal(await inflight(), 1);
    s.write(respHeaders(true));
    await reply(s);
    await released(s, 'response headers with end_of_stream');
  });
});
