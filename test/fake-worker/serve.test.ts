/**
 * The fake worker as an OpenAI-compatible model server: completions whole and streamed, its prefix
 * cache as a client sees it (usage.prompt_tokens_details.cached_tokens), its batch and queue, and
 * a defined answer for every kind of bad input.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startFakeWorker, type FakeWorker } from '../../src/fake-worker/server.js';
import { waitFor } from '../helpers/envoy.js';

const FAST = { decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 1e9 };

function post(url: string, path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body), ...init });
}

interface ChatCompletion {
  object: string;
  model: string;
  choices: Array<{ message: { role: string; content: string }; finish_reason: string }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; prompt_tokens_details: { cached_tokens: number } };
}

/** The `data:` payloads of an SSE body, in order. */
function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6));
}

const SYSTEM = 'You are a careful assistant. '.repeat(40); // ~1,120 characters: many whole blocks

describe('fake worker: completions', () => {
  let w: FakeWorker;
  before(async () => {
    w = await startFakeWorker({ ...FAST, id: 'w-serve', model: 'served-model' });
  });
  after(() => w.close());

  test('a chat completion: OpenAI shape, the worker id header, usage counted at 4 characters a token', async () => {
    const res = await post(w.url, '/v1/chat/completions', { model: 'llama', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 5 });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-fake-worker-id'), 'w-serve');
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    const body = (await res.json()) as ChatCompletion;
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.model, 'llama');
    assert.equal(body.choices[0]!.message.role, 'assistant');
    assert.equal(body.choices[0]!.message.content.length, 5 * 4);
    assert.equal(body.choices[0]!.finish_reason, 'length');
    assert.equal(body.usage.completion_tokens, 5);
    assert.equal(body.usage.total_tokens, body.usage.prompt_tokens + 5);
    assert.ok(body.usage.prompt_tokens > 0, "body.usage.prompt_tokens > 0");
  });

  test('without max_tokens it writes its default output and stops; a request naming no model gets the served one', async () => {
    const body = (await (await post(w.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] })).json()) as ChatCompletion;
    assert.equal(body.usage.completion_tokens, 16);
    assert.equal(body.choices[0]!.finish_reason, 'stop');
    assert.equal(body.model, 'served-model');
  });

  test('a repeated prefix is served from the cache, and a conversation hits on its whole previous turn', async () => {
    const first = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'question one' }];
    const a = (await (await post(w.url, '/v1/chat/completions', { messages: first, max_tokens: 8 })).json()) as ChatCompletion;
    assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0, 'a cold prompt');
    const again = (await (await post(w.url, '/v1/chat/completions', { messages: first, max_tokens: 8 })).json()) as ChatCompletion;
    assert.ok(again.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens - 16, `the same prompt hits on all its whole blocks (${again.usage.prompt_tokens_details.cached_tokens})`);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens, 'the last token is always computed');

    const next = [...first, { role: 'assistant', content: a.choices[0]!.message.content }, { role: 'user', content: 'question two' }];
    const b = (await (await post(w.url, '/v1/chat/completions', { messages: next, max_tokens: 8 })).json()) as ChatCompletion;
    assert.ok(
      b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens + 8 - 16,
      `the next turn hits on the previous prompt and its answer (${b.usage.prompt_tokens_details.cached_tokens} of ${b.usage.prompt_tokens})`,
    );

    const other = [{ role: 'system', content: 'Something else entirely. '.repeat(40) }, { role: 'user', content: 'question one' }];
    const c = (await (await post(w.url, '/v1/chat/completions', { messages: other, max_tokens: 8 })).json()) as ChatCompletion;
    assert.equal(c.usage.prompt_tokens_details.cached_tokens, 0, 'a different prefix misses');
  });

  test('a streamed chat completion: SSE chunks (role first, one per token, finish reason), the usage chunk, [DONE]', async () => {
    const res = await post(w.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'stream please' }], max_tokens: 4, stream: true, stream_options: { include_usage: true } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    assert.equal(res.headers.get('x-fake-worker-id'), 'w-serve');
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { object: string; choices: Array<{ delta: { role?: string; content?: string }; finish_reason: string | null }>; usage?: ChatCompletion['usage'] });
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'), "chunks.every((c) => c.object === 'chat.completion.chunk')");
    assert.equal(chunks[0]!.choices[0]!.delta.role, 'assistant');
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    assert.equal(text.length, 4 * 4);
    const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
    assert.deepEqual(finish.map((c) => c.choices[0]!.finish_reason), ['length']);
    const usage = chunks.at(-1)!;
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage!.completion_tokens, 4);
  });

  test('a stream without include_usage has no usage chunk', async () => {
    const res = await post(w.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 2, stream: true });
    const data = sseData(await res.text());
    assert.ok(data.slice(0, -1).every((d) => !('usage' in (JSON.parse(d) as object))));
  });

  test('text completions, whole and streamed', async () => {
    const whole = (await (await post(w.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 3 })).json()) as {
      object: string;
      choices: Array<{ text: string; finish_reason: string }>;
      usage: ChatCompletion['usage'];
    };
    assert.equal(whole.object, 'text_completion');
    assert.equal(whole.choices[0]!.text.length, 12);
    assert.equal(whole.usage.prompt_tokens, 4); // 16 characters
    const res = await post(w.url, '/v1/completions', { prompt: ['Once upon a time'], max_tokens: 3, stream: true });
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { object: string; choices: Array<{ text: string; finish_reason: string | null }> });
    assert.ok(chunks.every((c) => c.object === 'text_completion'), "chunks.every((c) => c.object === 'text_completion')");
    assert.equal(chunks.map((c) => c.choices[0]!.text).join('').length, 12);
    assert.equal(chunks.at(-1)!.choices[0]!.finish_reason, 'length');
  });

  test('GET /v1/models lists the served model; GET /health is 200', async () => {
    const models = (await (await fetch(`${w.url}/v1/models`)).json()) as { object: string; data: Array<{ id: string; max_model_len: number }> };
    assert.equal(models.object, 'list');
    assert.equal(models.data[0]!.id, 'served-model');
    assert.equal(models.data[0]!.max_model_len, 400_000);
    assert.equal((await fetch(`${w.url}/health`)).status, 200);
  });
});

