/**
 * Anthropic Messages, OpenAI Responses and prompt_cache_key through the Envoy harness playing
 * envoy/envoy.yaml: the keys each shape yields reach the decision (shared system prompts meet on
 * one worker, each API's session fields stick), and bad bodies get their defined answers.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { GateResult } from '../../src/gate/gate.js';
import type { HarnessRequest } from '../harness/envoy-harness.js';
import { chat, harness } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const WORKERS = ['worker_1', 'worker_2', 'worker_3'].map((id) => ({ id, cluster: id, max_inflight: 8 }));
const SYSTEM = 'You are the ACME support assistant. Follow the refund policy below exactly. '.repeat(40); // ~3 KB

const post = (path: string, body: unknown, headers: Record<string, string> = {}): HarnessRequest => ({
  method: 'POST',
  path,
  headers: { host: 'llm.example', 'content-type': 'application/json', ...headers },
  body: typeof body === 'string' ? body : JSON.stringify(body),
});
const ok = { status: 200, body: '{}' };

function last(g: TestGate): Extract<GateResult, { kind: 'route' }> {
  const r = g.results.at(-1);
  assert.ok(r && r.kind === 'route', JSON.stringify(r && r.kind === 'reject' ? r.error.code : r));
  return r;
}

describe('other request shapes through the harness', () => {
  let g: TestGate;
  let h: ReturnType<typeof harness>;
  before(async () => {
    g = await startTestGate({ workers: WORKERS });
    h = harness(g.target);
  });
  after(async () => {
    h.close();
    await g.close(100);
  });

  test('two Messages users sharing a long system prompt meet on one worker (prefix match)', async () => {
    const a = await h.request(post('/v1/messages', { model: 'llama', max_tokens: 8, system: SYSTEM, metadata: { user_id: 'alice' }, messages: [{ role: 'user', content: 'my order is late' }] }), ok);
    const b = await h.request(post('/v1/messages', { model: 'llama', max_tokens: 8, system: [{ type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } }], metadata: { user_id: 'bob' }, messages: [{ role: 'user', content: 'refund please' }] }), ok);
    assert.equal(a.kind, 'upstream');
    assert.equal(b.cluster, a.cluster);
    const r = last(g);
    assert.equal(r.key?.source, 'body_metadata_user_id');
    assert.ok(r.explanation.candidates.find((c) => c.worker === r.worker)!.prefixBlocks >= 10, "r.explanation.candidates.find((c) => c.worker === r.worker)!.prefixBlocks >= 10");
  });

  test('a chat request with the same system prompt meets them too (one canonical prompt)', async () => {
    const before = last(g).worker;
    const c = await h.request(chat({ session: 'carol', system: SYSTEM, text: 'where is my parcel' }), ok);
    assert.equal(c.cluster, before);
  });

  test('sessions stick: metadata.user_id, a Responses conversation, prompt_cache_key', async () => {
    const cases: Array<[string, (i: number) => HarnessRequest, string]> = [
      ['body_metadata_user_id', (i) => post('/v1/messages', { model: 'llama', metadata: { user_id: 'dave' }, messages: [{ role: 'user', content: `question ${i} ${'x'.repeat(300 * i)}` }] }), 'messages'],
      ['body_conversation', (i) => post('/v1/responses', { model: 'llama', conversation: { id: 'conv_7' }, input: `turn ${i} ${'y'.repeat(300 * i)}` }), 'responses'],
      ['prompt_cache_key', (i) => post('/v1/chat/completions', { model: 'llama', prompt_cache_key: 'agent-42', messages: [{ role: 'user', content: `task ${i} ${'z'.repeat(300 * i)}` }] }), 'chat'],
    ];
    for (const [source, make] of cases) {
      const first = await h.request(make(0), ok);
      assert.equal(last(g).key?.source, source);
      for (let i = 1; i < 4; i++) {
        const r = await h.request(make(i), ok);
        assert.equal(r.cluster, first.cluster, source);
        assert.equal(last(g).outcome, 'affinity_hit', source);
      }
    }
  });

  test('bad Messages and Responses bodies are routed without a body key, never an error', async () => {
    const bodies: Array<[string, string | object]> = [
      ['/v1/messages', '{"system": ['],
      ['/v1/messages', { system: 42, messages: 'nope' }],
      ['/v1/messages', { system: [null, { type: 'text' }], messages: [null, { role: 1 }], metadata: { user_id: {} } }],
      ['/v1/responses', { input: { role: 'user' }, instructions: 7, conversation: [], previous_response_id: 9 }],
      ['/v1/responses', '[]'],
    ];
    for (const [path, body] of bodies) {
      const r = await h.request(post(path, body), ok);
      assert.equal(r.kind, 'upstream', `${path} ${JSON.stringify(body)}`);
      assert.notEqual(last(g).key?.kind, 'session');
    }
  });
});

describe('other request shapes with malformed_body: reject', () => {
  test('a Messages or Responses body that is not a JSON object is a 400', async () => {
    const g = await startTestGate({ workers: WORKERS, limits: { malformed_body: 'reject' } });
    const h = harness(g.target);
    try {
      for (const path of ['/v1/messages', '/v1/responses']) {
        const r = await h.request(post(path, '{"messages": ['), ok);
        assert.equal(r.kind, 'local');
        if (r.kind === 'local') assert.equal(r.status, 400);
      }
      // Well-formed JSON with a wrong-typed field is the engine's to refuse: routed.
      assert.equal((await h.request(post('/v1/messages', { system: 42, messages: [] }), ok)).kind, 'upstream');
    } finally {
      h.close();
      await g.close(100);
    }
  });
});
