/**
 * The ceiling `kvgate bench` compares the gate against: an ext_proc server on the same stack
 * (grpc-js, the same service definition and decoding, the same message limit) that answers every
 * message with CONTINUE at once. What kvgate does beyond it (keys, policy, store, header mutation)
 * is what the ratio measures.
 */
import * as grpc from '@grpc/grpc-js';
import type { ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from '../extproc/messages.js';
import { extProcServiceDefinition } from '../extproc/proto.js';

export interface NoopServer {
  port: number;
  close(): Promise<void>;
}

const CONTINUE = { status: 'CONTINUE' as const };

function replyFor(msg: ProcessingRequest): ProcessingResponse | undefined {
  switch (msg.request) {
    case 'request_headers':
      return { request_headers: { response: CONTINUE } };
    case 'request_body':
      return { request_body: { response: CONTINUE } };
    case 'response_headers':
      return { response_headers: { response: CONTINUE } };
    case 'response_body':
      return { response_body: { response: CONTINUE } };
    case 'request_trailers':
      return { request_trailers: {} };
    case 'response_trailers':
      return { response_trailers: {} };
    default:
      return undefined;
  }
}

export async function startNoopServer(maxMessageBytes: number, host = '127.0.0.1'): Promise<NoopServer> {
  const server = new grpc.Server({ 'grpc.max_receive_message_length': maxMessageBytes });
  server.addService(extProcServiceDefinition(), {
    Process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
      call.on('data', (msg: ProcessingRequest) => {
        const reply = replyFor(msg);
        if (reply) call.write(reply);
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host}:0`, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
  });
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 2000);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}
