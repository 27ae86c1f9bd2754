/**
 * Retires each of Envoy's HTTP/2 connections after a while (DEFAULTS.connectionAgeMs, see there
 * for why), refusing as few streams as Node's HTTP/2 allows (see the limit below).
 *
 * grpc-js has `grpc.max_connection_age_ms`, but it sends its "no new streams" GOAWAY (last stream
 * id 2^31-1) and the final GOAWAY (the last stream it has seen) back to back. A stream the client
 * opened before it read the first one arrives after the second, and the client's HTTP/2 layer
 * fails it with REFUSED_STREAM ("UNAVAILABLE: Stream refused by server"). Envoy does not retry an
 * ext_proc stream unless its GrpcService has a retry_policy (Grpc::AsyncStreamImpl takes the
 * parent's retry policy only when one is configured; source/common/grpc/async_client_impl.cc), so
 * each such stream is an HTTP request without affinity (failure_mode_allow) or failed (fail-closed,
 * as behind Istio's InferencePool). The bench saw ~4% of streams refused at saturation on a busy
 * machine.
 *
 * A connection is retired at its age or at its stream count, whichever comes first: age alone
 * holds only while Envoy opens fewer than about a thousand streams a second on one connection
 * (nghttp2's reset budget, DEFAULTS.connectionMaxStreams); a fast gate behind a busy Envoy sees
 * more.
 *
 * How a connection is retired. First HTTP/2's shutdown notice (./shutdown-notice.ts: a GOAWAY
 * naming no last stream, written beside nghttp2 so that nghttp2 keeps accepting streams), then a
 * PING; Envoy answers the PING after it has read the notice and moved new streams to a new
 * connection, so once the answer is in, every stream Envoy sent on this one has arrived, and the
 * final GOAWAY (the last stream kvgate saw) refuses none. gRPC's C and Go cores shut down the
 * same way. Without the answer the final GOAWAY goes after a notice period
 * (DEFAULTS.goawayNoticeMs), as Envoy drains its own connections.
 *
 * Where the notice cannot be written (TLS, or a Node that hides the socket), the first GOAWAY is
 * Node's `Http2Session.goaway()`, a plain GOAWAY, and the final one follows after the notice
 * period. The limit there: nghttp2 ignores a stream whose HEADERS arrive after any GOAWAY it sent
 * that is not a shutdown notice (`session_allow_incoming_new_stream`, lib/nghttp2_session.c), so a
 * stream Envoy opened within a round trip of the first GOAWAY waits for the final one, which
 * refuses it. (A PING after Node's GOAWAY was sometimes left unsent with it for the whole wait
 * under Node 20, so that path keeps a plain delay.)
 */
import * as http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';
import { http2ServersOf, onNewSessions } from './http2-servers.js';
import { sendShutdownNotice } from './shutdown-notice.js';

/** The largest stream id: the first GOAWAY names no last stream, it only asks for no new streams. */
const ALL_STREAMS = 2 ** 31 - 1;

export interface ConnectionAgeOptions {
  /** Connections are retired after this, ±10% so a fleet's connections do not all turn over at once. */
  ageMs: number;
  /** ... or once this many streams have been opened on them, whichever comes first. */
  maxStreams: number;
  /** Between the first GOAWAY (no new streams, please) and the final one. */
  noticeMs: number;
  /** Streams still open this long after the final GOAWAY are cut (the connection is destroyed). */
  graceMs: number;
  /** A stopping gate waits until no connection has come or gone for this long (retireAll). */
  quietMs: number;
}

/** Whether this grpc-js lets kvgate retire connections itself (checked before choosing how). */
export function canRetireConnections(server: grpc.Server): boolean {
  return http2ServersOf(server) !== undefined;
}

/** HTTP/2 servers whose sessions are already watched (a second bind must not watch them twice). */
const hooked = new WeakSet<http2.Http2Server>();

/** The connections of one bind, being retired as they age. */
export interface RetiringConnections {
  /** Stops retiring (the timers of live connections are cleared). */
  stop(): void;
  /**
   * Retires every open connection now, the way an aged one is (notice, PING, final GOAWAY), for a
   * stopping gate: resolves once each has had its final GOAWAY, within the notice period.
   */
  retireAll(): Promise<void>;
}

/**
 * Starts retiring the connections of every port `server` is bound to. Call after each bind.
 */
