/**
 * Replies built once and encoded once (src/extproc/responses.ts): the serializer must hand grpc-js
 * exactly the bytes protobufjs makes for the same reply built afresh, for every constant and every
 * routing reply, on the first call and on every later one; and only those frozen objects may take
 * the shortcut, so a reply built per request is always encoded from what it says now.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import type { ProcessingResponse } from '../../src/extproc/messages.js';
import { CONTINUE, CONTINUE_REPLY, continueStripping, routeReply, routeTo, withConstantReplies } from '../../src/extproc/responses.js';
import { withStreamedReplies } from '../../src/extproc/streamed-reply.js';

const plain = extProcServiceDefinition()['Process']!;
const wrapped = withConstantReplies(withStreamedReplies(extProcServiceDefinition()))['Process']!;
const protobufjs = (m: ProcessingResponse) => Buffer.from(plain.responseSerialize(m));
const served = (m: ProcessingResponse) => Buffer.from(wrapped.responseSerialize(m));

/** A header name Envoy accepts and a cluster name (any printable latin1 text). */
const headerName = fc.stringMatching(/^x-[a-z0-9-]{1,20}$/);
const clusterName = fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 40 });
const phase = fc.constantFrom('request_headers' as const, 'request_body' as const);

describe('constant replies', () => {
  test('each CONTINUE reply encodes as protobufjs encodes a fresh one, every time', () => {
    for (const kind of ['request_headers', 'request_body', 'response_headers', 'response_body'] as const) {
      const fresh = protobufjs({ [kind]: { response: { status: 'CONTINUE' } } });
      for (let i = 0; i < 3; i++) assert.deepEqual(served(CONTINUE_REPLY[kind]), fresh, `${kind}, call ${i + 1}`);
    }
  });

  test('a routing reply is one object per phase, header and cluster, encoded as routeTo would be', () => {
    fc.assert(
      fc.property(phase, headerName, clusterName, clusterName, (p, h, c1, c2) => {
        const r1 = routeReply(p, h, c1);
        assert.equal(routeReply(p, h, c1), r1, 'the same object for the same answer');
        const fresh1 = protobufjs(p === 'request_headers' ? { request_headers: { response: routeTo(h, c1) } } : { request_body: { response: routeTo(h, c1) } });
        assert.deepEqual(served(r1), fresh1);
        assert.deepEqual(served(r1), fresh1, 'and again from the kept encoding');
        const r2 = routeReply(p, h, c2);
        const fresh2 = protobufjs(p === 'request_headers' ? { request_headers: { response: routeTo(h, c2) } } : { request_body: { response: routeTo(h, c2) } });
        assert.deepEqual(served(r2), fresh2, 'another cluster: its own bytes');
        assert.equal(c1 === c2, served(r1).equals(served(r2)));
        const other = p === 'request_headers' ? 'request_body' : 'request_headers';
        assert.notDeepEqual(served(routeReply(other, h, c1)), served(r1), 'the phase is part of the answer');
      }),
      { numRuns: 200 },
    );
  });

  test('shared replies are frozen all the way down', () => {
    const r = routeReply('request_body', 'x-kvgate-cluster', 'worker_1');
    const before = served(r);
    assert.throws(() => {
      (r.request_body as { response: { clear_route_cache: boolean } }).response.clear_route_cache = false;
    }, TypeError);
    assert.throws(() => {
      r.request_body!.response!.header_mutation!.set_headers!.push({});
    }, TypeError);
    assert.throws(() => {
      (CONTINUE as { status: string }).status = 'CONTINUE_AND_REPLACE';
    }, TypeError);
    assert.deepEqual(served(r), before);
  });

  test('a reply built per request is encoded from what it says at the time, never from a kept encoding', () => {
    const reply: ProcessingResponse = { request_body: { response: routeTo('x-kvgate-cluster', 'worker_1') } };
    const first = served(reply);
    assert.deepEqual(first, protobufjs(reply));
    reply.request_body!.response = routeTo('x-kvgate-cluster', 'worker_2');
    assert.deepEqual(served(reply), protobufjs(reply));
    assert.notDeepEqual(served(reply), first);
    const stripping: ProcessingResponse = { request_headers: { response: continueStripping(['x-kvgate-cluster']) } };
    assert.deepEqual(served(stripping), protobufjs(stripping));
  });
});
