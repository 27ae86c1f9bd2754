/**
 * The hand-encoded full-duplex echo (src/extproc/streamed-reply.ts) writes the bytes protobufjs
 * writes for the same reply, for bodies whose lengths cross every varint width, in both
 * directions, with and without end_of_stream; any other reply, or one carrying one more field,
 * goes through protobufjs unchanged. End to end, a body echoed in many chunks written back to
 * back (each encoded into the one reused buffer) comes back byte for byte.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import type { ProcessingResponse } from '../../src/extproc/messages.js';
import { extProcPackageDefinition, extProcServiceDefinition } from '../../src/extproc/proto.js';
import { encodeStreamedReply, withStreamedReplies } from '../../src/extproc/streamed-reply.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { harness, headersMsg } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const plain = extProcServiceDefinition()['Process']!;
const fast = withStreamedReplies(extProcServiceDefinition())['Process']!;
const protobufjs = (m: ProcessingResponse) => Buffer.from(plain.responseSerialize(m));
const handEncoded = (m: ProcessingResponse) => Buffer.from(fast.responseSerialize(m));
const streamed = (dir: 'request_body' | 'response_body', body: Buffer, eos: boolean): ProcessingResponse =>
  ({ [dir]: { response: { body_mutation: { streamed_response: { body, end_of_stream: eos } } } } }) as ProcessingResponse;

describe('hand-encoded streamed_response', () => {
  test('the same bytes as protobufjs, at every varint width of the body and of each message around it', () => {
    for (const n of [0, 1, 113, 114, 127, 128, 16_360, 16_383, 16_384, 65_536, 2_097_151, 2_097_152]) {
      for (const dir of ['request_body', 'response_body'] as const) {
        for (const eos of [false, true]) {
          const body = Buffer.alloc(n, n % 251);
          const m = streamed(dir, body, eos);
          assert.ok(handEncoded(m).equals(protobufjs(m)), `${dir} ${n} bytes eos=${eos}`);
        }
      }
    }
  });

  test('random bodies decode back to themselves', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 3000 }), fc.boolean(), fc.constantFrom('request_body', 'response_body') as fc.Arbitrary<'request_body' | 'response_body'>, (bytes, eos, dir) => {
        const m = streamed(dir, Buffer.from(bytes), eos);
        const wire = handEncoded(m);
        assert.ok(wire.equals(protobufjs(m)), "wire.equals(protobufjs(m))");
        const back = plain.responseDeserialize(wire) as { response: string } & Record<string, { response?: { body_mutation?: { streamed_response?: { body: Buffer; end_of_stream: boolean } } } }>;
        assert.equal(back.response, dir);
        assert.ok(back[dir]?.response?.body_mutation?.streamed_response?.body.equals(Buffer.from(bytes)), "back[dir]?.response?.body_mutation?.streamed_response?.body.equals(Buffer.from(bytes))");
        assert.equal(back[dir]?.response?.body_mutation?.streamed_response?.end_of_stream, eos);
      }),
      { numRuns: 300 },
    );
  });

  test('the messages on its path have the fields it writes, and no others (a new field in proto/ must reach the encoder)', () => {
    const fields = (name: string) =>
      (extProcPackageDefinition()[`envoy.service.ext_proc.v3.${name}`] as unknown as { type: { field: Array<{ name: string; number: number }> } }).type.field.map((f) => `${f.name}=${f.number}`);
    assert.deepEqual(fields('StreamedBodyResponse'), ['body=1', 'end_of_stream=2']);
    assert.ok(fields('BodyMutation').includes('streamed_response=3'), "fields('BodyMutation').includes('streamed_response=3')");
    assert.ok(fields('CommonResponse').includes('body_mutation=3'), "fields('CommonResponse').includes('body_mutation=3')");
    assert.deepEqual(fields('BodyResponse'), ['response=1']);
    assert.ok(fields('ProcessingResponse').includes('request_body=3') && fields('ProcessingResponse').includes('response_body=4'), "fields('ProcessingResponse').includes('request_body=3') && fields('ProcessingResponse').includes('response_body=4')");
  });

  test('every other reply, and a streamed one with one more field, goes through protobufjs', () => {
    const body = Buffer.from('chunk');
    const others: ProcessingResponse[] = [
      { request_headers: { response: { status: 'CONTINUE' } } },
      { request_body: { response: { status: 'CONTINUE' } } },
      { ...streamed('request_body', body, true), dynamic_metadata: { fields: { a: { stringValue: 'b' } } } },
      { request_body: { response: { status: 'CONTINUE', body_mutation: { streamed_response: { body, end_of_stream: true } } } } },
      { request_body: { response: { header_mutation: { remove_headers: ['x'] }, body_mutation: { streamed_response: { body, end_of_stream: true } } } } },
      { request_body: { response: { body_mutation: { body } } } },
      { immediate_response: { status: { code: 429 }, body: Buffer.from('shed') } },
    ];
    for (const m of others) assert.ok(handEncoded(m).equals(protobufjs(m)), JSON.stringify(m));
    // The hand path writes into a reused buffer; protobufjs's bytes are a buffer of their own.
    const first = Buffer.from(encodeStreamedReply(3, Buffer.from('aaaa'), false));
    encodeStreamedReply(3, Buffer.from('bbbb'), true);
    assert.ok(handEncoded(streamed('request_body', Buffer.from('aaaa'), false)).equals(first));
  });
});

describe('the echo through the gate', () => {
  let g: TestGate;
  let h: EnvoyHarness;
  before(async () => {
    g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] });
    h = harness(g.target);
  });
  after(async () => {
    h.close();
    await g.close(100);
  });

  test('a body of many chunks, echoed back to back, comes back byte for byte', async () => {
    const s = h.openRawStream();
    const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm' };
    s.write({ ...headersMsg(HEADERS, false), protocol_config: { request_body_mode: 'FULL_DUPLEX_STREAMED', response_body_mode: 'FULL_DUPLEX_STREAMED' } } as never);
    // Distinct bytes in every chunk, so a reply overwritten by the next would show.
    const text = Array.from({ length: 9000 }, (_, i) => `${i.toString(36)} é😀 `).join('');
    const body = Buffer.from(JSON.stringify({ user: 'echo', messages: [{ role: 'user', content: text }] }));
    const cut = 20_000;
    for (let at = 0; at < body.length; at += cut) s.write({ request_body: { body: body.subarray(at, at + cut), end_of_stream: at + cut >= body.length } } as never);
    const echoed: Buffer[] = [];
    for (;;) {
      const r = await s.next(5000);
      assert.ok(!isClosed(r) && !isTimedOut(r), "!isClosed(r) && !isTimedOut(r)");
      const sr = r.request_body?.response?.body_mutation?.streamed_response;
      if (!sr) continue;
      echoed.push(sr.body);
      if (sr.end_of_stream) break;
    }
    s.close();
    assert.ok(echoed.length >= 2, "echoed.length >= 2");
    assert.ok(Buffer.concat(echoed).equals(body), "Buffer.concat(echoed).equals(body)");
  });
});
