/**
 * The fake worker's Anthropic Messages and OpenAI Responses endpoints: each API's shapes whole and
 * streamed, the prefix cache shared with chat (one template), stored responses continued with
 * `previous_response_id` on the worker that made them and refused (404) on any other, and a
 * defined answer for bad input.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startFakeWorker, type FakeWorker } from '../../src/fake-worker/server.js';

const FAST = { decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 1e9 };
const SYSTEM = 'You are a careful assistant who answers in full sentences. '.repeat(40); // ~2.4 KB

function post(url: string, path: string, body: unknown): Promise<Response> {
  return fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

/** Named SSE events: [event, parsed data]. */
function events(text: string): Array<[string, Record<string, unknown>]> {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('event: '))
    .map((e) => {
      const [name, data] = e.split('\n');
      return [name!.slice(7), JSON.parse(data!.slice(6)) as Record<string, unknown>];
    });
}

interface Message {
  id: string;
  type: string;
  role: string;
  content: Array<{ type: string; text: string }>;
  stop_reason: string;
  usage: { input_tokens: number; cache_read_input_tokens: number; output_tokens: number };
}

interface ResponseObject {
  id: string;
  object: string;
  status: string;
  previous_response_id: string | null;
  output: Array<{ type: string; content: Array<{ type: string; text: string }> }>;
  usage: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number };
}

