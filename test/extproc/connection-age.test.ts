/**
 * kvgate retires each Envoy connection after a while (src/extproc/connection-age.ts) and must not
 * refuse a stream it has processed doing it: Envoy does not retry a refused ext_proc stream (no
 * retry_policy by default), so each would be a request without affinity, or failed when
 * fail-closed. (A stream arriving after the first GOAWAY is ignored by nghttp2 and refused by the
 * final one: a known limit, docs/RELIABILITY.md.)
 *
 * The client here behaves as Envoy's HTTP/2 client does on a GOAWAY: the connection drains (no new
 * streams on it, no GOAWAY sent back, closed once its streams are over:
 * MultiplexedActiveClientBase::onGoAway, source/common/http/http2/conn_pool.cc). Node's client
 * answers a GOAWAY with its own, which makes Node's server close the connection at once; Envoy
 * does not, so that answer is switched off here.
 */
import assert from 'node:assert/strict';
import * as http2 from 'node:http2';
import { describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import { headersMsg } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';

const PROCESS_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
const serialize = extProcServiceDefinition()['Process']!.requestSerialize as (m: unknown) => Buffer;

/** One gRPC message frame: not compressed, its length, the message. */
function frame(msg: unknown): Buffer {
  const bytes = serialize(msg);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([head, bytes]);
}

const CHAT = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'x-session-id': 'age' };

describe('connection retirement', () => {
  test('a retired connection gets a GOAWAY naming no last stream, its final GOAWAY a notice period later, and its open stream ends normally', async () => {
    // grpc-js's own max_connection_age sends both GOAWAYs back to back: a stream Envoy opened
    // before it read the first is refused by the second (Envoy does not retry it).
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 100 });
    const session = http2.connect(`http://${g.target}`);
    try {
      Object.defineProperty(session, 'close', { value: () => {} });
      session.on('error', () => {});
      const t0 = Date.now();
      const goaways: Array<{ lastStreamId: number; atMs: number }> = [];
      session.on('goaway', (_code: number, lastStreamId: number) => goaways.push({ lastStreamId, atMs: Date.now() - t0 }));
      // A request whose body is still to come (BUFFERED): its stream stays open across both GOAWAYs.
      const req = session.request({ ':method': 'POST', ':path': PROCESS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
      let status: string | undefined;
      const replies: Buffer[] = [];
      req.on('data', (d: Buffer) => replies.push(d));
      req.on('trailers', (t) => (status = String(t['grpc-status'])));
      req.on('error', () => {});
      const closed = new Promise<void>((resolve) => req.on('close', resolve));
      req.write(frame(headersMsg(CHAT, false)));
      const deadline = Date.now() + DEFAULTS.goawayNoticeMs + 3000;
      while (goaways.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(goaways.length, 2, `two GOAWAYs (${JSON.stringify(goaways)})`);
      assert.equal(goaways[0]!.lastStreamId, 2 ** 31 - 1, 'the first GOAWAY names no last stream');
      assert.ok(goaways[1]!.lastStreamId >= req.id!, `the final GOAWAY counts the open stream (${JSON.stringify(goaways)}, stream ${req.id})`);
      const gap = goaways[1]!.atMs - goaways[0]!.atMs;
      assert.ok(gap >= DEFAULTS.goawayNoticeMs * 0.9, `the final GOAWAY ${gap} ms after the first, not before the notice period`);
      // The open stream runs to its end on the retired connection.
      req.end(frame({ request_body: { body: Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })), end_of_stream: true } }));
      await closed;
      assert.equal(status, '0');
      assert.ok(Buffer.concat(replies).length > 0, 'the body was answered');
      assert.notEqual(req.rstCode, http2.constants.NGHTTP2_REFUSED_STREAM);
    } finally {
      session.destroy();
      await g.close(100);
    }
  });

  test('a connection is retired once it has carried its stream budget, long before its age: fast Envoys stay under the reset limit of nghttp2', async () => {
    // Envoy ends every stream with a reset, and nghttp2 tears a connection down past a burst of
    // 1000 of them; a gate answering more than that a second on one connection must retire it by
    // count. Age is a minute here, so only the count can retire it.
    const budget = 5;
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 60_000, connectionMaxStreams: budget });
    const session = http2.connect(`http://${g.target}`);
    try {
      Object.defineProperty(session, 'close', { value: () => {} });
      session.on('error', () => {});
      const goaways: Array<{ lastStreamId: number; afterStreams: number }> = [];
      let opened = 0;
      session.on('goaway', (_code: number, lastStreamId: number) => goaways.push({ lastStreamId, afterStreams: opened }));
      const statuses: string[] = [];
      for (let i = 0; i < budget; i++) {
        const req = session.request({ ':method': 'POST', ':path': PROCESS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
        opened++;
        req.on('data', () => {});
        req.on('error', () => {});
        req.on('trailers', (t) => statuses.push(String(t['grpc-status'])));
        const closed = new Promise<void>((resolve) => req.on('close', resolve));
        req.end(frame(headersMsg(CHAT, true)));
        await closed;
        assert.notEqual(req.rstCode, http2.constants.NGHTTP2_REFUSED_STREAM, `stream ${i + 1} refused`);
      }
      const deadline = Date.now() + 3000;
      while (goaways.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.ok(goaways.length >= 1, 'a GOAWAY after the budget, with the age a minute away');
      assert.equal(goaways[0]!.lastStreamId, 2 ** 31 - 1, 'the first GOAWAY names no last stream');
      assert.equal(goaways[0]!.afterStreams, budget, 'sent once the budget was reached, not before');
      assert.deepEqual(statuses, Array.from({ length: budget }, () => '0'), 'every stream within the budget was served');
    } finally {
      session.destroy();
      await g.close(100);
    }
  });
});
