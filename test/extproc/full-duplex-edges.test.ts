/**
 * FULL_DUPLEX_STREAMED edges the wider tests do not pin: which paths wait for the body at all,
 * the body limit at its exact size, and which echoed chunk (if any) ends the body. The body wait
 * is long (5 s) so that no deadline can answer for a path that should not wait.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import type { ProcessingRequest, ReceivedProcessingResponse } from '../../src/extproc/messages.js';
import { initHashing } from '../../src/request/hashing.js';
import { isClosed, isTimedOut, type EnvoyHarness, type RawStream } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'content-type': 'application/json' };
const DUPLEX = { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' } as const;
const chunk = (text: string | Buffer, eos: boolean) => ({ request_body: { body: Buffer.from(text), end_of_stream: eos } }) as ProcessingRequest;
const streamed = (r: ReceivedProcessingResponse) => r.request_body?.response?.body_mutation?.streamed_response;
const MAX_BODY = 200;

let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  await initHashing();
  g = await startTestGate(
    { limits: { max_body_bytes: MAX_BODY, stream_idle_s: 60 }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] },
    { fullDuplexBodyWaitMs: 5000 },
  );
  h = harness(g.target);
});
after(async () => {
  h.close();
  await g.close(100);
});

async function next(s: RawStream, ms = 1000): Promise<ReceivedProcessingResponse> {
  const ev = await s.next(ms);
  assert.ok(!isTimedOut(ev), `a reply within ${ms} ms`);
  assert.ok(!isClosed(ev), 'the stream stays open');
  return ev;
}

// Every stream a test opens is closed after it, passed or failed, so one failure stays its own.
const opened: RawStream[] = [];
function open(): RawStream {
  const s = h.openRawStream();
  opened.push(s);
  return s;
}
afterEach(async () => {
  for (const s of opened.splice(0)) s.close();
  await waitFor(() => g.extproc.openStreams === 0, 2000, 'no open streams');
});

/** A JSON body of exactly `size` bytes. */
function bodyOf(size: number): Buffer {
  const head = '{"user":"limit","messages":[{"role":"user","content":"';
  const tail = '"}]}';
  const b = Buffer.from(head + 'x'.repeat(size - head.length - tail.length) + tail);
  assert.equal(b.length, size);
  return b;
}

describe('full duplex edges', () => {
  test('a path whose body kvgate does not read is answered at its headers, before any body chunk', async () => {
    const s = open();
    s.write({ ...headersMsg({ ...HEADERS, ':path': '/v1/embeddings' }, false), protocol_config: DUPLEX } as never);
    const r = await next(s, 1000);
    assert.equal(r.response, 'request_headers');
    assert.ok(routedCluster(r), 'routed at the headers');
    s.write(chunk('{"input":"x"}', true));
    const echoed = await next(s);
    assert.equal(streamed(echoed)?.body.toString(), '{"input":"x"}');
    assert.equal(streamed(echoed)?.end_of_stream, true);
  });

  test('a body of exactly max_body_bytes is routed; one byte more is a 413', async () => {
    const ok = open();
    ok.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    ok.write(chunk(bodyOf(MAX_BODY), true));
    const routed = await next(ok);
    assert.equal(routed.immediate_response, undefined, `no immediate response at exactly the limit (${JSON.stringify(routed.immediate_response?.status)})`);
    assert.ok(routedCluster(routed), "routedCluster(routed)");

    const over = open();
    over.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    over.write(chunk(bodyOf(MAX_BODY + 1), true));
    const refused = await next(over);
    assert.equal(refused.immediate_response?.status?.code, 'PayloadTooLarge');
  });

  test('a body ended by trailers: no echoed chunk carries end_of_stream; the trailers reply ends it', async () => {
    const s = open();
    s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    s.write(chunk('{"user":"trailers",', false));
    s.write(chunk('"messages":[]}', false));
    s.write({ request_trailers: { trailers: { headers: [] } } } as never);
    const headersReply = await next(s);
    assert.equal(headersReply.response, 'request_headers');
    assert.ok(routedCluster(headersReply), "routedCluster(headersReply)");
    const rest: ReceivedProcessingResponse[] = [];
    for (;;) {
      const r = await next(s);
      rest.push(r);
      if (r.response === 'request_trailers') break;
    }
    const bodies = rest.filter((r) => r.response === 'request_body');
    assert.equal(Buffer.concat(bodies.map((r) => streamed(r)!.body)).toString(), '{"user":"trailers","messages":[]}');
    assert.ok(bodies.length > 0 && bodies.every((r) => streamed(r)?.end_of_stream === false), 'an echoed chunk ended the body before the trailers');
  });

  test('headers without end_of_stream, then an empty body with end_of_stream: exactly one empty streamed_response ends it', async () => {
    const s = open();
    s.write({ ...headersMsg(HEADERS, false), protocol_config: DUPLEX } as never);
    s.write(chunk('', true));
    const headersReply = await next(s);
    assert.equal(headersReply.response, 'request_headers');
    const end = await next(s);
    assert.equal(end.response, 'request_body');
    assert.equal(streamed(end)?.body.length, 0);
    assert.equal(streamed(end)?.end_of_stream, true);
    assert.ok(isTimedOut(await s.next(150)), 'nothing after the one empty chunk');
  });
});
