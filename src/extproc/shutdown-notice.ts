/**
 * HTTP/2's graceful-shutdown notice (RFC 9113 §6.8): a GOAWAY whose last stream id is 2^31-1, which
 * asks the client to open no new streams on the connection while every stream it has already sent,
 * or sends before it reads the notice, is still served.
 *
 * nghttp2 has that notice (`nghttp2_submit_shutdown_notice`), but Node does not expose it: Node's
 * `Http2Session.goaway()` submits a plain GOAWAY, and once nghttp2 has sent any GOAWAY that is not a
 * notice it ignores the HEADERS of every new stream (`session_allow_incoming_new_stream`,
 * lib/nghttp2_session.c). Every stream Envoy sends in the round trip before it reads that GOAWAY is
 * then lost: neither served nor refused until the final GOAWAY refuses it, and Envoy retries no
 * ext_proc stream. So the notice is written here as the 17 bytes it is, on the connection's socket,
 * beside nghttp2, which never learns of it and keeps accepting streams.
 *
 * Safe only where two writers may share the socket. On a plain TCP (or Unix) socket each write is
 * one libuv write request, written whole and in order, and Node's HTTP/2 hands the socket whole
 * frames per request (`Http2Session::SendPendingData` writes everything nghttp2 serialised in one
 * go): the notice lands between two frames (test/extproc/shutdown-notice.test.ts writes it into
 * DATA in full flow). A TLS socket's writer takes one write at a time and aborts the process on a
 * second (`TLSWrap::DoWrite`, "Assertion failed: !current_write_"), so on TLS, and wherever the
 * socket cannot be found (Node keeps it under a private symbol), nothing is written and the caller
 * falls back to Node's GOAWAY.
 */
import type * as http2 from 'node:http2';
import * as net from 'node:net';
import * as tls from 'node:tls';

/** The notice: a 9-byte frame header (length 8, type GOAWAY, no flags, stream 0), last stream 2^31-1, NO_ERROR. */
const NOTICE = Buffer.from([0, 0, 8, 0x07, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);

/** Node's own reference to the session's socket (`kSocket` in lib/internal/http2/core.js). */
function socketOf(session: http2.Http2Session): net.Socket | undefined {
  const sym = Object.getOwnPropertySymbols(session).find((s) => s.description === 'socket');
  const socket = sym === undefined ? undefined : (session as unknown as Record<symbol, unknown>)[sym];
  return socket instanceof net.Socket ? socket : undefined;
}

/**
 * Writes the shutdown notice to `session`'s peer. True when it went out; false when it could not
 * be written safely here (TLS, no socket found, the socket closing): the caller then does without.
 */
export function sendShutdownNotice(session: http2.Http2Session): boolean {
  const socket = socketOf(session);
  if (!socket || socket instanceof tls.TLSSocket || !socket.writable || socket.destroyed || session.closed || session.destroyed) return false;
  try {
    socket.write(NOTICE);
    return true;
  } catch {
    return false;
  }
}
