/**
 * kvgate retires each Envoy connection after a while (src/extproc/connection-age.ts) and must not
 * refuse a stream it has processed doing it: Envoy does not retry a refused ext_proc stream (no
 * retry_policy by default), so each would be a request without affinity, or failed when
 * fail-closed. On plain TCP the first GOAWAY is HTTP/2's shutdown notice, which nghttp2 does not
 * know it sent, so streams keep arriving until Envoy has read it; on TLS it is Node's GOAWAY, and a
 * stream arriving after it is ignored by nghttp2 and refused by the final one (a known limit,
 * docs/RELIABILITY.md).
 *
 * The client here behaves as Envoy's HTTP/2 client does on a GOAWAY: the connection drains (no new
 * streams on it, no GOAWAY sent back, closed once its streams are over:
 * MultiplexedActiveClientBase::onGoAway, source/common/http/http2/conn_pool.cc). Node's client
 * answers a GOAWAY with its own, which makes Node's server close the connection at once; Envoy
 * does not, so that answer is switched off here.
 */
import assert from 'node:assert/strict';
import * as http2 from 'node:http2';
import * as net from 'node:net';
import { describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import { makeCerts } from '../helpers/certs.js';
import { headersMsg } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { startLatencyProxy } from '../helpers/latency-proxy.js';

const PROCESS_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
const serialize = extProcServiceDefinition()['Process']!.requestSerialize as (m: unknown) => Buffer;

/** Answers a GOAWAY as Envoy's client does: no GOAWAY back, the connection drains (see the top). */
function drainLikeEnvoy(session: http2.ClientHttp2Session): void {
  Object.defineProperty(session, 'close', { value: () => {} });
  session.on('error', () => {});
}

/** An ext_proc Process stream, its messages to be written. */
function openProcess(session: http2.ClientHttp2Session): http2.ClientHttp2Stream {
  return session.request({ ':method': 'POST', ':path': PROCESS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
}

/** One gRPC message frame: not compressed, its length, the message. */
function frame(msg: unknown): Buffer {
  const bytes = serialize(msg);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([head, bytes]);
}

const CHAT = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'x-session-id': 'age' };

describe('connection retirement', () => {
  test('a retired connection gets the shutdown notice and a PING, its final GOAWAY once the PING is answered, and its open stream ends normally', async () => {
    // grpc-js's own max_connection_age sends both GOAWAYs back to back: a stream Envoy opened
    // before it read the first is refused by the second (Envoy does not retry it).
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 100 });
    const session = http2.connect(`http://${g.target}`);
    try {
      const { goaways, pings, req, finish } = await openAcrossRetirement(session);
      assert.equal(goaways[0]!.lastStreamId, 2 ** 31 - 1, 'the first GOAWAY names no last stream');
      assert.ok(goaways[1]!.lastStreamId >= req.id!, `the final GOAWAY counts the open stream (${JSON.stringify(goaways)}, stream ${req.id})`);
      assert.ok(pings.some((t) => t >= goaways[0]!.atMs && t <= goaways[1]!.atMs), `a PING between the two GOAWAYs (pings at ${pings.join(', ')} ms)`);
      // Answered at once by this client: the final GOAWAY does not wait out the notice period.
      const gap = goaways[1]!.atMs - goaways[0]!.atMs;
      assert.ok(gap < DEFAULTS.goawayNoticeMs / 2, `the final GOAWAY ${gap} ms after the first: it waited for the notice period, not the PING's answer`);
      await finish();
    } finally {
      session.destroy();
      await g.close(100);
    }
  });

  test('a stopping gate retires its connections the same way: the notice first, and the open stream ends normally', async () => {
    // grpc-js's tryShutdown alone sends the final GOAWAY at once, refusing every stream that crosses it.
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 60_000 });
    const session = http2.connect(`http://${g.target}`);
    let closing: Promise<void> | undefined;
    try {
      session.once('remoteSettings', () => (closing = g.close(10_000)));
      const { goaways, finish } = await openAcrossRetirement(session);
      assert.equal(goaways[0]!.lastStreamId, 2 ** 31 - 1, `the first GOAWAY names no last stream (${JSON.stringify(goaways)})`);
      await finish();
      await closing;
    } finally {
      session.destroy();
      await g.close(100);
    }
  });

  test('a connection Envoy opens while the gate is stopping gets the notice too, and none of its streams is refused', async () => {
    // Envoy reads the notice on its connection and moves new streams to a new one, to the same
    // gate while that still listens: that connection must not get the final GOAWAY at once.
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 60_000 });
    const slowA = await startLatencyProxy(g.grpcPort);
    slowA.setLatency(200);
    const slowB = await startLatencyProxy(g.grpcPort);
    slowB.setLatency(30);
    const a = http2.connect(`http://${slowA.address}`);
    drainLikeEnvoy(a);
    let b: http2.ClientHttp2Session | undefined;
    const goawaysB: Array<{ lastStreamId: number; atMs: number }> = [];
    const refused: number[] = [];
    const outcomes: Array<Promise<void>> = [];
    try {
      await new Promise((resolve) => a.once('remoteSettings', resolve));
      a.once('goaway', () => {
        const session = http2.connect(`http://${slowB.address}`);
        b = session;
        drainLikeEnvoy(session);
        session.on('goaway', (_code: number, lastStreamId: number) => goawaysB.push({ lastStreamId, atMs: Date.now() }));
        const timer = setInterval(() => {
          // Envoy opens no stream on a connection once it has read a GOAWAY from it.
          if (goawaysB.length > 0) return clearInterval(timer);
          try {
            const req = openProcess(session);
            req.on('error', () => {});
            req.on('data', () => {});
            outcomes.push(new Promise((resolve) => req.on('close', () => {
              if (req.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM) refused.push(req.id ?? -1);
              resolve();
            })));
            req.end(frame(headersMsg(CHAT, true)));
          } catch {
            clearInterval(timer);
          }
        }, 2);
      });
      await g.close(5000);
      await new Promise((r) => setTimeout(r, 300));
      await Promise.all(outcomes);
      assert.ok(outcomes.length > 0, 'the second connection opened streams');
      assert.equal(goawaysB[0]?.lastStreamId, 2 ** 31 - 1, `the new connection's first GOAWAY is the notice (${JSON.stringify(goawaysB)})`);
      // As in the test below: Node's client may refuse one stream itself (asked for in the turn it read the notice).
      assert.ok(refused.length <= 1, `${refused.length} of ${outcomes.length} streams on the new connection refused (goaways ${JSON.stringify(goawaysB)})`);
    } finally {
      a.destroy();
      b?.destroy();
      await slowA.close();
      await slowB.close();
      await g.close(100);
    }
  });

  test('every stream Envoy sends before it reads the notice is served, a round trip of them', async () => {
    // Envoy keeps opening streams on a connection until it reads the GOAWAY (then it drains it and
    // opens the next on a new one). With a plain GOAWAY, nghttp2 ignores every stream arriving
    // after it, and the final GOAWAY refuses them: here ~15 of them, a 30 ms round trip of streams
    // opened every 2 ms. The round trip is a proxy's.
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 60_000, connectionMaxStreams: 5 });
    const proxy = await startLatencyProxy(g.grpcPort);
    proxy.setLatency(15);
    const session = http2.connect(`http://${proxy.address}`);
    try {
      drainLikeEnvoy(session);
      let notified = false;
      session.on('goaway', () => (notified = true));
      const outcomes: Array<Promise<string>> = [];
      while (!notified && outcomes.length < 500) {
        const req = openProcess(session);
        let status = 'none';
        req.on('trailers', (t) => (status = String(t['grpc-status'])));
        req.on('data', () => {});
        req.on('error', () => {});
        outcomes.push(new Promise((resolve) => req.on('close', () => resolve(status === '0' ? 'served' : `lost (rst ${req.rstCode})`))));
        req.end(frame(headersMsg(CHAT, true)));
        await new Promise((r) => setTimeout(r, 2));
      }
      const results = await Promise.all(outcomes);
      const lost = results.filter((r) => r !== 'served');
      assert.ok(results.length >= 5 + 8, `the client opened ${results.length} streams: too few crossed the retirement for the test to mean anything`);
      // Node's own client may refuse one stream itself: one it asked for in the same turn of its
      // event loop as it read the notice, not yet written (nghttp2 starts no stream after a GOAWAY).
      // Envoy writes a stream's HEADERS as it opens it. So at most one, not a round trip's worth.
      assert.ok(lost.length <= 1, `${lost.length} of ${results.length} streams lost: ${lost.join(', ')}`);
    } finally {
      session.destroy();
      await proxy.close();
      await g.close(100);
    }
  });

  test('on TLS, where the notice cannot be written beside nghttp2, the first GOAWAY is Node\'s and the final one follows a notice period later', async () => {
    // TLS lets one writer write at a time (Node aborts the process on a second): kvgate sends no
    // notice of its own there, and no PING can speed the final GOAWAY up.
    const certs = makeCerts();
    let g: TestGate | undefined;
    let session: http2.ClientHttp2Session | undefined;
    try {
      g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 100, tls: { certFile: certs.serverCert, keyFile: certs.serverKey } });
      session = http2.connect(`https://${g.target}`, { ca: certs.read(certs.caCert), servername: 'kvgate' });
      const { goaways, req, finish } = await openAcrossRetirement(session);
      assert.equal(goaways[0]!.lastStreamId, 2 ** 31 - 1, 'the first GOAWAY names no last stream');
      assert.ok(goaways[1]!.lastStreamId >= req.id!, `the final GOAWAY counts the open stream (${JSON.stringify(goaways)}, stream ${req.id})`);
      const gap = goaways[1]!.atMs - goaways[0]!.atMs;
      assert.ok(gap >= DEFAULTS.goawayNoticeMs * 0.9, `the final GOAWAY ${gap} ms after the first, not after the notice period`);
      await finish();
    } finally {
      session?.destroy();
      await g?.close(100);
      certs.remove();
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
      drainLikeEnvoy(session);
      const goaways: Array<{ lastStreamId: number; afterStreams: number }> = [];
      let opened = 0;
      session.on('goaway', (_code: number, lastStreamId: number) => goaways.push({ lastStreamId, afterStreams: opened }));
      const statuses: string[] = [];
      for (let i = 0; i < budget; i++) {
        const req = openProcess(session);
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

  test('a connection whose peer never acknowledges the SETTINGS is still retired, within the notice period', async () => {
    // Retirement waits for the acknowledgement before writing the notice; it waited for ever on a
    // peer that connected and went silent, and grpc-js closes no idle connection by default.
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 100 });
    const silent = await rawConnection(g.grpcPort, []);
    const noAck = await rawConnection(g.grpcPort, [CLIENT_PREFACE, EMPTY_SETTINGS]);
    try {
      // Age (100 ms ± 10%) and a notice period; the bound only says when the test gives up.
      const bound = 110 + DEFAULTS.goawayNoticeMs + 3000;
      for (const [name, c] of [['silent', silent], ['preface without acknowledgement', noAck]] as const) {
        assert.ok((await within(c.closed, bound)) !== undefined, `the ${name} connection is still open ${bound} ms after it was accepted`);
      }
    } finally {
      silent.socket.destroy();
      noAck.socket.destroy();
      await g.close(100);
    }
  });

  test('a peer that never acknowledges the SETTINGS but opened a stream gets the final GOAWAY, and its stream keeps its grace period', async () => {
    // Cutting the connection at once is only for a peer with no stream to lose.
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 100 });
    const headers = headersFrame(1, { ':method': 'POST', ':scheme': 'http', ':path': PROCESS_PATH, ':authority': 'kvgate', 'content-type': 'application/grpc', te: 'trailers' });
    const c = await rawConnection(g.grpcPort, [CLIENT_PREFACE, EMPTY_SETTINGS, headers]);
    try {
      const goaway = await within(c.frameOfType(GOAWAY), 110 + DEFAULTS.goawayNoticeMs + 3000);
      assert.ok(goaway !== undefined, 'the final GOAWAY came');
      assert.equal(goaway.readUInt32BE(9) & 0x7fffffff, 1, 'it counts the open stream');
      // The stream has the grace period (limits.stream_idle_s) to end: the connection stays.
      assert.equal(await within(c.closed, 500), undefined, 'the connection with an open stream was cut');
    } finally {
      c.socket.destroy();
      await g.close(100);
    }
  });

  test('a stopping gate does not wait its whole grace period for a connection whose peer never acknowledges the SETTINGS', async () => {
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1' }] }, { connectionAgeMs: 60_000 });
    const silent = await rawConnection(g.grpcPort, []);
    const graceMs = 8000;
    try {
      // Accepted before the stop begins (Node's 'session' event has fired by the first byte back);
      // then it reads no more, as a peer gone quiet does.
      await silent.firstByte;
      silent.socket.pause();
      const t0 = Date.now();
      await g.close(graceMs);
      const took = Date.now() - t0;
      // The notice period and the quiet time, not the grace: nothing can finish on that connection.
      assert.ok(took < DEFAULTS.goawayNoticeMs + DEFAULTS.shutdownQuietMs + 3000, `the stop took ${took} ms of its ${graceMs} ms grace`);
    } finally {
      silent.socket.destroy();
    }
  });
});

