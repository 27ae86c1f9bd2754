/**
 * The bench's load client opens 1 MiB HTTP/2 receive windows (src/bench/load-client.ts says why
 * not Envoy's 16 MiB): what a bare HTTP/2 server sees of its SETTINGS and connection
 * WINDOW_UPDATE. With grpc-js's defaults both would be 65,535 bytes.
 */
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { LoadClient, STAND_IN_WINDOW_BYTES } from '../../src/bench/load-client.js';

/** A bare HTTP/2 server that ends every stream with grpc-status UNIMPLEMENTED and reports what each client opened. */
async function windowProbe(): Promise<{ target: string; opened: Promise<{ stream: number; connection: number }>; close(): Promise<void> }> {
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  const opened = new Promise<{ stream: number; connection: number }>((resolve) => {
    server.on('session', (session) => {
      sessions.add(session);
      session.on('remoteSettings', (s) => {
        // The connection window arrives as a WINDOW_UPDATE right after the SETTINGS: give it a turn.
        setTimeout(() => resolve({ stream: s.initialWindowSize ?? 65_535, connection: session.state.remoteWindowSize ?? 65_535 }), 50);
      });
    });
  });
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '12', 'grpc-message': 'probe' }));
    stream.end();
    stream.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    target: `127.0.0.1:${port}`,
    opened,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  };
}

test("the bench's load client opens 1 MiB stream and connection windows", async () => {
  const probe = await windowProbe();
  const client = new LoadClient(probe.target);
  const run = client.start({ target: probe.target, mode: 'closed', concurrency: 1, bodyBytes: 2048, seed: 1, thread: 0 });
  try {
    assert.deepEqual(await probe.opened, { stream: STAND_IN_WINDOW_BYTES, connection: STAND_IN_WINDOW_BYTES });
  } finally {
    await run.stop();
    await probe.close();
  }
});
