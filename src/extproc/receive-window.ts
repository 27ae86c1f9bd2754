/**
 * Opens the HTTP/2 flow-control windows Envoy may fill before kvgate acknowledges what it read.
 *
 * A grpc-js server advertises HTTP/2's 65,535-byte windows, per stream and for the whole
 * connection, and offers no option to raise them (the client side has
 * `grpc-node.flow_control_window`; an open pull request upstream would add it to servers). Envoy then sends
 * a 400 KB body in 64 KiB pieces, each after kvgate's event loop has read the one before and
 * nghttp2 has answered with a WINDOW_UPDATE: six or more round trips per body, each as long as a
 * busy event loop takes to turn, and every stream of a connection shares the one 64 KiB connection
 * window. And kvgate retires each connection within a second (DEFAULTS.connectionAgeMs), so every
 * new one starts from the small windows again.
 *
 * So after each bind every session the server accepts advertises `streamBytes` as its initial
 * stream window (SETTINGS_INITIAL_WINDOW_SIZE) and opens its connection window to
 * `connectionBytes` (a WINDOW_UPDATE on stream 0) before any DATA can arrive. Neither lets more in
 * than kvgate already accepts: grpc-js pauses a stream after each message until its reader takes
 * it, kvgate's reader always takes it at once, and a message longer than
 * `grpc.max_receive_message_length` is refused from its length prefix. The windows set how fast a
 * peer gets there, not how much a connection may hold.
 *
 * One thing the small windows also did: Node's HTTP/2 stops reading a connection while one of its
 * own writes is in progress (Http2Session::MaybeStopReading, src/node_http2.cc). Against a peer
 * that does the same and whose windows let it push more than the socket buffers hold, both can
 * stop reading at once and wait forever: a Node client with Envoy's 16 MiB windows streaming 400
 * KB full-duplex bodies against this server did. Envoy's connections keep reading while they
 * write (a full write buffer only tells its streams to stop producing:
 * ConnectionImpl::onUnderlyingConnectionAboveWriteBufferHighWatermark, Envoy's
 * source/common/http/http2/codec_impl.h), so kvgate's write always completes and it reads again; kvgate's own Node-based
 * stand-ins for Envoy open less for that reason (the test harness HTTP/2's 64 KiB, the bench's
 * load client 1 MiB). Not verified against a running Envoy.
 */
import type * as http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';
import { DEFAULTS } from '../config/defaults.js';
import { onNewSessions } from './http2-servers.js';

export interface ReceiveWindows {
  streamBytes: number;
  connectionBytes: number;
}

/** HTTP/2's largest window (2^31 - 1). */
const MAX_WINDOW = 2 ** 31 - 1;

/** kvgate's windows for a server that accepts messages of up to `maxMessageBytes`. */
export function receiveWindows(maxMessageBytes: number): ReceiveWindows {
  const streamBytes = Math.min(MAX_WINDOW, Math.max(65_535, maxMessageBytes));
  return { streamBytes, connectionBytes: Math.min(MAX_WINDOW, Math.max(streamBytes, DEFAULTS.receiveConnectionWindowBytes)) };
}

/** HTTP/2 servers whose sessions get the windows (a second bind must not hook one twice). */
const hooked = new WeakSet<http2.Http2Server>();

/**
 * Opens the windows of every port `server` is bound to; call after each bind. `hidden` when this
 * grpc-js hides its HTTP/2 servers, `refused` when Node refused the stream window's setting on
 * one of them: new connections there keep 64 KiB stream windows (their connection window is
 * still opened).
 */
export function openReceiveWindows(server: grpc.Server, windows: ReceiveWindows): 'opened' | 'hidden' | 'refused' {
  const watch = onNewSessions(server, hooked, (session) => {
    try {
      session.setLocalWindowSize(windows.connectionBytes);
    } catch {
      // A session already closing: nothing to open.
    }
  });
  if (!watch) return 'hidden';
  let refused = false;
  for (const s of watch.servers) {
    // Sessions accepted from now on send it in their first SETTINGS (merged with the server's others).
    try {
      s.updateSettings({ initialWindowSize: windows.streamBytes });
    } catch {
      refused = true;
    }
  }
  return refused ? 'refused' : 'opened';
}
