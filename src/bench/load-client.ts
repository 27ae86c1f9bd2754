/**
 * A lean Envoy stand-in for load: each HTTP request is one ext_proc stream carrying the messages
 * Envoy sends in the run's request body mode:
 *
 *   buffered (one at a time, each after the previous reply):
 *     request_headers → reply → request_body (whole body) → reply → response_headers → reply → half-close
 *   full_duplex (Envoy 1.35+ FULL_DUPLEX_STREAMED, as behind Istio's InferencePool):
 *     request_headers (+ protocol_config) and every body chunk (64 KiB) at once, without waiting →
 *     headers reply (the routing decision) → streamed body replies up to end_of_stream →
 *     response_headers → reply → half-close
 *
 * Messages are encoded once up front and written as bytes, so the client's own cost per request
 * is the gRPC transport and nothing else; the test harness (test/harness/) is the faithful, slow
 * Envoy, this is the fast one. Latencies go into HDR histograms in microseconds: Node's own
 * (perf_hooks.createHistogram, HdrHistogram_c inside Node), which pass between threads and merge.
 *
 * Two ways to drive it: closed loop (N streams back to back: finds the saturation throughput) and
 * open loop (Poisson arrivals at a fixed rate: latency at a given load, measured from each
 * stream's first write; how late arrivals were sent is recorded apart, as `schedule lag`).
 */
import { createHistogram, performance, type RecordableHistogram } from 'node:perf_hooks';
import * as grpc from '@grpc/grpc-js';
import type { ProcessingRequest, ReceivedProcessingResponse as ProcessingResponse } from '../extproc/messages.js';
import { extProcServiceDefinition } from '../extproc/proto.js';
import { Rng } from '../sim/rng.js';
import { benchRequests, RESPONSE_HEADERS, type BenchRequest } from './bodies.js';

const PROCESS_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';

export interface LoadPlan {
  /** host:port of the ext_proc server. */
  target: string;
  mode: 'closed' | 'open';
  /** closed: streams kept in flight; open: most streams outstanding before arrivals are dropped. */
  concurrency: number;
  /** open: arrivals per second from this client. */
  ratePerS?: number;
  bodyBytes: number;
  /** The request body mode the stream plays (default buffered). */
  bodyMode?: BenchBodyMode;
  /** A header the body reply must set (the gate's routing header); none for the no-op server. */
  expectHeader?: string;
  /** Seeds the bodies (equal for every client thread, so all send the same request set). */
  seed: number;
  /** Which client thread this is: seeds its own order of requests and arrivals. */
  thread: number;
}

/** Counts and histograms (microseconds) of one measured window. */
export interface LoadResult {
  windowMs: number;
  /** Streams that finished with status OK inside the window. */
  completed: number;
  /** Completed streams whose body reply set the expected header (or all, with none expected). */
  routed: number;
  /** Immediate responses (the gate shed the request). */
  shed: number;
  /** Streams that ended with an error status or an unexpected reply. */
  errors: number;
  errorSamples: string[];
  /** Open loop: arrivals not sent because `concurrency` streams were already outstanding. */
  dropped: number;
  meanBodyBytes: number;
  /** Time Envoy waits on ext_proc per request: headers, body and response-headers round trips. */
  added: RecordableHistogram;
  /** The body round trip alone: the routing decision as Envoy sees it. */
  decision: RecordableHistogram;
  /** Open loop: how late each arrival was sent after its scheduled time. */
  scheduleLag: RecordableHistogram;
  /** This client thread's event-loop utilization over the window (1: the client was the limit). */
  clientElu: number;
}

export const BENCH_BODY_MODES = ['buffered', 'full_duplex'] as const;
export type BenchBodyMode = (typeof BENCH_BODY_MODES)[number];
export const isBenchBodyMode = (s: string): s is BenchBodyMode => (BENCH_BODY_MODES as readonly string[]).includes(s);

interface Prepared {
  headers: Buffer;
  /** buffered: one message; full_duplex: the chunks, the last with end_of_stream. */
  body: Buffer[];
  bodyBytes: number;
}

/** Full duplex: the body is sent in pieces of this size, a common read size for Envoy's codecs. */
const DUPLEX_CHUNK_BYTES = 64 * 1024;

/** 1 µs to 10 min at 3 significant digits. */
export function newHistogram(): RecordableHistogram {
  return createHistogram({ lowest: 1, highest: 600_000_000, figures: 3 });
}