describe('fake worker: time, batch and queue', () => {
  test('time to first token is the uncached prompt at the prefill rate', async () => {
    const w = await startFakeWorker({ decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 4000 });
    try {
      const prompt = 'x'.repeat(4096); // 1,024 tokens, 64 whole blocks: 256 ms uncached
      const t = performance.now();
      const res = await post(w.url, '/v1/completions', { prompt, max_tokens: 1 });
      await res.json();
      assert.ok(performance.now() - t >= 250, 'a cold 1,024-token prompt at 4,000 tokens/s takes at least 256 ms');
      const again = (await (await post(w.url, '/v1/completions', { prompt, max_tokens: 1 })).json()) as ChatCompletion;
      assert.equal(again.usage.prompt_tokens_details.cached_tokens, 1023, 'all of it but the last token is cached the second time');
    } finally {
      await w.close();
    }
  });

  test('past max batch requests wait; past the waiting limit the answer is 503; a client that leaves frees its slot', async () => {
    const w = await startFakeWorker({ ...FAST, decodeMsPerToken: 20, maxBatch: 1, maxWaiting: 1 });
    try {
      const leaving = new AbortController();
      const first = post(w.url, '/v1/completions', { prompt: 'a', max_tokens: 1000 }, { signal: leaving.signal }).catch((e: Error) => e);
      await waitFor(() => w.engine.requestsRunning === 1, 3000, 'the first request running');
      const second = post(w.url, '/v1/completions', { prompt: 'b', max_tokens: 1 });
      await waitFor(() => w.engine.requestsWaiting === 1, 3000, 'the second request waiting');
      const third = await post(w.url, '/v1/completions', { prompt: 'c', max_tokens: 1 });
      assert.equal(third.status, 503);
      const err = (await third.json()) as { error: { message: string; code: number } };
      assert.match(err.error.message, /waiting queue is full/);
      leaving.abort();
      assert.ok((await first) instanceof Error, "(await first) instanceof Error");
      const served = await second;
      assert.equal(served.status, 200, 'the waiting request runs once the first one is gone');
      await served.json();
      await waitFor(() => w.engine.requestsRunning === 0 && w.engine.kvUsage === 0, 3000, 'nothing left running or pinned');
    } finally {
      await w.close();
    }
  });
});

