/**
 * The ceiling `kvgate bench` compares the gate against: an ext_proc server on the same stack
 * (grpc-js, the same service definition and decoding, the same message limit) that answers every
 * message with CONTINUE at once (in FULL_DUPLEX_STREAMED, declared in protocol_config: the headers
 * at once and every body chunk echoed as it comes, the least that mode allows). What kvgate does
 * beyond it (keys, policy, store, header mutation, holding the body) is what the ratio measures.
 */
import * as grpc from '@grpc/grpc-js';
import type { ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from '../extproc/messages.js';
import { extProcServiceDefinition } from '../extproc/proto.js';
import { openReceiveWindows, receiveWindows } from '../extproc/receive-window.js';

export interface NoopServer {
  port: number;
  close(): Promise<void>;
}

const CONTINUE = { status: 'CONTINUE' as const };

function streamed(body: ProcessingRequest['request_body']): ProcessingResponse['request_body'] {
  return { response: { body_mutation: { streamed_response: { body: body?.body ?? Buffer.alloc(0), end_of_stream: body?.end_of_stream ?? false } } } };
}

function replyFor(msg: ProcessingRequest, duplex: { request: boolean; response: boolean }): ProcessingResponse | undefined {
  switch (msg.request) {
    case 'request_headers':
      return { request_headers: { response: CONTINUE } };
    case 'request_body':
      return { request_body: duplex.request ? streamed(msg.request_body) : { response: CONTINUE } };
    case 'response_headers':
      return { response_headers: { response: CONTINUE } };
    case 'response_body':
      return { response_body: duplex.response ? streamed(msg.response_body) : { response: CONTINUE } };
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
      let duplex: { request: boolean; response: boolean } | undefined;
      call.on('data', (msg: ProcessingRequest) => {
        duplex ??= {
          request: msg.protocol_config?.request_body_mode === 'FULL_DUPLEX_STREAMED',
          response: msg.protocol_config?.response_body_mode === 'FULL_DUPLEX_STREAMED',
        };
        const reply = replyFor(msg, duplex);
        if (reply) call.write(reply);
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host}:0`, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
  });
  // The windows kvgate opens, so the ceiling and the gate wait on the same transport.
  openReceiveWindows(server, receiveWindows(maxMessageBytes));
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
