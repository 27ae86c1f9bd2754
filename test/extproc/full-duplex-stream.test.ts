/**
 * FULL_DUPLEX_STREAMED at the edges, scripted with raw streams: kvgate's own wait for a body that
 * does not end (Envoy runs no message timer in this mode), and a stream that goes away mid-body.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { ProcessingRequest } from '../../src/extproc/messages.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'content-type': 'application/json' };
const DUPLEX = { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' } as const;
const chunk = (text: string, eos: boolean) => ({ request_body: { body: Buffer.from(text), end_of_stream: eos } }) as ProcessingRequest;
const WAIT_MS = 300;

let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] }, { fullDuplexBodyWaitMs: WAIT_MS });
  h = harness(g.target);
});
after(async () => {
  h.close();
  await g.close(100);
});

describe('full duplex at the edges', () => {
  test('a body that does not end is waited for at most the wait, then decided on the headers; the rest still flows', async () => {
    const s = h.openRawStream();
    const n = g.results.length;
    const start = Date.now();
    s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    const first = Buffer.from('{"user":"never-finished","messages":[{"role":"user","content":"');
    s.write(chunk(first.toString(), false));
    // Nothing is answered while the body may still end (the wait has not passed).
    assert.ok(isTimedOut(await s.next(WAIT_MS / 3)), 'answered before the body ended or the wait passed');
    const headersReply = await s.next(5000);
    assert.ok(!isClosed(headersReply) && !isTimedOut(headersReply), 'no headers reply after the wait');
    assert.ok(Date.now() - start >= WAIT_MS - 20, 'decided before the wait was over');
    assert.equal(headersReply.response, 'request_headers');
    assert.ok(routedCluster(headersReply), 'the headers reply routes');
    assert.equal(headersReply.request_headers?.response?.clear_route_cache, true);
    // Decided without the body: no key from the body's `user`.
    assert.notEqual(g.results[n]?.key?.source, 'body_user');
    // What was kept goes back, not ending the body; later chunks are echoed as they come.
    const kept = await s.next(5000);
    assert.ok(!isClosed(kept) && !isTimedOut(kept));
    assert.deepEqual(kept.request_body?.response?.body_mutation?.streamed_response?.body, first);
    assert.equal(kept.request_body?.response?.body_mutation?.streamed_response?.end_of_stream, false);
    s.write(chunk('hi"}]}', true));
    const last = await s.next(5000);
    assert.ok(!isClosed(last) && !isTimedOut(last));
    assert.equal(last.request_body?.response?.body_mutation?.streamed_response?.body.toString(), 'hi"}]}');
    assert.equal(last.request_body?.response?.body_mutation?.streamed_response?.end_of_stream, true);
    s.close();
    await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
  });

  test('a stream cancelled mid-body leaves nothing behind and is never decided', async () => {
    const s = h.openRawStream();
    const n = g.results.length;
    s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    s.write(chunk('{"user":"gone","messages":[', false));
    await waitFor(() => g.extproc.openStreams === 1, 5000, 'stream open');
    s.cancel();
    await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
    // Past the wait: the cancelled stream's timer must not decide (and take a lease) after all.
    await new Promise((r) => setTimeout(r, WAIT_MS + 100));
    assert.equal(g.results.length, n);
  });
});