describe('fake worker: Anthropic Messages', () => {
  let w: FakeWorker;
  before(async () => {
    w = await startFakeWorker({ ...FAST, id: 'w-msg' });
  });
  after(() => w.close());

  test('a message: Anthropic shape; a second request sharing the system prompt hits the cache', async () => {
    const ask = (q: string) => post(w.url, '/v1/messages', { model: 'llama', max_tokens: 4, system: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }], messages: [{ role: 'user', content: q }] });
    const first = (await (await ask('first question')).json()) as Message;
    assert.equal(first.type, 'message');
    assert.match(first.id, /^msg_[0-9a-f]{32}$/);
    assert.equal(first.role, 'assistant');
    assert.equal(first.content[0]!.type, 'text');
    assert.equal(first.content[0]!.text.length, 16);
    assert.equal(first.stop_reason, 'max_tokens');
    assert.equal(first.usage.cache_read_input_tokens, 0);
    const second = (await (await ask('second question')).json()) as Message;
    assert.ok(second.usage.cache_read_input_tokens >= 500, `cached ${second.usage.cache_read_input_tokens} of the ~600-token system prompt`);
  });

  test('the same conversation over chat completions hits what Messages cached (one chat template)', async () => {
    await post(w.url, '/v1/messages', { max_tokens: 2, system: SYSTEM, messages: [{ role: 'user', content: 'shared' }] });
    const res = await post(w.url, '/v1/chat/completions', { max_tokens: 2, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'shared' }] });
    const body = (await res.json()) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
    assert.ok(body.usage.prompt_tokens_details.cached_tokens >= body.usage.prompt_tokens - 20, "body.usage.prompt_tokens_details.cached_tokens >= body.usage.prompt_tokens - 20");
  });

  test('streamed: message_start, content_block_delta per token, message_stop', async () => {
    const res = await post(w.url, '/v1/messages', { max_tokens: 3, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const ev = events(await res.text());
    assert.deepEqual(
      ev.map(([n]) => n),
      ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.equal(ev[6]![1]['delta'] && (ev[6]![1]['delta'] as { stop_reason: string }).stop_reason, 'max_tokens');
  });

  test('bad input: Anthropic error shape, 400 with the reason', async () => {
    const cases: unknown[] = ['{"messages": [', { messages: [] }, { messages: 'hi' }, { system: 42, messages: [{ role: 'user', content: 'x' }] }, { system: [{ type: 'image' }], messages: [{ role: 'user', content: 'x' }] }, { messages: [{ role: 'system', content: 'x' }] }, { messages: [{ role: 'user', content: 5 }] }, { max_tokens: 0, messages: [{ role: 'user', content: 'x' }] }, { tools: {}, messages: [{ role: 'user', content: 'x' }] }];
    for (const body of cases) {
      const res = await post(w.url, '/v1/messages', body);
      assert.equal(res.status, 400, JSON.stringify(body));
      const err = (await res.json()) as { type: string; error: { type: string; message: string } };
      assert.equal(err.type, 'error');
      assert.equal(err.error.type, 'invalid_request_error');
      assert.ok(err.error.message.length > 0, "err.error.message.length > 0");
    }
    assert.equal((await fetch(`${w.url}/v1/messages`)).status, 405);
  });
});

describe('fake worker: OpenAI Responses', () => {
  let w: FakeWorker;
  let other: FakeWorker;
  before(async () => {
    w = await startFakeWorker({ ...FAST, id: 'w-resp' });
    other = await startFakeWorker({ ...FAST, id: 'w-other' });
  });
  after(async () => {
    await w.close();
    await other.close();
  });

  test('a response: its id first in the body, stored, continued with previous_response_id and a cache hit on all of it', async () => {
    const res = await post(w.url, '/v1/responses', { model: 'llama', instructions: SYSTEM, input: 'what is a KV cache?', max_output_tokens: 8 });
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /^\{"id":"resp_[0-9a-f]{32}"/, 'the id is the first member');
    const first = JSON.parse(text) as ResponseObject;
    assert.equal(first.object, 'response');
    assert.equal(first.status, 'completed');
    assert.equal(first.output[0]!.content[0]!.type, 'output_text');
    const next = (await (await post(w.url, '/v1/responses', { instructions: SYSTEM, previous_response_id: first.id, input: 'and why does it matter?', max_output_tokens: 2 })).json()) as ResponseObject;
    assert.equal(next.previous_response_id, first.id);
    // The whole first turn (instructions, question and answer) is a prefix of the second prompt.
    assert.ok(next.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens, `${next.usage.input_tokens_details.cached_tokens} >= ${first.usage.input_tokens}`);
  });

  test('another worker does not have it: 404, as vLLM answers', async () => {
    const first = (await (await post(w.url, '/v1/responses', { input: 'hello', max_output_tokens: 1 })).json()) as ResponseObject;
    const res = await post(other.url, '/v1/responses', { previous_response_id: first.id, input: 'again' });
    assert.equal(res.status, 404);
    const err = (await res.json()) as { error: { message: string; code: number } };
    assert.match(err.error.message, /not found/);
    const notStored = (await (await post(w.url, '/v1/responses', { input: 'ephemeral', store: false, max_output_tokens: 1 })).json()) as ResponseObject;
    assert.equal((await post(w.url, '/v1/responses', { previous_response_id: notStored.id, input: 'x' })).status, 404, 'store: false keeps nothing');
  });

  test('streamed: response.created (with the id in its first bytes), deltas, response.completed', async () => {
    const res = await post(w.url, '/v1/responses', { input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }], stream: true, max_output_tokens: 2 });
    const text = await res.text();
    assert.match(text, /^event: response\.created\ndata: \{"type":"response\.created","sequence_number":0,"response":\{"id":"resp_/);
    const ev = events(text);
    assert.deepEqual(ev.map(([n]) => n), ['response.created', 'response.output_text.delta', 'response.output_text.delta', 'response.completed']);
    const id = (ev[0]![1]['response'] as { id: string }).id;
    assert.equal((ev[3]![1]['response'] as { id: string }).id, id);
    assert.equal((await post(w.url, '/v1/responses', { previous_response_id: id, input: 'more', max_output_tokens: 1 })).status, 200, 'a streamed response is stored too');
  });

  test('bad input: OpenAI error shape, 400 with the reason', async () => {
    for (const body of ['nope', { input: 42 }, { input: [] }, { input: [null] }, { input: [{ role: 'user', content: 3 }] }, { input: 'x', instructions: ['x'] }, { input: 'x', previous_response_id: 5 }, { input: 'x', tools: 'x' }, { input: 'x', max_output_tokens: -1 }]) {
      const res = await post(w.url, '/v1/responses', body);
      assert.equal(res.status, 400, JSON.stringify(body));
      const err = (await res.json()) as { error: { message: string; type: string } };
      assert.equal(err.error.type, 'BadRequestError');
    }
  });
});
