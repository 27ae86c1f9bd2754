/**
 * The shutdown notice is written on the connection's socket beside Node's HTTP/2
 * (src/extproc/shutdown-notice.ts). These hold it to what makes that safe: it lands between whole
 * frames however busy the connection is, the peer reads it as a GOAWAY naming no last stream, and
 * on TLS nothing is written. That nghttp2 goes on accepting streams after it is
 * test/extproc/connection-age.test.ts's (a round trip of streams, all served).
 */
import assert from 'node:assert/strict';
import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { sendShutdownNotice } from '../../src/extproc/shutdown-notice.js';
import { makeCerts, type CertFiles } from '../helpers/certs.js';

const BODY = 256 * 1024;
const PIECE = 32 * 1024;

describe('shutdown notice', () => {
  let certs: CertFiles;
  before(() => {
    certs = makeCerts();
  });
  after(() => certs.remove());

  test('written again and again while responses stream out, it breaks no frame: every body arrives whole, each notice reads as a GOAWAY naming no last stream', async () => {
    const server = http2.createServer();
    let written = 0;
    server.on('session', (session) => {
      let streams = 0;
      session.on('stream', (stream) => {
        stream.respond({ ':status': 200 });
        // In pieces, a turn of the event loop apart, so DATA is being written when a notice goes.
        let sent = 0;
        const pump = () => {
          if (stream.destroyed) return;
          if (sent < BODY) {
            stream.write(Buffer.alloc(PIECE, 0x61));
            sent += PIECE;
            setImmediate(pump);
          } else stream.end();
        };
        pump();
        if (++streams % 5 === 0) setImmediate(() => (written += sendShutdownNotice(session) ? 1 : 0));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const goaways: number[] = [];
      let whole = 0;
      let broken = 0;
      let sessionErrors = 0;
      for (let round = 0; round < 5; round++) {
        const client = http2.connect(`http://127.0.0.1:${port}`, { settings: { initialWindowSize: 1 << 20 } });
        // As Envoy does: a GOAWAY drains the connection, it sends none back.
        Object.defineProperty(client, 'close', { value: () => {} });
        client.on('error', () => sessionErrors++);
        client.on('goaway', (_code: number, last: number) => goaways.push(last));
        await Promise.all(
          Array.from({ length: 20 }, () =>
            new Promise<void>((resolve) => {
              const req = client.request({ ':path': '/' });
              let got = 0;
              req.on('data', (d: Buffer) => (got += d.length));
              req.on('error', () => {});
              req.on('close', () => {
                if (got === BODY) whole++;
                else broken++;
                resolve();
              });
            }),
          ),
        );
        client.destroy();
      }
      assert.equal(written, 20, 'a notice for every fifth stream');
      assert.equal(goaways.length, written, 'each notice read by the client as a GOAWAY');
      assert.ok(goaways.every((last) => last === 2 ** 31 - 1), `every notice names no last stream (${goaways.join(', ')})`);
      assert.deepEqual({ whole, broken, sessionErrors }, { whole: 100, broken: 0, sessionErrors: 0 });
    } finally {
      server.close();
    }
  });

  test('on TLS nothing is written (a second writer on a TLS socket aborts the process), and the answer says so', async () => {
    const server = http2.createSecureServer({ key: certs.read(certs.serverKey), cert: certs.read(certs.serverCert) });
    const answered = new Promise<boolean>((resolve) => server.once('session', (session) => session.once('stream', () => resolve(sendShutdownNotice(session)))));
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200 });
      stream.end('ok');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const client = http2.connect(`https://127.0.0.1:${(server.address() as AddressInfo).port}`, { ca: certs.read(certs.caCert), servername: 'kvgate' });
    try {
      client.on('error', () => {});
      let goaways = 0;
      client.on('goaway', () => goaways++);
      const req = client.request({ ':path': '/' });
      req.resume();
      await new Promise((resolve) => req.on('close', resolve));
      assert.equal(await answered, false);
      assert.equal(goaways, 0);
    } finally {
      client.destroy();
      server.close();
    }
  });
});
