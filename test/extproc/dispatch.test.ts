/**
 * The per-message dispatch of an ext_proc stream (src/extproc/stream.ts, `enqueue`): a message
 * that arrives while none is being handled is answered at once, synchronously when nothing in it
 * waits; one that arrives while a decision is pending waits for it, so replies leave in the order
 * the messages came; a step that fails, synchronously or not, ends the stream once, and nothing
 * after it is answered.
 */
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { parseConfig } from '../../src/config/load.js';
import type { Gate, GateResult } from '../../src/gate/gate.js';
import type { ProcessingResponse, ReceivedProcessingRequest } from '../../src/extproc/messages.js';
import { ExtProcStream } from '../../src/extproc/stream.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { RequestTelemetry } from '../../src/telemetry/request-telemetry.js';
import { silentLogger } from '../helpers/logger.js';

const config = parseConfig({ workers: [{ id: 'w1', cluster: 'worker_1' }] });

/** A gate whose decisions are held until the test lets them go. */
function heldGate() {
  const pending: Array<(r: GateResult) => void> = [];
  const routed: Array<{ body?: unknown }> = [];
  const released: string[] = [];
  const gate = {
    currentConfig: config,
    route: (request: { body?: unknown }) => {
      routed.push(request);
      return new Promise<GateResult>((resolve) => pending.push(resolve));
    },
    release: async (lease: { id: string }) => void released.push(lease.id),
  } as unknown as Gate;
  const decide = (i = 0) =>
    pending[i]!({
      kind: 'route',
      pool: 'default',
      worker: 'w1',
      cluster: 'worker_1',
      outcome: 'new',
      lease: { id: 'lease-1', pool: 'default', worker: 'w1', shared: false },
      key: undefined,
      degraded: false,
      attempts: 1,
      explanation: {} as never,
      storeMs: 0,
    });
  return { gate, decide, pending, released, routed };
}

/** A duplex call as grpc-js hands it over: messages in as 'data', replies out through write(). */
function fakeCall() {
  const call = new EventEmitter() as EventEmitter & { metadata: grpc.Metadata; writable: boolean; write(m: ProcessingResponse): boolean; end(): void };
  const out: string[] = [];
  let ended = 0;
  const errors: unknown[] = [];
  call.metadata = new grpc.Metadata();
  call.writable = true;
  call.write = (m) => {
    const kind = Object.keys(m).find((k) => k !== 'dynamic_metadata')!;
    const routed = (m as Record<string, { response?: { header_mutation?: { set_headers?: unknown[] } } }>)[kind]?.response?.header_mutation?.set_headers;
    out.push(routed ? `${kind}:routed` : kind);
    return true;
  };
  call.end = () => void ended++;
  call.on('error', (e: unknown) => errors.push(e));
  return { call, out, errors, ended: () => ended };
}

const headers = (extra: Array<[string, string]> = []): ReceivedProcessingRequest =>
  ({
    request: 'request_headers',
    request_headers: {
      headers: { headers: [[':method', 'POST'], [':path', '/v1/chat/completions'], ...extra].map(([key, v]) => ({ key, value: '', raw_value: Buffer.from(v!) })) },
      end_of_stream: false,
    },
  }) as never;
const body = (): ReceivedProcessingRequest => ({ request: 'request_body', request_body: { body: Buffer.from('{"messages":[]}'), end_of_stream: true } }) as never;
const responseHeaders = (): ReceivedProcessingRequest => ({ request: 'response_headers', response_headers: { headers: { headers: [] }, end_of_stream: false } }) as never;

function open() {
  const g = heldGate();
  const c = fakeCall();
  let closed = 0;
  const stream = new ExtProcStream(c.call as never, g.gate, silentLogger(), {
    telemetry: new RequestTelemetry(new Metrics({ processMetrics: false }), new Map()),
    streamId: 1,
    onClose: () => void closed++,
  });
  // What the stream still holds of the request (private; read here for the body's lifetime).
  const held = () => (stream as unknown as { request?: { body?: unknown; path?: string } }).request;
  return { ...g, ...c, closed: () => closed, held };
}

const tick = () => new Promise<void>((r) => setImmediate(r));