/** Requests pre-generated per size: enough distinct bodies for realistic key spread, capped at ~32 MB. */
export function requestCount(bodyBytes: number): number {
  return Math.max(16, Math.min(256, Math.floor((32 * 1024 * 1024) / bodyBytes)));
}

function headerMap(list: ReadonlyArray<readonly [string, string]>) {
  return { headers: list.map(([key, value]) => ({ key, raw_value: Buffer.from(value, 'latin1') })) };
}

/** The bench client's HTTP/2 receive windows (see `newClient`). */
export const STAND_IN_WINDOW_BYTES = 1024 * 1024;

/** How long the end of a run waits for open streams to finish before cutting them. */
const DRAIN_MS = 10_000;

export class LoadClient {
  private readonly serialize: (msg: ProcessingRequest) => Buffer;
  private readonly deserialize: (bytes: Buffer) => ProcessingResponse;
  private readonly prepared = new Map<string, Prepared[]>();
  private readonly responseHeaders: Buffer;

  constructor(private readonly target: string) {
    const method = extProcServiceDefinition()['Process']!;
    this.serialize = method.requestSerialize as (msg: ProcessingRequest) => Buffer;
    this.deserialize = method.responseDeserialize as (bytes: Buffer) => ProcessingResponse;
    this.responseHeaders = this.serialize({ request: 'response_headers', response_headers: { headers: headerMap(RESPONSE_HEADERS), end_of_stream: false } });
  }

  private newClient(): grpc.Client {
    return new grpc.Client(this.target, grpc.credentials.createInsecure(), {
      'grpc.max_send_message_length': -1,
      'grpc.max_receive_message_length': -1,
      // A channel of its own, not one shared through grpc-js's global subchannel pool.
      'grpc.use_local_subchannel_pool': 1,
      // 1 MiB receive windows (stream and connection), not Envoy's 16 MiB and 24 MiB
      // (envoy/config/core/v3/protocol.proto, Http2ProtocolOptions) nor grpc-js's 64 KiB. Node
      // stops reading a connection while one of its writes is in progress
      // (Http2Session::MaybeStopReading, src/node_http2.cc), so this Node client at Envoy's windows
      // and a kvgate whose windows are open (src/extproc/receive-window.ts) both filled the socket
      // with 400 KB full-duplex bodies and waited on each other forever (from 24 streams); Envoy
      // keeps reading. At 1 MiB, 64 such streams ran without a stall, and the echo kvgate sends
      // back waits for a window update every 512 KiB instead of every 32 KiB: closer to Envoy, not
      // equal to it. Only what kvgate sends to the client depends on this window.
      'grpc-node.flow_control_window': STAND_IN_WINDOW_BYTES,
      // A stream refused before the gate processed it is retried on a new connection (gRPC's
      // transparent retry), however large its body. grpc-js refuses such streams itself when a
      // gate retires a connection: those it asked for but had not written yet when it read the
      // shutdown notice (nghttp2 starts no stream after a GOAWAY). Envoy writes a stream's HEADERS
      // as it opens it and has none. grpc-js retries only calls whose messages fit its retry
      // buffers (1 MiB a call, 16 MiB a channel by default): 64 streams of 400 KB did not, and
      // the bench counted "Stream refused by server" errors the gate never saw. These are caps on
      // references to the prepared messages, which are held anyway, not memory of their own.
      'grpc.per_rpc_retry_buffer_size': 64 * 1024 * 1024,
      'grpc.retry_buffer_size': 1024 * 1024 * 1024,
    });
  }

  private requests(bodyBytes: number, seed: number, mode: BenchBodyMode): Prepared[] {
    const key = `${bodyBytes}:${seed}:${mode}`;
    let list = this.prepared.get(key);
    if (!list) {
      list = benchRequests(bodyBytes, requestCount(bodyBytes), seed).map((r: BenchRequest) => {
        if (mode === 'buffered') {
          return {
            headers: this.serialize({ request: 'request_headers', request_headers: { headers: headerMap(r.headers), end_of_stream: false } }),
            body: [this.serialize({ request: 'request_body', request_body: { body: r.body, end_of_stream: true } })],
            bodyBytes: r.body.length,
          };
        }
        const chunks: Buffer[] = [];
        for (let at = 0; at < r.body.length; at += DUPLEX_CHUNK_BYTES) {
          const end = Math.min(r.body.length, at + DUPLEX_CHUNK_BYTES);
          chunks.push(this.serialize({ request: 'request_body', request_body: { body: r.body.subarray(at, end), end_of_stream: end === r.body.length } }));
        }
        return {
          headers: this.serialize({
            request: 'request_headers',
            request_headers: { headers: headerMap(r.headers), end_of_stream: false },
            protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' },
          }),
          body: chunks,
          bodyBytes: r.body.length,
        };
      });
      this.prepared.set(key, list);
    }
    return list;
  }

