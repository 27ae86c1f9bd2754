/**
 * A small stand-in for Envoy's ext_proc filter, for the demo: the configuration of
 * envoy/envoy.yaml (request headers SEND, request body BUFFERED, response headers SEND, no
 * response bodies, a 500 ms message timeout by default, failure mode open), for one request at a time:
 *
 *   request_headers ─▶ reply ─▶ request_body (whole, end_of_stream) ─▶ reply with the routing header
 *   … the caller sends the request to that cluster and, at its response headers …
 *   response_headers ─▶ reply ─▶ half-close
 *
 * It is not the test suite's Envoy harness (test/harness/, which checks every protocol rule); it
 * only has to drive a healthy gate the way Envoy does. A timeout, a stream error or a reply of the
 * wrong type is handled as failure mode open handles it: the request goes on without a routing
 * header (Envoy's fallback route).
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProcessingRequest, ReceivedHeaderMutation as HeaderMutation, ReceivedProcessingResponse as ProcessingResponse } from '../extproc/messages.js';
import { EXT_PROC_PROTO, extProcClientConstructor, PROTO_LOADER_OPTIONS } from '../extproc/proto.js';

/** envoy/envoy.yaml's `message_timeout`. */
export const ENVOY_MESSAGE_TIMEOUT_MS = 500;

type ProcessCall = grpc.ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
type Client = grpc.Client & { Process(): ProcessCall };

export interface ClientRequest {
  method: string;
  path: string;
  authority: string;
  headers: Record<string, string>;
  /** Absent: a request without a body (the headers end the stream). */
  body?: Buffer;
}

export type RouteAnswer =
  /** Forward upstream: to `cluster`, or by the fallback route when the gate set no header (undefined). */
  | { kind: 'upstream'; cluster: string | undefined; headers: Record<string, string>; exchange: Exchange }
  /** The gate answered the client itself (a shed, a bad request). */
  | { kind: 'local'; status: number; body: string; headers: Record<string, string> };

/** The rest of one request's ext_proc stream, after the routing decision. */
export interface Exchange {
  /** Tells the gate the upstream's response headers arrived (it releases the request's lease), then ends the stream. */
  responseHeaders(status: number, headers: Record<string, string>): Promise<void>;
  /** Ends the stream without a response (the upstream failed): the gate releases on stream end. */
  abandon(): void;
}

export class EnvoyLikeClient {
  private readonly client: Client;

  constructor(
    target: string,
    private readonly routingHeader: string,
    private readonly messageTimeoutMs = ENVOY_MESSAGE_TIMEOUT_MS,
  ) {
    const Ctor = extProcClientConstructor();
    this.client = new Ctor(target, grpc.credentials.createInsecure()) as unknown as Client;
  }

  /** Connects the gRPC channel (Envoy keeps its connection to the gate open between requests). */
  ready(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => this.client.waitForReady(Date.now() + timeoutMs, (err) => (err ? reject(err) : resolve())));
  }

  close(): void {
    this.client.close();
  }

  async route(req: ClientRequest): Promise<RouteAnswer> {
    const stream = new ReplyQueue(this.client.Process(), this.messageTimeoutMs);
    const headers: Record<string, string> = { ...req.headers };
    // Envoy's early header mutation strips it before the route is picked: a client never
    // chooses its own worker.
    delete headers[this.routingHeader];
    const pseudo = { ':method': req.method, ':path': req.path, ':scheme': 'http', ':authority': req.authority };
    const failOpen = (): RouteAnswer => {
      stream.close();
      return { kind: 'upstream', cluster: undefined, headers, exchange: { responseHeaders: async () => {}, abandon: () => {} } };
    };

    const length: Record<string, string> = req.body ? { 'content-length': String(req.body.length) } : {};
    stream.send({ request_headers: { headers: { headers: headerList({ ...pseudo, ...headers, ...length }) }, end_of_stream: req.body === undefined } });
    let reply = await stream.next();
    if (reply === undefined) return failOpen();
    if (reply.immediate_response) return this.local(stream, reply);
    if (!reply.request_headers) return failOpen();
    applyMutation(headers, reply.request_headers.response?.header_mutation);

    if (req.body !== undefined) {
      stream.send({ request_body: { body: req.body, end_of_stream: true } });
      reply = await stream.next();
      if (reply === undefined) return failOpen();
      if (reply.immediate_response) return this.local(stream, reply);
      if (!reply.request_body) return failOpen();
      applyMutation(headers, reply.request_body.response?.header_mutation);
    }

    return {
      kind: 'upstream',
      cluster: headers[this.routingHeader],
      headers,
      exchange: {
        responseHeaders: async (status, respHeaders) => {
          stream.send({ response_headers: { headers: { headers: headerList({ ':status': String(status), ...respHeaders }) }, end_of_stream: false } });
          await stream.next();
          stream.close();
        },
        abandon: () => stream.close(),
      },
    };
  }

  private local(stream: ReplyQueue, reply: ProcessingResponse): RouteAnswer {
    stream.close();
    const ir = reply.immediate_response!;
    const headers: Record<string, string> = {};
    applyMutation(headers, ir.headers);
    return { kind: 'local', status: statusNumber(ir.status?.code), body: ir.body ? Buffer.from(ir.body).toString('utf8') : '', headers };
  }
}

