/**
 * kvgate's input limits, exactly at their edges: `limits.max_body_bytes` (read at the limit, 413
 * one byte past it), MAX_HEADERS (the 512th header is read, the 513th is not), and the gRPC
 * message limit (body limit + 1 MiB: past it the stream ends RESOURCE_EXHAUSTED and Envoy applies
 * its failure mode). The gate carries on after each.
 */
import assert from 'node:assert/strict';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { after, before, describe, test } from 'node:test';
import { MAX_HEADERS } from '../../src/extproc/headers.js';
import { maxMessageBytesFor } from '../../src/extproc/server.js';
import type { ProcessingRequest } from '../../src/extproc/messages.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { chat, harness, headersMsg, routedCluster } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { FALLBACK_CLUSTER, problemWith } from '../helpers/load.js';

const LIMIT = 64 * 1024;
let g: TestGate;
let h: EnvoyHarness;
before(async () => {
  g = await startTestGate({ limits: { max_body_bytes: LIMIT }, workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }] });
  h = harness(g.target, { extProcOverride: { messageTimeoutMs: 10_000 } });
});
after(async () => {
  h.close();
  await g.close(100);
});

/** A JSON body carrying a user id, padded to exactly `bytes`. */
function bodyOf(bytes: number): string {
  const base = JSON.stringify({ user: 'edge', pad: '' });
  const body = JSON.stringify({ user: 'edge', pad: 'p'.repeat(bytes - base.length) });
  assert.equal(Buffer.byteLength(body), bytes);
  return body;
}

const post = (body: string | Buffer) => ({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body });

describe('limits at their edges', () => {
  test('a body of exactly limits.max_body_bytes is read; one byte more is the gate’s 413', async () => {
    const at = await h.request(post(bodyOf(LIMIT)));
    assert.equal(problemWith(at), undefined);
    const last = g.results.at(-1)!;
    assert.equal(last.key?.source, 'body_user');
    const over = await h.request(post(bodyOf(LIMIT + 1)));
    assert.equal(over.kind === 'local' && over.status, 413);
    assert.equal(over.kind === 'local' && over.details, 'kvgate_body_too_large');
  });

  test(`the ${MAX_HEADERS}th header is read, the ${MAX_HEADERS + 1}th is not`, async () => {
    for (const [pads, keyed] of [[MAX_HEADERS - 1, true], [MAX_HEADERS, false]] as const) {
      const headers: Record<string, string> = {};
      for (let i = 0; i < pads; i++) headers[`x-pad-${i}`] = 'v';
      headers['x-session-id'] = 'counted';
      const s = h.openRawStream();
      s.write(headersMsg(headers, true) as never);
      const ev = await s.next(5000);
      assert.ok(!isTimedOut(ev) && !isClosed(ev) && routedCluster(ev), 'routed either way');
      assert.equal(g.results.at(-1)!.key?.kind, keyed ? 'session' : undefined, `session header at position ${pads + 1}`);
      s.end();
    }
  });

  test('a message over the gRPC limit ends the stream RESOURCE_EXHAUSTED; Envoy fails open; the gate carries on', async () => {
    const grpcLimit = maxMessageBytesFor(LIMIT);
    const s = h.openRawStream();
    s.write(headersMsg({ ':method': 'POST', ':path': '/v1/chat/completions' }, false) as never);
    await s.next(5000);
    s.write({ request_body: { body: Buffer.alloc(grpcLimit + 1, 0x61), end_of_stream: true } } as ProcessingRequest);
    const ev = await s.next(5000);
    assert.ok(!isTimedOut(ev) && isClosed(ev), "!isTimedOut(ev) && isClosed(ev)");
    assert.equal(ev.status.code, GrpcStatus.RESOURCE_EXHAUSTED);
    // Just under it, the body reaches the gate, which answers 413 itself.
    const under = await h.request(post(Buffer.alloc(grpcLimit - 1024, 0x61)));
    assert.equal(under.kind === 'local' && under.status, 413);
    // Through Envoy (fail-open), a body between the two limits is served by the fallback route.
    const over = await h.request(post(Buffer.alloc(grpcLimit + 1, 0x61)));
    assert.equal(over.kind, 'upstream');
    assert.equal(over.cluster, FALLBACK_CLUSTER);
    assert.equal(problemWith(await h.request(chat({ session: 'after-limits' }))), undefined);
  });
});
