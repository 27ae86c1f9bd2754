/**
 * FULL_DUPLEX_STREAMED at the edges, scripted with raw streams: kvgate's own wait for a body that
 * does not end (Envoy runs no message timer in this mode), and a stream that goes away mid-body.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import type { ProcessingRequest, ReceivedProcessingResponse } from '../../src/extproc/messages.js';
import { initHashing } from '../../src/request/hashing.js';
import { understand } from '../../src/request/keys.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'content-type': 'application/json' };
const DUPLEX = { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' } as const;
const chunk = (text: string | Buffer, eos: boolean) => ({ request_body: { body: Buffer.from(text), end_of_stream: eos } }) as ProcessingRequest;
const WORKERS = [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }];
const streamed = (r: ReceivedProcessingResponse) => r.request_body?.response?.body_mutation?.streamed_response;
const WAIT_MS = 300;

let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  await initHashing();
  g = await startTestGate({ workers: WORKERS }, { fullDuplexBodyWaitMs: WAIT_MS });
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
    assert.ok(!isClosed(kept) && !isTimedOut(kept), "!isClosed(kept) && !isTimedOut(kept)");
    assert.deepEqual(kept.request_body?.response?.body_mutation?.streamed_response?.body, first);
    assert.equal(kept.request_body?.response?.body_mutation?.streamed_response?.end_of_stream, false);
    s.write(chunk('hi"}]}', true));
    const last = await s.next(5000);
    assert.ok(!isClosed(last) && !isTimedOut(last), "!isClosed(last) && !isTimedOut(last)");
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
  /** Sends the body in the given pieces; returns the headers reply and the body replies, in order. */
  async function duplex(pieces: Buffer[]): Promise<{ headersReply: ReceivedProcessingResponse; echoed: ReceivedProcessingResponse[] }> {
    const s = h.openRawStream();
    s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    pieces.forEach((p, i) => s.write(chunk(p, i === pieces.length - 1)));
    const headersReply = await s.next(5000);
    assert.ok(!isClosed(headersReply) && !isTimedOut(headersReply), 'no headers reply');
    const echoed: ReceivedProcessingResponse[] = [];
    for (;;) {
      const r = await s.next(5000);
      assert.ok(!isClosed(r) && !isTimedOut(r), 'the body did not come back to its end');
      echoed.push(r);
      if (streamed(r)?.end_of_stream) break;
    }
    s.close();
    return { headersReply, echoed };
  }

  test('one chunk is decided on as it is and goes back as it came, end_of_stream on it', async () => {
    const body = Buffer.from(JSON.stringify({ user: 'one-chunk', messages: [{ role: 'user', content: 'é'.repeat(3000) }] }));
    const n = g.results.length;
    const { headersReply, echoed } = await duplex([body]);
    assert.ok(routedCluster(headersReply), "routedCluster(headersReply)");
    assert.equal(g.results[n]?.key?.source, 'body_user');
    assert.equal(echoed.length, 1);
    assert.ok(streamed(echoed[0]!)?.body.equals(body), "streamed(echoed[0]!)?.body.equals(body)");
  });

  test('a body cut inside UTF-8 characters and inside string escapes is decided as the whole body is', async () => {
    // No session: the key is the prompt's prefix, so every block of the prompt must hash as in
    // one piece (blocks are 256 characters; this prompt has many).
    const text = Array.from({ length: 300 }, (_, i) => `turn ${i}: "quoted" \\ é€😀\n`).join('');
    const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'system', content: text }, { role: 'user', content: `\u00e9${text}` }] }));
    const at = (needle: string, from = 0) => body.indexOf(needle, from);
    // Inside the two bytes of é, between `\` and `"` of an escaped quote, and inside a \n escape.
    const cuts = [at('é') + 1, at('\\"', 2000) + 1, at('😀', 5000) + 2, at('\\n', 9000) + 1].sort((a, b) => a - b);
    assert.ok(cuts.every((c, i) => c > 0 && (i === 0 || c > cuts[i - 1]!)), `cuts ${cuts}`);
    const pieces = [0, ...cuts].map((c, i, all) => body.subarray(c, all[i + 1] ?? body.length));
    const n = g.results.length;
    const { echoed } = await duplex(pieces);
    const expected = understand({ method: 'POST', path: '/v1/chat/completions', headers: new Map(), body }, parseConfig({ workers: WORKERS }));
    assert.equal(expected.key?.source, 'prompt_prefix');
    assert.equal(g.results[n]?.key?.hash, expected.key?.hash);
    // The bytes go back exactly, the last reply ending the body.
    assert.ok(Buffer.concat(echoed.map((r) => streamed(r)!.body)).equals(body), "Buffer.concat(echoed.map((r) => streamed(r)!.body)).equals(body)");
    assert.ok(echoed.slice(0, -1).every((r) => streamed(r)?.end_of_stream === false));
  });

  test('past the wait, the chunks kept so far go back each as it came, none ending the body', async () => {
    const s = h.openRawStream();
    s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    const kept = ['{"user":"slow",', '"messages":[{"role":"user",', '"content":"'];
    for (const k of kept) s.write(chunk(k, false));
    const headersReply = await s.next(5000);
    assert.ok(!isClosed(headersReply) && !isTimedOut(headersReply), "!isClosed(headersReply) && !isTimedOut(headersReply)");
    assert.equal(headersReply.response, 'request_headers');
    for (const k of kept) {
      const r = await s.next(5000);
      assert.ok(!isClosed(r) && !isTimedOut(r), "!isClosed(r) && !isTimedOut(r)");
      assert.equal(streamed(r)?.body.toString(), k);
      assert.equal(streamed(r)?.end_of_stream, false);
    }
    s.write(chunk('x"}]}', true));
    const last = await s.next(5000);
    assert.ok(!isClosed(last) && !isTimedOut(last), "!isClosed(last) && !isTimedOut(last)");
    assert.equal(streamed(last)?.body.toString(), 'x"}]}');
    assert.equal(streamed(last)?.end_of_stream, true);
    s.close();
  });
});

