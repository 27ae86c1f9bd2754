/**
 * An ext_proc server that sits between the harness (Envoy) and a real kvgate and passes each
 * Process stream through, message by message, while a test decides what happens to each of the
 * gate's replies: forward it, hold it (the gate is slow: Envoy's message timer runs out), or
 * forward a rewritten one (e.g. a fallback reply without clear_route_cache). Requests and
 * half-closes go to the gate unchanged, so the gate's own state (leases) behaves as in service.
 */
import * as grpc from '@grpc/grpc-js';
import { extProcClientConstructor, extProcServiceDefinition } from '../../src/extproc/proto.js';
import type { ProcessingRequest, ProcessingResponse } from '../../src/extproc/messages.js';

/** What to do with the gate's n-th reply on a stream (0-based): forward, rewrite, or hold it back. */
export type ReplyPolicy = (reply: ProcessingResponse, index: number) => ProcessingResponse | 'hold';

export interface ExtProcProxy {
  target: string;
  /** The policy for streams opened from now on. */
  setPolicy(policy: ReplyPolicy): void;
  close(): void;
}

type ServerCall = grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>;
type ClientCall = grpc.ClientDuplexStream<ProcessingRequest, ProcessingResponse>;

export async function startExtProcProxy(gateTarget: string, initial: ReplyPolicy = (r) => r): Promise<ExtProcProxy> {
  let policy = initial;
  const Client = extProcClientConstructor();
  const client = new Client(gateTarget, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    Process(md?: grpc.Metadata): ClientCall;
  };
  const server = new grpc.Server();
  server.addService(extProcServiceDefinition(), {
    Process: (call: ServerCall) => {
      const streamPolicy = policy;
      const upstream = client.Process(call.metadata);
      let n = 0;
      let held = false;
      upstream.on('data', (reply: ProcessingResponse) => {
        const out = streamPolicy(reply, n++);
        // Once one reply is held, later ones are too: replies keep their order, as a slow gate's would.
        if (out === 'hold' || held) {
          held = true;
          return;
        }
        if (call.writable) call.write(out);
      });
      upstream.on('end', () => {
        if (!held) call.end();
      });
      upstream.on('error', () => {});
      call.on('data', (m: ProcessingRequest) => upstream.write(m));
      call.on('end', () => upstream.end());
      call.on('cancelled', () => upstream.cancel());
      call.on('error', () => upstream.cancel());
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    target: `127.0.0.1:${port}`,
    setPolicy: (p) => {
      policy = p;
    },
    close: () => {
      server.forceShutdown();
      client.close();
    },
  };
}