/** `p`'s value, or undefined once `ms` have passed without one. */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<undefined>((resolve) => (timer = setTimeout(resolve, ms, undefined)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** HTTP/2's client connection preface, and an empty SETTINGS frame (RFC 9113 §3.4, §6.5). */
const CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const EMPTY_SETTINGS = Buffer.from([0, 0, 0, 0x04, 0, 0, 0, 0, 0]);

/**
 * A plain TCP connection to the gate that writes `bytes` and then nothing, never acknowledging the
 * server's SETTINGS. It reads what comes (so it sees the server close it): `closed` resolves with
 * the milliseconds from connect to close, `firstByte` once the server has written anything,
 * `frameOfType` with the first whole frame of an HTTP/2 frame type the server sends.
 */
async function rawConnection(
  port: number,
  bytes: Buffer[],
): Promise<{ socket: net.Socket; closed: Promise<number>; firstByte: Promise<void>; frameOfType(type: number): Promise<Buffer> }> {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('connect', resolve));
  const t0 = Date.now();
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now() - t0)));
  const firstByte = new Promise<void>((resolve) => socket.once('data', () => resolve()));
  let received = Buffer.alloc(0);
  const frames: Buffer[] = [];
  const waiting: Array<{ type: number; resolve: (f: Buffer) => void }> = [];
  socket.on('data', (d: Buffer) => {
    received = Buffer.concat([received, d]);
    // Whole frames: a 9-byte header (24-bit length, type, flags, stream id), then the payload.
    while (received.length >= 9 && received.length >= 9 + received.readUIntBE(0, 3)) {
      const frame = received.subarray(0, 9 + received.readUIntBE(0, 3));
      received = received.subarray(frame.length);
      frames.push(frame);
      for (const w of waiting.filter((x) => x.type === frame[3])) w.resolve(frame);
    }
  });
  for (const b of bytes) socket.write(b);
  const frameOfType = (type: number) =>
    new Promise<Buffer>((resolve) => {
      const seen = frames.find((f) => f[3] === type);
      if (seen) resolve(seen);
      else waiting.push({ type, resolve });
    });
  return { socket, closed, firstByte, frameOfType };
}