export function retireConnections(server: grpc.Server, opts: ConnectionAgeOptions): RetiringConnections {
  const timers = new Set<NodeJS.Timeout>();
  /** Runs `fn` after `ms` unless the returned function is called first. */
  const later: Later = (ms, fn) => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms).unref();
    timers.add(t);
    return () => {
      clearTimeout(t);
      timers.delete(t);
    };
  };
  /**
   * Every connection not closed yet (a stopping gate waits for all of them), with the way to
   * retire it at once while it is not retiring yet (for retireAll), null once it is.
   */
  const open = new Map<http2.ServerHttp2Session, (() => void) | null>();
  /** Set by retireAll: the gate is stopping, so a connection accepted now is retired at once. */
  let stopping = false;
  /** When a connection last arrived or closed (retireAll waits for this to go quiet). */
  let lastChange = 0;
  const onSession = (session: http2.ServerHttp2Session) => {
    open.set(session, null);
    lastChange = Date.now();
    session.once('close', () => {
      open.delete(session);
      lastChange = Date.now();
    });
    if (stopping) {
      // Envoy opens a new connection when it reads the notice on an old one; while the gate still
      // listens, that one gets the notice too.
      retire(session, opts, later);
      return;
    }
    const jitter = (Math.random() * 2 - 1) * (opts.ageMs / 10);
    let streams = 0;
    const onStream = () => {
      if (++streams >= opts.maxStreams) retireOnce();
    };
    const retireOnce = () => {
      if (open.has(session)) open.set(session, null);
      session.off('stream', onStream);
      cancelAge();
      retire(session, opts, later);
    };
    const cancelAge = later(opts.ageMs + jitter, retireOnce);
    open.set(session, retireOnce);
    session.once('close', cancelAge);
    // Each stream ends with one reset from Envoy: counting streams counts the resets to come.
    session.on('stream', onStream);
  };
  const watch = onNewSessions(server, hooked, onSession);
  return {
    stop() {
      watch?.stop();
      for (const t of timers) clearTimeout(t);
      timers.clear();
    },
    async retireAll() {
      stopping = true;
      const hadConnections = open.size > 0;
      for (const retireOnce of [...open.values()]) retireOnce?.();
      if (!hadConnections) return;
      // Each final GOAWAY goes once its PING is answered, at the latest after the notice period:
      // the ones retired now, those already retiring by age, and those accepted meanwhile. Envoy
      // opens its next connection when it reads a notice, about when it answers the PING, so that
      // one arrives up to a round trip and a handshake after the last final GOAWAY went: the wait
      // ends once no connection has come or gone for `quietMs` (DEFAULTS.shutdownQuietMs says
      // why). A connection accepted after that is closed by the server's shutdown at once.
      const start = Date.now();
      const deadline = start + opts.noticeMs + opts.quietMs;
      // Pending: not closing yet, or destroyed (a silent peer's, by retire()) but not yet gone: its
      // 'close' comes a tick later. Ended before that, the server's tryShutdown asks it to close,
      // which Node ignores on a destroyed session without calling back (Http2Session.close), and
      // the stop waited out its whole grace for it. A gracefully closing one is left to tryShutdown.
      const pending = () => [...open.keys()].some((s) => s.destroyed || !s.closed);
      const settled = () => !pending() && Date.now() - Math.max(lastChange, start) >= opts.quietMs;
      while (!settled() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    },
  };
}

type Later = (ms: number, fn: () => void) => () => void;

function retire(session: http2.ServerHttp2Session, opts: ConnectionAgeOptions, later: Later): void {
  if (session.closed || session.destroyed) return;
  // close() sends the final GOAWAY (the last stream seen) and ends the connection once its streams have.
  const finalGoaway = () => {
    if (session.closed || session.destroyed) return;
    session.close();
    session.once('close', later(opts.graceMs, () => session.destroy()));
  };
  // The notice is written beside nghttp2 and must not overtake kvgate's SETTINGS: a connection
  // whose peer has not acknowledged them yet (one accepted a moment ago, as during a shutdown) is
  // retired once it has. Not later than a notice period, though: a peer that never acknowledges
  // (one that connected and went silent, or whose network died at once) was otherwise never
  // retired. grpc-js closes no idle connection by default, so it stayed open for as long as the
  // gate ran, and a stopping gate waited its whole grace period for it. Without a single stream
  // it loses nothing by being cut at once (nghttp2's graceful close did not end such a
  // connection: it waits to write to a peer that reads nothing); with streams, they get the
  // final GOAWAY and the grace period as any retired connection's do.
  if (session.pendingSettingsAck) {
    const onAck = () => {
      giveUp();
      retire(session, opts, later);
    };
    const giveUp = later(opts.noticeMs, () => {
      session.off('localSettings', onAck);
      if (session.state.lastProcStreamID === 0) session.destroy();
      else finalGoaway();
    });
    session.once('localSettings', onAck);
    session.once('close', giveUp);
    return;
  }
  const notice = sendShutdownNotice(session);
  if (!notice) {
    try {
      session.goaway(http2.constants.NGHTTP2_NO_ERROR, ALL_STREAMS);
    } catch {
      session.destroy();
      return;
    }
  }
  // The final GOAWAY after the notice period at the latest: on the fallback always, after the
  // notice when no PING answer comes (a peer that does not answer PINGs).
  const cancel = later(opts.noticeMs, finalGoaway);
  session.once('close', cancel);
  if (!notice) return;
  // Envoy answers the PING after it has read the notice, so every stream it sent before moving
  // to a new connection is on the wire ahead of the answer, and nghttp2 has taken it in when the
  // answer arrives: then the final GOAWAY refuses nothing. (finalGoaway does nothing a second time.)
  try {
    session.ping(() => {
      cancel();
      finalGoaway();
    });
  } catch {
    // The session is closing: the timer, or its close, ends it.
  }
}