/** One Process call as a queue of replies; `next()` gives undefined on timeout, error or close. */
class ReplyQueue {
  private readonly replies: ProcessingResponse[] = [];
  private waiter: ((r: ProcessingResponse | undefined) => void) | undefined;
  private over = false;

  constructor(
    private readonly call: ProcessCall,
    private readonly timeoutMs: number,
  ) {
    call.on('data', (r: ProcessingResponse) => {
      if (this.waiter) {
        const w = this.waiter;
        this.waiter = undefined;
        w(r);
      } else this.replies.push(r);
    });
    const end = () => {
      this.over = true;
      this.waiter?.(undefined);
      this.waiter = undefined;
    };
    call.on('status', end);
    // A failed call also emits 'error'; without a listener it would be thrown.
    call.on('error', end);
  }

  send(msg: ProcessingRequest): void {
    if (!this.over) this.call.write(msg);
  }

  next(): Promise<ProcessingResponse | undefined> {
    const queued = this.replies.shift();
    if (queued) return Promise.resolve(queued);
    if (this.over) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        resolve(undefined);
      }, this.timeoutMs);
      this.waiter = (r) => {
        clearTimeout(timer);
        resolve(r);
      };
    });
  }

  /** Envoy's close: END_STREAM, then reset, leaving nothing open. */
  close(): void {
    if (this.over) return;
    this.over = true;
    this.call.end();
    this.call.cancel();
  }
}

function headerList(headers: Record<string, string>): Array<{ key: string; raw_value: Buffer }> {
  return Object.entries(headers).map(([key, v]) => ({ key, raw_value: Buffer.from(v, 'latin1') }));
}

function headerValue(h: { value?: string; raw_value?: Buffer | Uint8Array }): string {
  return h.raw_value && h.raw_value.length > 0 ? Buffer.from(h.raw_value).toString('latin1') : (h.value ?? '');
}

function applyMutation(headers: Record<string, string>, m: HeaderMutation | null | undefined): void {
  for (const name of m?.remove_headers ?? []) delete headers[name.toLowerCase()];
  for (const s of m?.set_headers ?? []) if (s.header) headers[s.header.key.toLowerCase()] = headerValue(s.header);
}

let statusByName: Map<string, number> | undefined;

/** envoy.type.v3.StatusCode arrives as its enum name ('TooManyRequests'); map it back to a number. */
function statusNumber(code: unknown): number {
  if (typeof code === 'number') return code;
  if (!statusByName) {
    const def = protoLoader.loadSync(EXT_PROC_PROTO, PROTO_LOADER_OPTIONS)['envoy.type.v3.StatusCode'] as protoLoader.EnumTypeDefinition | undefined;
    const values = (def?.type as { value?: Array<{ name: string; number: number }> } | undefined)?.value ?? [];
    statusByName = new Map(values.map((v) => [v.name, v.number]));
  }
  return statusByName.get(String(code)) ?? (Number(code) || 500);
}