describe('fake worker: bad input', () => {
  let w: FakeWorker;
  before(async () => {
    w = await startFakeWorker({ ...FAST, kvCapacityTokens: 1000, maxBodyBytes: 64 * 1024 });
  });
  after(() => w.close());

  const cases: Array<[string, string, unknown, number, RegExp]> = [
    ['malformed JSON', '/v1/chat/completions', '{"messages": [', 400, /not valid JSON/],
    ['a JSON array', '/v1/chat/completions', '[1, 2]', 400, /JSON object/],
    ['no messages', '/v1/chat/completions', { model: 'llama' }, 400, /messages/],
    ['an empty message list', '/v1/chat/completions', { messages: [] }, 400, /messages/],
    ['a message without a role', '/v1/chat/completions', { messages: [{ content: 'x' }] }, 400, /role/],
    ['content of the wrong type', '/v1/chat/completions', { messages: [{ role: 'user', content: 42 }] }, 400, /content/],
    ['max_tokens 0', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }, 400, /max_tokens/],
    ['max_tokens as text', '/v1/completions', { prompt: 'x', max_tokens: '9' }, 400, /max_tokens/],
    ['n = 2', '/v1/completions', { prompt: 'x', n: 2 }, 400, /one choice/],
    ['stream as text', '/v1/completions', { prompt: 'x', stream: 'yes' }, 400, /stream/],
    ['a model that is not a string', '/v1/completions', { prompt: 'x', model: 7 }, 400, /model/],
    ['no prompt', '/v1/completions', { max_tokens: 2 }, 400, /prompt/],
    ['a batch of prompts', '/v1/completions', { prompt: ['a', 'b'] }, 400, /one prompt/],
    ['a prompt past the context length', '/v1/completions', { prompt: 'x'.repeat(4000), max_tokens: 10 }, 400, /maximum context length is 1000 tokens/],
    ['a body over the size limit', '/v1/completions', { prompt: 'x'.repeat(70 * 1024) }, 413, /larger than/],
  ];
  for (const [name, path, body, status, message] of cases) {
    test(`${name}: ${status} with an OpenAI error body`, async () => {
      const res = await post(w.url, path, body);
      assert.equal(res.status, status);
      const err = (await res.json()) as { error: { message: string; type: string; code: number } };
      assert.match(err.error.message, message);
      assert.equal(err.error.code, status);
    });
  }

  test('a body that is not UTF-8: 400', async () => {
    const res = await fetch(`${w.url}/v1/completions`, { method: 'POST', body: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]) });
    assert.equal(res.status, 400);
  });

  test('unknown paths are 404, wrong methods 405; the worker keeps serving', async () => {
    assert.equal((await fetch(`${w.url}/v2/nothing`)).status, 404);
    assert.equal((await fetch(`${w.url}/v1/chat/completions`)).status, 405);
    assert.equal((await fetch(`${w.url}/metrics`, { method: 'DELETE' })).status, 405);
    const ok = await post(w.url, '/v1/completions', { prompt: 'still here', max_tokens: 1 });
    assert.equal(ok.status, 200);
  });
});
