/**
 * BUFFERED_PARTIAL, scripted with raw streams (the harness does not imitate the mode). Envoy sends
 * what it holds once its buffer passes the high watermark, without end_of_stream, and lets the rest
 * of the body go upstream unprocessed (ext_proc.cc `handleDataBufferedPartialMode`,
 * `sendStreamChunk`); with trailers it sends the whole body, also without end_of_stream
 * (`onTrailers`). A cut body is not the request's: kvgate decides on the headers, and a valid
 * request is never refused as malformed because Envoy cut it. Red when the first body message is
 * read as the whole body whatever its end_of_stream says (the cut JSON answers 400 under
 * `malformed_body: reject`, and is read as the body under `forward`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { ProcessingRequest, ReceivedProcessingResponse } from '../../src/extproc/messages.js';
import { initHashing } from '../../src/request/hashing.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'content-type': 'application/json' };
const PARTIAL = { request_body_mode: 'BUFFERED_PARTIAL', response_body_mode: 'NONE' } as const;
const BUFFERED = { request_body_mode: 'BUFFERED', response_body_mode: 'NONE' } as const;
const WORKERS = [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }];
/** A whole body keyed on its `user` field, long enough that its first half is not JSON. */
const WHOLE = Buffer.from(JSON.stringify({ model: 'm', user: 'partial-user', messages: [{ role: 'user', content: 'x'.repeat(4000) }] }));
const FIRST_PART = WHOLE.subarray(0, 2000);

let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  await initHashing();
  g = await startTestGate({ workers: WORKERS, limits: { malformed_body: 'reject' } });
  h = harness(g.target);
});
after(async () => {
  h.close();
  await g.close(100);
});

/** A stream event that must be a reply (not a close or a timeout). */
function reply(e: Awaited<ReturnType<ReturnType<EnvoyHarness['openRawStream']>['next']>>): ReceivedProcessingResponse {
  assert.ok(!isClosed(e) && !isTimedOut(e), 'no reply');
  return e;
}

/** One request: headers (with the declared modes and any extra headers), one body message; the body reply. */
async function run(modes: object, extra: Record<string, string>, body: Buffer, eos: boolean): Promise<{ reply: ReceivedProcessingResponse; source: string | undefined }> {
  const s = h.openRawStream();
  const n = g.results.length;
  s.write({ ...headersMsg({ ...HEADERS, ...extra }, false), protocol_config: modes } as never);
  const headersReply = await s.next(5000);
  assert.ok(!isClosed(headersReply) && !isTimedOut(headersReply), "!isClosed(headersReply) && !isTimedOut(headersReply)");
  assert.equal(headersReply.response, 'request_headers');
  s.write({ request_body: { body, end_of_stream: eos } } as ProcessingRequest as never);
  const reply = await s.next(5000);
  assert.ok(!isClosed(reply) && !isTimedOut(reply), 'no body reply');
  await waitFor(() => g.results.length > n, 5000, 'a decision');
  s.close();
  await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
  return { reply, source: g.results[n]!.key?.source };
}

describe('BUFFERED_PARTIAL', () => {
  test('a body cut at the buffer (shorter than its content-length) is decided on the headers, not refused as malformed', async () => {
    const { reply, source } = await run(PARTIAL, { 'content-length': String(WHOLE.length) }, FIRST_PART, false);
    assert.equal(reply.response, 'request_body');
    assert.equal(reply.immediate_response, undefined);
    assert.ok(routedCluster(reply), 'the body reply routes');
    assert.notEqual(source, 'body_user');
  });

  test("a cut body's declared size counts as prefill queued on its worker (the load terms do not take it for empty)", async () => {
    const declared = 400_000;
    const s = h.openRawStream();
    const n = g.results.length;
    s.write({ ...headersMsg({ ...HEADERS, 'content-length': String(declared), 'x-session-id': 'cut-and-held' }, false), protocol_config: PARTIAL } as never);
    assert.equal(reply(await s.next(5000)).response, 'request_headers');
    s.write({ request_body: { body: FIRST_PART, end_of_stream: false } } as ProcessingRequest as never);
    assert.ok(routedCluster(reply(await s.next(5000))), "routedCluster(reply(await s.next(5000)))");
    await waitFor(() => g.results.length > n, 5000, 'a decision');
    const first = g.results[n]!;
    assert.equal(first.kind, 'route');
    // While that request is in flight (its stream open), the next decision sees its prefill queued.
    const s2 = h.openRawStream();
    s2.write({ ...headersMsg(HEADERS, false), protocol_config: PARTIAL } as never);
    assert.equal(reply(await s2.next(5000)).response, 'request_headers');
    s2.write({ request_body: { body: WHOLE, end_of_stream: true } } as ProcessingRequest as never);
    assert.ok(routedCluster(reply(await s2.next(5000))), "routedCluster(reply(await s2.next(5000)))");
    await waitFor(() => g.results.length > n + 1, 5000, 'a second decision');
    s2.close();
    const second = g.results[n + 1]!;
    assert.equal(second.kind, 'route');
    const held = second.kind === 'route' && first.kind === 'route' ? second.views?.find((v) => v.id === first.worker) : undefined;
    assert.ok((held?.pendingPrefill ?? 0) >= Math.floor(declared / 256) - 8, `pending prefill ${held?.pendingPrefill}`);
    s.close();
    await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
  });

  test('without a content-length, a declared BUFFERED_PARTIAL body without end_of_stream is taken as cut', async () => {
    const { reply } = await run(PARTIAL, {}, FIRST_PART, false);
    assert.equal(reply.immediate_response, undefined);
    assert.ok(routedCluster(reply), "routedCluster(reply)");
  });

  test('the whole body without end_of_stream (trailers follow), as its content-length says, is read', async () => {
    const { reply, source } = await run(PARTIAL, { 'content-length': String(WHOLE.length) }, WHOLE, false);
    assert.ok(routedCluster(reply), "routedCluster(reply)");
    assert.equal(source, 'body_user');
  });

  test('a body with end_of_stream is the whole body: a malformed one is still refused under reject', async () => {
    const ok = await run(PARTIAL, {}, WHOLE, true);
    assert.equal(ok.source, 'body_user');
    const bad = await run(PARTIAL, {}, FIRST_PART, true);
    assert.equal(bad.reply.immediate_response?.status?.code, 'BadRequest');
  });

  test('BUFFERED without end_of_stream (trailers follow) is the whole body, with or without a content-length', async () => {
    assert.equal((await run(BUFFERED, {}, WHOLE, false)).source, 'body_user');
    assert.equal((await run(BUFFERED, { 'content-length': String(WHOLE.length) }, WHOLE, false)).source, 'body_user');
    // What BUFFERED cannot send (Envoy answers 413 past its buffer) is still read as what it is.
    assert.equal((await run(BUFFERED, {}, FIRST_PART, false)).reply.immediate_response?.status?.code, 'BadRequest');
  });
});
