/**
 * kvgate opens its HTTP/2 receive windows on every connection Envoy makes (src/extproc/receive-window.ts):
 * a stream's window holds the longest message kvgate accepts, the connection's
 * DEFAULTS.receiveConnectionWindowBytes, so Envoy sends a body without waiting for window updates.
 * Read here as Envoy's HTTP/2 client reads them: the server's SETTINGS and its connection
 * WINDOW_UPDATE. grpc-js alone advertises 65,535 bytes for both.
 */
import assert from 'node:assert/strict';
import * as http2 from 'node:http2';
import { describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { startNoopServer } from '../../src/bench/noop-server.js';
import * as grpc from '@grpc/grpc-js';
import { http2ServersOf } from '../../src/extproc/http2-servers.js';
import { openReceiveWindows, receiveWindows } from '../../src/extproc/receive-window.js';
import { maxMessageBytesFor } from '../../src/extproc/server.js';
import { startTestGate } from '../helpers/gate.js';

/** The stream window the server advertises and the connection window it opens, as a client sees them. */
async function windowsOf(target: string): Promise<{ stream: number; connection: number }> {
  const session = http2.connect(`http://${target}`);
  session.on('error', () => {});
  try {
    const settings = await new Promise<http2.Settings>((resolve) => session.once('remoteSettings', resolve));
    // The connection's WINDOW_UPDATE follows the SETTINGS: wait until it has been read.
    const deadline = Date.now() + 2000;
    while ((session.state.remoteWindowSize ?? 0) <= 65_535 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    return { stream: settings.initialWindowSize ?? 65_535, connection: session.state.remoteWindowSize ?? 65_535 };
  } finally {
    session.destroy();
  }
}

describe('HTTP/2 receive windows', () => {
  test("each of Envoy's connections gets a stream window of the longest message kvgate takes and a connection window of 32 MiB", async () => {
    const maxBody = 3 * 1024 * 1024;
    const g = await startTestGate({ limits: { max_body_bytes: maxBody }, workers: [{ id: 'w1', cluster: 'w1' }] });
    try {
      const maxMessage = maxMessageBytesFor(maxBody);
      assert.ok(maxMessage > maxBody, 'a message holds the longest body and its headers');
      const expected = receiveWindows(maxMessage);
      assert.deepEqual(expected, { streamBytes: maxMessage, connectionBytes: DEFAULTS.receiveConnectionWindowBytes });
      // Two connections: every session is opened, not only the first.
      for (let i = 0; i < 2; i++) assert.deepEqual(await windowsOf(g.target), { stream: expected.streamBytes, connection: expected.connectionBytes });
    } finally {
      await g.close(100);
    }
  });

  test("the bench's no-op ceiling opens the same windows, so the two wait on the same transport", async () => {
    const noop = await startNoopServer(9 * 1024 * 1024);
    try {
      const expected = receiveWindows(9 * 1024 * 1024);
      assert.deepEqual(await windowsOf(`127.0.0.1:${noop.port}`), { stream: expected.streamBytes, connection: expected.connectionBytes });
    } finally {
      await noop.close();
    }
  });

  test('says why it could not open them: servers hidden by grpc-js, or the setting refused by Node', async () => {
    assert.equal(openReceiveWindows({} as unknown as grpc.Server, receiveWindows(1 << 20)), 'hidden');
    const server = new grpc.Server();
    await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))));
    try {
      for (const s of http2ServersOf(server)!.keys()) {
        s.updateSettings = () => {
          throw new Error('refused');
        };
      }
      assert.equal(openReceiveWindows(server, receiveWindows(1 << 20)), 'refused');
      // Hooked once: a second call finds nothing new to open.
      assert.equal(openReceiveWindows(server, receiveWindows(1 << 20)), 'opened');
    } finally {
      server.forceShutdown();
    }
  });

  test('windows stay within what HTTP/2 allows', () => {
    assert.deepEqual(receiveWindows(1000), { streamBytes: 65_535, connectionBytes: DEFAULTS.receiveConnectionWindowBytes });
    assert.deepEqual(receiveWindows(2 ** 40), { streamBytes: 2 ** 31 - 1, connectionBytes: 2 ** 31 - 1 });
  });
});
