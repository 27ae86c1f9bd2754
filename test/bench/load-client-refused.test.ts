/**
 * The bench's Envoy stand-in retries a stream refused before it was processed, as gRPC lets a
 * client do (a transparent retry), whatever its body's size. Such streams occur when a gate
 * retires a connection: grpc-js (the stand-in's transport) refuses a stream itself that it had
 * asked for but not yet written when it read the shutdown notice (nghttp2 starts no stream after
 * a GOAWAY), which Envoy, writing a stream's HEADERS as it opens it, never has. grpc-js retries a
 * call only while its messages fit its retry buffers (1 MiB a call, 16 MiB a channel by default),
 * so among 64 streams of 400 KB bodies some were lost, and the bench counted them as errors
 * ("Stream refused by server").
 *
 * Here the server refuses one stream of a burst of 64 (RST_STREAM REFUSED_STREAM, before
 * answering anything of it): red without the stand-in's larger retry buffers.
 */
import assert from 'node:assert/strict';
import * as http2 from 'node:http2';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { LoadClient } from '../../src/bench/load-client.js';
import type { ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from '../../src/extproc/messages.js';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import { http2ServersOf } from '../../src/extproc/http2-servers.js';

/** The stream of each connection the server refuses: the 60th, one of a burst of 64 the stand-in opens at once. */
const REFUSED_STREAM_ID = 2 * 60 - 1;

/**
 * An ext_proc server that echoes full-duplex bodies, answering each stream from 30 ms after it
 * opened and not before the refusal, and refuses one stream of each connection 20 ms after it
 * opened, before any answer.
 */
async function refusingServer(): Promise<{ target: string; refused: () => number; close(): Promise<void> }> {
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 64 * 1024 * 1024 });
  let refusedOnce = () => {};
  const refusal = new Promise<void>((resolve) => (refusedOnce = resolve));
  server.addService(extProcServiceDefinition(), {
    Process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
      call.on('error', () => {});
      // Nothing is answered before the refusal: once the server answers a stream, a gRPC client
      // may not retry it. Timers alone (30 ms here, 20 ms to the refusal) let a loaded machine
      // answer the stream to be refused first, and the client then rightly reported it lost.
      // (A server that never refused would answer nothing: the test then fails on its refusal count.)
      const answering = Promise.all([new Promise((resolve) => setTimeout(resolve, 30)), refusal]);
      const reply = (r: ProcessingResponse) => void answering.then(() => call.write(r));
      call.on('data', (msg: ProcessingRequest) => {
        if (msg.request === 'request_headers') reply({ request_headers: { response: { status: 'CONTINUE' } } });
        else if (msg.request === 'request_body') reply({ request_body: { response: { body_mutation: { streamed_response: { body: msg.request_body?.body ?? Buffer.alloc(0), end_of_stream: msg.request_body?.end_of_stream ?? false } } } } });
        else if (msg.request === 'response_headers') reply({ response_headers: { response: { status: 'CONTINUE' } } });
      });
      call.on('end', () => void answering.then(() => call.end()));
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  let refused = 0;
  for (const h2 of http2ServersOf(server)?.keys() ?? []) {
    h2.prependListener('session', (session: http2.ServerHttp2Session) => {
      session.prependListener('stream', (stream: http2.ServerHttp2Stream) => {
        if (stream.id !== REFUSED_STREAM_ID) return;
        setTimeout(() => {
          refused++;
          stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
          refusedOnce();
        }, 20);
      });
    });
  }
  return {
    target: `127.0.0.1:${port}`,
    refused: () => refused,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

test('a 400 KB full-duplex stream refused before it was processed is retried, not lost', async () => {
  const server = await refusingServer();
  const client = new LoadClient(server.target);
  const run = client.start({ target: server.target, mode: 'closed', concurrency: 64, bodyBytes: 400 * 1024, bodyMode: 'full_duplex', seed: 1, thread: 0 });
  run.mark();
  // Until the refusal has happened and a few streams have completed, not for a fixed time: on a
  // loaded machine 500 ms of 64 echoed 400 KB streams once completed none. Waiting longer cannot
  // hide a lost stream: stop() drains every stream, and a lost one is an error.
  const deadline = Date.now() + 30_000;
  while ((server.refused() < 1 || run.completed() < 4) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const result = await run.stop();
  await server.close();
  assert.ok(server.refused() >= 1, 'the server refused a stream');
  assert.ok(result.completed >= 4, `${result.completed} streams completed`);
  assert.equal(result.errors, 0, `${result.errors} of ${result.completed + result.errors} streams lost: ${result.errorSamples.join('; ')}`);
});