describe('ext_proc message dispatch', () => {
  test('a message that needs no await is answered before its data event returns', () => {
    const s = open();
    s.call.emit('data', headers());
    assert.deepEqual(s.out, ['request_headers'], 'the headers reply, written synchronously');
  });

  test('messages that arrive while a decision is pending wait for it: replies keep the order of the messages', async () => {
    const s = open();
    s.call.emit('data', headers());
    s.call.emit('data', body());
    // A peer that does not wait for the body reply (pipelining): these must not overtake it.
    s.call.emit('data', responseHeaders());
    s.call.emit('end');
    await tick();
    assert.deepEqual(s.out, ['request_headers'], 'nothing after the pending decision is answered yet');
    assert.equal(s.ended(), 0, 'the stream is not ended under a pending decision');
    s.decide();
    await tick();
    assert.deepEqual(s.out, ['request_headers', 'request_body:routed', 'response_headers']);
    assert.equal(s.ended(), 1, 'ended once, after the last reply');
    assert.equal(s.closed(), 1);
    assert.deepEqual(s.released, ['lease-1'], 'the lease is released at the response headers');
  });

  test('once the decision is out, the next message is again answered at once', async () => {
    const s = open();
    s.call.emit('data', headers());
    s.call.emit('data', body());
    s.decide();
    await tick();
    s.call.emit('data', responseHeaders());
    assert.deepEqual(s.out, ['request_headers', 'request_body:routed', 'response_headers']);
    s.call.emit('end');
    assert.equal(s.ended(), 1, 'an idle stream ends at once');
  });

  test('a protocol violation handled at once ends the stream once; later messages get no reply', async () => {
    const s = open();
    s.call.emit('data', headers());
    s.call.emit('data', headers());
    assert.equal(s.errors.length, 1);
    assert.equal((s.errors[0] as { code: number }).code, grpc.status.INVALID_ARGUMENT);
    s.call.emit('data', body());
    s.call.emit('end');
    await tick();
    assert.deepEqual(s.out, ['request_headers']);
    assert.equal(s.closed(), 1);
    assert.deepEqual(s.pending.length, 0, 'no decision was started after the stream failed');
  });

  test('a protocol violation queued behind a pending decision fails the stream after the decision is answered', async () => {
    const s = open();
    s.call.emit('data', headers());
    s.call.emit('data', body());
    s.call.emit('data', headers());
    await tick();
    assert.equal(s.errors.length, 0, 'not judged before its turn');
    s.decide();
    await tick();
    assert.deepEqual(s.out, ['request_headers', 'request_body:routed']);
    assert.equal(s.errors.length, 1);
    assert.equal(s.closed(), 1);
    assert.deepEqual(s.released, ['lease-1'], 'the failed stream gives its lease back');
  });

  test('the body is let go once decided: the stream, which lives as long as the answer, does not hold the prompt', async () => {
    const s = open();
    s.call.emit('data', headers());
    s.call.emit('data', body());
    await tick();
    assert.ok(s.routed[0]?.body, 'the decision was handed the body');
    assert.ok(s.held()?.body, 'held while the decision is pending');
    s.decide();
    await tick();
    assert.deepEqual(s.out, ['request_headers', 'request_body:routed']);
    assert.equal(s.held()?.body, undefined, 'no body held after the decision');
    assert.equal(s.held()?.path, '/v1/chat/completions', 'what later messages read (the path) is kept');
    assert.ok(s.routed[0]?.body, "the decision's own view is untouched");
  });

  test('cancelled (cancelled and close, no end) while the decision is pending: the lease it then takes is released once, nothing is written', async () => {
    const s = open();
    s.call.emit('data', headers());
    s.call.emit('data', body());
    await tick();
    assert.equal(s.pending.length, 1, 'the decision is pending');
    // grpc-js on a cancelled call: 'cancelled', then 'close'; never 'end'.
    s.call.emit('cancelled');
    s.call.emit('close');
    assert.equal(s.closed(), 1);
    assert.deepEqual(s.released, [], 'nothing to release yet');
    s.decide();
    await tick();
    await tick();
    assert.deepEqual(s.released, ['lease-1'], 'the lease taken after the cancel is released, exactly once');
    assert.deepEqual(s.out, ['request_headers'], 'no routing reply on the cancelled stream');
    // Nothing later (a stray event) releases it again.
    s.call.emit('close');
    await tick();
    assert.deepEqual(s.released, ['lease-1']);
  });
});