/**
 * Full duplex decodes the body chunk by chunk; BUFFERED decodes it in one piece. For the same
 * bytes both must answer the same: the same immediate response for a body that is not UTF-8
 * however it is cut (a bad sequence split across chunks, a character cut off by the end of the
 * stream), and the same key for a valid one (a BOM split across chunks is dropped once).
 */
describe('full duplex decodes chunk by chunk as BUFFERED decodes the whole body', () => {
  let rg: TestGate;
  let rh: EnvoyHarness;
  before(async () => {
    rg = await startTestGate({ workers: WORKERS, limits: { malformed_body: 'reject' } }, { fullDuplexBodyWaitMs: 5000 });
    rh = harness(rg.target);
  });
  after(async () => {
    rh.close();
    await rg.close(100);
  });

  async function next(s: ReturnType<EnvoyHarness['openRawStream']>): Promise<ReceivedProcessingResponse> {
    const r = await s.next(5000);
    assert.ok(!isClosed(r) && !isTimedOut(r), 'no reply');
    return r;
  }
  /** The reply that decides: BUFFERED's body reply (after the headers' CONTINUE), full duplex's headers reply. */
  async function decide(pieces: Buffer[], mode: 'buffered' | 'full_duplex'): Promise<{ reply: ReceivedProcessingResponse; result: TestGate['results'][number] | undefined }> {
    const n = rg.results.length;
    const s = rh.openRawStream();
    if (mode === 'buffered') {
      s.write(headersMsg(HEADERS, false) as never);
      assert.equal((await next(s)).response, 'request_headers');
      s.write(chunk(Buffer.concat(pieces), true));
    } else {
      s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
      pieces.forEach((p, i) => s.write(chunk(p, i === pieces.length - 1)));
    }
    const reply = await next(s);
    s.close();
    return { reply, result: rg.results[n] };
  }

  const json = (content: string) => Buffer.from(JSON.stringify({ model: 'm', user: 'u-1', messages: [{ role: 'user', content }] }));
  const bytes = (...parts: Array<Buffer | number[]>) => Buffer.concat(parts.map((p) => Buffer.from(p)));

  test('not UTF-8 across chunk boundaries: the same 400 as the whole body, byte for byte', async () => {
    const good = json('x'.repeat(600));
    const split = good.indexOf('xxx') + 1;
    const cases: Array<[string, Buffer[]]> = [
      ['an encoded surrogate split after its lead byte', [bytes(good.subarray(0, split), [0xed]), bytes([0xa0, 0xbd], good.subarray(split))]],
      ['a truncated euro sign followed by ASCII in the next chunk', [bytes(good.subarray(0, split), [0xe2, 0x82]), good.subarray(split)]],
      ['a stray continuation byte opening a chunk', [good.subarray(0, split), bytes([0x80], good.subarray(split))]],
      ['a character cut off by the end of the stream', [good.subarray(0, split), bytes(good.subarray(split), [0xf0, 0x9f, 0x98])]],
    ];
    for (const [what, pieces] of cases) {
      const buffered = await decide(pieces, 'buffered');
      const duplex = await decide(pieces, 'full_duplex');
      assert.equal(buffered.reply.immediate_response?.status?.code, 'BadRequest', `${what}: buffered did not refuse it`);
      assert.match(Buffer.from(buffered.reply.immediate_response?.body ?? []).toString(), /not_utf8/, what);
      assert.deepEqual(duplex.reply.immediate_response, buffered.reply.immediate_response, what);
      assert.equal(duplex.result?.kind, 'reject', what);
    }
  });

  test('valid bytes cut inside characters and inside a BOM: routed on the same key as the whole body', async () => {
    const body = bytes([0xef, 0xbb, 0xbf], json(`${'é€😀'.repeat(200)}`));
    const at = (k: number) => body.indexOf(Buffer.from('😀'), 40 * k) + 1 + (k % 3);
    const cases: Array<[string, Buffer[]]> = [
      ['a BOM split over three chunks', [body.subarray(0, 1), body.subarray(1, 2), body.subarray(2)]],
      ['characters split at several points', [body.subarray(0, at(1)), body.subarray(at(1), at(5)), body.subarray(at(5), at(9)), body.subarray(at(9))]],
    ];
    for (const [what, pieces] of cases) {
      const buffered = await decide(pieces, 'buffered');
      const duplex = await decide(pieces, 'full_duplex');
      assert.equal(buffered.result?.key?.source, 'body_user', `${what}: buffered did not read the body`);
      assert.ok(routedCluster(duplex.reply), what);
      assert.deepEqual(duplex.result?.key, buffered.result?.key, what);
    }
  });
});