/** HTTP/2's GOAWAY frame type. */
const GOAWAY = 0x07;

/**
 * A HEADERS frame opening stream `id` (END_HEADERS, not END_STREAM), each field an HPACK literal
 * without indexing, its name and value as plain octets (RFC 7541 §6.2.2; all shorter than 127).
 */
function headersFrame(id: number, fields: Record<string, string>): Buffer {
  const block = Buffer.concat(
    Object.entries(fields).flatMap(([name, value]) => [Buffer.from([0x00, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value)]),
  );
  const head = Buffer.alloc(9);
  head.writeUIntBE(block.length, 0, 3);
  head[3] = 0x01; // HEADERS
  head[4] = 0x04; // END_HEADERS
  head.writeUInt32BE(id, 5);
  return Buffer.concat([head, block]);
}

/**
 * Opens one stream whose body is still to come (BUFFERED) on `session`, behaving as Envoy's client
 * does on a GOAWAY (no GOAWAY back), and waits for the connection's two GOAWAYs. `finish` sends the
 * body and checks the stream ran to its end on the retired connection.
 */
async function openAcrossRetirement(session: http2.ClientHttp2Session) {
  drainLikeEnvoy(session);
  const t0 = Date.now();
  const goaways: Array<{ lastStreamId: number; atMs: number }> = [];
  const pings: number[] = [];
  session.on('goaway', (_code: number, lastStreamId: number) => goaways.push({ lastStreamId, atMs: Date.now() - t0 }));
  session.on('ping', () => pings.push(Date.now() - t0));
  const req = openProcess(session);
  let status: string | undefined;
  const replies: Buffer[] = [];
  req.on('data', (d: Buffer) => replies.push(d));
  req.on('trailers', (t) => (status = String(t['grpc-status'])));
  req.on('error', () => {});
  const closed = new Promise<void>((resolve) => req.on('close', resolve));
  req.write(frame(headersMsg(CHAT, false)));
  const deadline = Date.now() + DEFAULTS.goawayNoticeMs + 3000;
  while (goaways.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.equal(goaways.length, 2, `two GOAWAYs (${JSON.stringify(goaways)})`);
  const finish = async () => {
    req.end(frame({ request_body: { body: Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })), end_of_stream: true } }));
    await closed;
    assert.equal(status, '0');
    assert.ok(Buffer.concat(replies).length > 0, 'the body was answered');
    assert.notEqual(req.rstCode, http2.constants.NGHTTP2_REFUSED_STREAM);
  };
  return { goaways, pings, req, finish };
}
