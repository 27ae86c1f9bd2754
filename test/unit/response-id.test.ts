import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MAX_ID_SCAN_BYTES, readableResponse, ResponseIdReader } from '../../src/extproc/response-id.js';

const b = (s: string) => Buffer.from(s);

describe('reading a Responses answer’s id from its first bytes', () => {
  test('a JSON body: the first id, not an output item’s', () => {
    const r = new ResponseIdReader();
    assert.deepEqual(r.feed(b('{"id": "resp_abc", "object":"response","output":[{"id":"msg_1"}]}')), { id: 'resp_abc' });
  });

  test('server-sent events: the response.created event’s response id', () => {
    const r = new ResponseIdReader();
    const ev = 'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_x1","output":[]}}\n\n';
    assert.deepEqual(r.feed(b(ev)), { id: 'resp_x1' });
  });

  test('an id split across chunks (even inside its quotes) is assembled', () => {
    const whole = '{"id":"resp_split_here","object":"response"}';
    for (let cut = 1; cut < whole.length; cut++) {
      const r = new ResponseIdReader();
      const first = r.feed(b(whole.slice(0, cut)));
      const found = first === 'more' ? r.feed(b(whole.slice(cut))) : first;
      assert.deepEqual(found, { id: 'resp_split_here' }, `cut at ${cut}`);
    }
  });

  test('gives up after a bounded prefix; empty chunks and garbage never throw', () => {
    const r = new ResponseIdReader();
    assert.equal(r.feed(undefined), 'more');
    assert.equal(r.feed(Buffer.alloc(0)), 'more');
    assert.equal(r.feed(Buffer.from([0xff, 0xfe, 0x00, 0x22])), 'more');
    assert.equal(r.feed(b('x'.repeat(MAX_ID_SCAN_BYTES))), 'none');
    // An id only past the limit is not looked for.
    const late = new ResponseIdReader();
    assert.equal(late.feed(b(' '.repeat(MAX_ID_SCAN_BYTES) + '{"id":"resp_late"}')), 'none');
  });

  test('ids with escapes, line breaks or over 256 characters are not taken', () => {
    assert.equal(new ResponseIdReader().feed(b('{"id":"a\\"b"}' + ' '.repeat(MAX_ID_SCAN_BYTES))), 'none');
    assert.equal(new ResponseIdReader().feed(b(`{"id":"${'r'.repeat(300)}"}` + ' '.repeat(MAX_ID_SCAN_BYTES))), 'none');
  });

  test('only successful, uncompressed responses are read', () => {
    const h = (o: Record<string, string>) => new Map(Object.entries(o));
    assert.equal(readableResponse(h({ ':status': '200' })), true);
    assert.equal(readableResponse(h({ ':status': '201', 'content-encoding': 'identity' })), true);
    assert.equal(readableResponse(h({ ':status': '200', 'content-encoding': 'gzip' })), false);
    assert.equal(readableResponse(h({ ':status': '404' })), false);
    assert.equal(readableResponse(h({ ':status': 'x' })), false);
    assert.equal(readableResponse(h({})), false);
  });
});