  /**
   * Runs load until `stop()`; `mark()` starts the measured window (what came before is warm-up).
   * The promise resolves with the window's result once the streams still open have finished.
   */
  start(plan: LoadPlan): { mark(): void; completed(): number; stop(): Promise<LoadResult> } {
    const mode = plan.bodyMode ?? 'buffered';
    const reqs = this.requests(plan.bodyBytes, plan.seed, mode);
    const rng = new Rng(plan.seed * 7919 + plan.thread + 1);
    const expect = plan.expectHeader;
    let added = newHistogram();
    let decision = newHistogram();
    let lag = newHistogram();
    let counters = { completed: 0, routed: 0, shed: 0, errors: 0, dropped: 0, bodyBytes: 0 };
    const errorSamples: string[] = [];
    /** Completions and latencies count inside the window; errors count from the window's start to the end of the drain. */
    let measuring = false;
    let marked = false;
    let stopping = false;
    let outstanding = 0;
    let drained: (() => void) | undefined;
    /** Calls not yet over, so the ones a stuck server never finishes can be cancelled at the end. */
    const open = new Map<grpc.ClientDuplexStream<Buffer, ProcessingResponse>, () => void>();
    // A connection of its own per run: nothing one run left behind can slow the next.
    const client = this.newClient();
    let windowStart = 0;
    let eluStart = performance.eventLoopUtilization();

    const finished = () => {
      outstanding--;
      if (stopping && outstanding === 0) drained?.();
    };

    const fail = (why: string) => {
      if (!marked) return;
      counters.errors++;
      if (errorSamples.length < 5) errorSamples.push(why);
    };

    /** One stream; `then` runs when it is over, however it ended. */
    const stream = (then: () => void) => {
      const r = reqs[Math.floor(rng.next() * reqs.length)]!;
      outstanding++;
      let step = 0;
      let done = false;
      let t0 = 0;
      let tBody = 0;
      let tBodyReply = 0;
      /** Full duplex: when the headers reply (the decision) came; buffered: the body reply. */
      let tDecided = 0;
      let tResp = 0;
      let tRespReply = 0;
      let routed = expect === undefined;
      let shed = false;
      /** Full duplex: body bytes streamed back so far. */
      let echoed = 0;
      const routes = (m: { header_mutation?: { set_headers?: Array<{ header?: { key?: string } | null }> } | null } | null | undefined) =>
        expect === undefined || (m?.header_mutation?.set_headers?.some((h) => h.header?.key === expect) ?? false);
      const call = client.makeBidiStreamRequest(PROCESS_PATH, (b: Buffer) => b, this.deserialize, new grpc.Metadata(), {});
      open.set(call, () => {
        // Cut at the end of the run: counted there, once.
        done = true;
        finished();
        call.cancel();
      });
      const end = (error?: string) => {
        if (done) return;
        done = true;
        open.delete(call);
        if (error !== undefined) {
          fail(error);
          call.cancel();
        } else if (measuring) {
          if (shed) counters.shed++;
          else {
            counters.completed++;
            counters.bodyBytes += r.bodyBytes;
            if (routed) counters.routed++;
            else fail('body reply did not set the routing header');
            added.record(Math.max(1, Math.round((tBodyReply - t0 + (tRespReply - tResp)) * 1000)));
            decision.record(Math.max(1, Math.round(((mode === 'full_duplex' ? tDecided : tBodyReply) - tBody) * 1000)));
          }
        }
        finished();
        then();
      };
      /**
       * The body's last reply came at `now`: send the response headers. Steps 0 and 1 differ by
       * body mode, this and what follows do not. Made once a stream, not once a message: the
       * client's own cost per request stays the transport's.
       */
      const bodyReplied = (now: number) => {
        tBodyReply = now;
        step = 2;
        tResp = performance.now();
        call.write(this.responseHeaders);
      };
      call.on('data', (res: ProcessingResponse) => {
        if (res.response === 'immediate_response') {
          shed = true;
          step = 3;
          call.end();
          return;
        }
        const now = performance.now();
        if (mode === 'full_duplex') {
          if (step === 0 && res.response === 'request_headers') {
            // The headers reply is the decision: it waited for the whole body.
            tDecided = now;
            routed = routes(res.request_headers?.response);
            step = 1;
            return;
          }
          if (step === 1 && res.response === 'request_body' && res.request_body?.response?.body_mutation?.streamed_response) {
            const sr = res.request_body.response.body_mutation.streamed_response;
            echoed += sr.body.length;
            if (sr.end_of_stream) {
              if (echoed !== r.bodyBytes) return end(`echoed ${echoed} of ${r.bodyBytes} body bytes`);
              bodyReplied(now);
            }
            return;
          }
        } else if (step === 0 && res.response === 'request_headers') {
          step = 1;
          tBody = now;
          for (const b of r.body) call.write(b);
          return;
        } else if (step === 1 && res.response === 'request_body') {
          routed = routes(res.request_body?.response);
          bodyReplied(now);
          return;
        }
        if (step === 2 && res.response === 'response_headers') {
          tRespReply = now;
          step = 3;
          call.end();
        } else {
          end(`unexpected ${res.response ?? 'empty'} reply at step ${step}`);
        }
      });
      call.on('status', (s: grpc.StatusObject) => {
        if (s.code === grpc.status.OK && step === 3) end();
        else end(s.code === grpc.status.OK ? `stream closed at step ${step}` : `${grpc.status[s.code]}: ${s.details}`);
      });
      call.on('error', () => {
        // Reported through 'status'.
      });
      t0 = performance.now();
      call.write(r.headers);
      if (mode === 'full_duplex') {
        // Envoy sends the chunks as they arrive, without waiting for the headers reply.
        for (const b of r.body) call.write(b);
        tBody = performance.now();
      }
    };

    let timer: NodeJS.Timeout | undefined;
    if (plan.mode === 'closed') {
      const loop = () => {
        if (!stopping) stream(loop);
      };
      for (let i = 0; i < plan.concurrency; i++) loop();
    } else {
      const rate = plan.ratePerS ?? 0;
      if (!(rate > 0)) throw new Error('open-loop load needs a positive rate');
      let next = performance.now();
      const tick = () => {
        if (stopping) return;
        const now = performance.now();
        while (next <= now) {
          if (outstanding < plan.concurrency) {
            if (measuring) lag.record(Math.max(1, Math.round((now - next) * 1000)));
            stream(() => {});
          } else if (measuring) counters.dropped++;
          next += rng.exp(1000 / rate);
        }
        timer = setTimeout(tick, Math.max(0, next - performance.now()));
      };
      tick();
    }

    return {
      mark: () => {
        added = newHistogram();
        decision = newHistogram();
        lag = newHistogram();
        counters = { completed: 0, routed: 0, shed: 0, errors: 0, dropped: 0, bodyBytes: 0 };
        errorSamples.length = 0;
        measuring = true;
        marked = true;
        windowStart = performance.now();
        eluStart = performance.eventLoopUtilization();
      },
      completed: () => (measuring ? counters.completed : 0),
      stop: async () => {
        const windowMs = performance.now() - windowStart;
        const clientElu = performance.eventLoopUtilization(eluStart).utilization;
        measuring = false;
        stopping = true;
        if (timer) clearTimeout(timer);
        if (outstanding > 0) {
          await new Promise<void>((resolve) => {
            drained = resolve;
            setTimeout(resolve, DRAIN_MS).unref();
          });
        }
        // Streams the server did not finish in time are cut, so none is left holding the
        // connection's flow-control window (or a lease) when the next run starts; each is an error.
        const unfinished = [...open.values()];
        open.clear();
        for (const cut of unfinished) cut();
        client.close();
        if (unfinished.length > 0) {
          counters.errors += unfinished.length;
          if (errorSamples.length < 5) errorSamples.push(`${unfinished.length} streams unfinished ${DRAIN_MS / 1000} s after the run`);
        }
        const result: LoadResult = {
          windowMs,
          completed: counters.completed,
          routed: counters.routed,
          shed: counters.shed,
          errors: counters.errors,
          errorSamples: [...errorSamples],
          dropped: counters.dropped,
          meanBodyBytes: counters.completed > 0 ? counters.bodyBytes / counters.completed : 0,
          added,
          decision,
          scheduleLag: lag,
          clientElu,
        };
        return result;
      },
    };
  }
}
