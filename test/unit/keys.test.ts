import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { chainedBlockHashes, hashSessionId, initHashing, seedFor } from '../../src/request/hashing.js';
import { canonicalPrompt, messagesPrompt, responsesPrompt } from '../../src/request/prompt.js';
import { responseIdHash, understand } from '../../src/request/keys.js';
import type { RequestInfo } from '../../src/request/request.js';

before(() => initHashing());

const config = parseConfig({ workers: [{ id: 'w', cluster: 'w' }] });

function req(headers: Record<string, string>, body?: unknown, path = '/v1/chat/completions'): RequestInfo {
  return {
    method: 'POST',
    path,
    headers: new Map(Object.entries(headers)),
    ...(body === undefined ? {} : { body: Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)) }),
  };
}

const SYSTEM = 'You are a meticulous coding assistant. '.repeat(80); // ~3 KB: several whole blocks
/** The first block of each case of the seed test, as the seed was hashed when it was written. */
const PINNED_FIRST_BLOCKS = ['525f2c380d199ce9', '1549f4c7e8686e1c', '0c2f0d78608ad44d'];

describe('routing keys', () => {
  test('the session header wins over cookie and body', () => {
    const u = understand(req({ 'x-session-id': 'abc', cookie: 'kvgate-session=zzz' }, { user: 'u1' }), config);
    assert.deepEqual(u.key, { kind: 'session', source: 'header', hash: hashSessionId('abc') });
  });

  test('then the configured cookie', () => {
    const u = understand(req({ cookie: 'other=1; kvgate-session=zzz' }, { user: 'u1' }), config);
    assert.equal(u.key?.source, 'cookie');
    assert.equal(u.key?.hash, hashSessionId('zzz'));
  });

  test('then body `metadata.session_id`, then `prompt_cache_key`, then `user`, on the OpenAI paths', () => {
    // A conversation id names one conversation; `user` names an end user who may hold many.
    assert.equal(understand(req({}, { user: 'u1', metadata: { session_id: 's' } }), config).key?.source, 'body_metadata');
    assert.equal(understand(req({}, { user: 'u1', messages: [] }), config).key?.source, 'body_user');
    const m = understand(req({}, { metadata: { session_id: 's1' }, messages: [] }), config);
    assert.equal(m.key?.source, 'body_metadata');
    assert.equal(m.key?.hash, hashSessionId('s1'));
    const c = understand(req({}, { user: 'u2', prompt: 'x' }, '/v1/completions'), config);
    assert.equal(c.key?.source, 'body_user');
  });

  test('a session header is its value without surrounding spaces and tabs; a blank one is no session', () => {
    // Envoy's HTTP/1 codec strips them, its HTTP/2 codec passes them on: the same client must get one key either way.
    const abc = { kind: 'session', source: 'header', hash: hashSessionId('abc') };
    assert.deepEqual(understand(req({ 'x-session-id': ' \tabc\t ' }), config).key, abc);
    assert.deepEqual(understand(req({ 'x-session-id': 'a b' }), config).key?.hash, hashSessionId('a b'), 'inner spaces are the id');
    assert.equal(understand(req({ 'x-session-id': ' \t ', cookie: 'kvgate-session=zzz' }), config).key?.source, 'cookie');
    assert.equal(understand(req({ cookie: 'kvgate-session= zzz\t' }), config).key?.hash, hashSessionId('zzz'), 'the cookie parser trims alike');
  });

  test('body ids are exact: a JSON string is the value the client chose', () => {
    assert.equal(understand(req({}, { user: ' u1 ' }), config).key?.hash, hashSessionId(' u1 '));
    assert.equal(understand(req({}, { metadata: { session_id: 's1\n' } }), config).key?.hash, hashSessionId('s1\n'));
  });

  test('body fields are not read on other paths', () => {
    assert.equal(understand(req({}, { user: 'u1' }, '/v1/embeddings'), config).key, undefined);
  });

  test('session ids are hashed: the raw id never appears in the key', () => {
    const u = understand(req({ 'x-session-id': 'my-secret-session' }), config);
    assert.ok(u.key && !u.key.hash.includes('secret'), "u.key && !u.key.hash.includes('secret')");
    assert.match(u.key.hash, /^[0-9a-f]{32}$/);
  });

  test('a session id is cut at 1024 chars before hashing: ids differing only past it share a key', () => {
    const head = 's'.repeat(1024);
    const a = understand(req({ 'x-session-id': head + 'a'.repeat(976) }), config);
    const b = understand(req({ 'x-session-id': head + 'b'.repeat(976) }), config);
    assert.equal(a.key?.kind, 'session');
    assert.equal(a.key?.source, 'header');
    assert.equal(a.key?.hash, b.key?.hash);
    assert.equal(a.key?.hash, hashSessionId(head));
  });

  test('without a session, requests sharing a long system prompt share a prefix key', () => {
    const a = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' }] }), config);
    const b = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'something else' }] }), config);
    assert.equal(a.key?.kind, 'prefix');
    assert.equal(a.key?.hash, b.key?.hash);
  });

  test('the prefix key is seeded with the model', () => {
    const body = (model: string) => ({ model, messages: [{ role: 'system', content: SYSTEM }] });
    assert.notEqual(understand(req({}, body('a')), config).key?.hash, understand(req({}, body('b')), config).key?.hash);
  });

  test('content parts and completions prompts (string or array) are keyed', () => {
    const parts = understand(req({}, { model: 'm', messages: [{ role: 'user', content: [{ type: 'text', text: SYSTEM }] }] }), config);
    assert.equal(parts.key?.kind, 'prefix');
    const str = understand(req({}, { model: 'm', prompt: SYSTEM }, '/v1/completions'), config);
    const arr = understand(req({}, { model: 'm', prompt: [SYSTEM] }, '/v1/completions'), config);
    assert.equal(str.key?.kind, 'prefix');
    assert.equal(arr.key?.kind, 'prefix');
  });

  test('a completions prompt list of several prompts is a batch: keyed on its first prompt', () => {
    const blocks = (prompt: unknown) => understand(req({}, { model: 'm', prompt }, '/v1/completions'), config).blocks;
    const ids = Array.from({ length: 2000 }, (_, i) => i % 500);
    assert.ok(blocks(ids).length >= 10, "blocks(ids).length >= 10");
    assert.deepEqual(blocks([ids]), blocks(ids), 'one token-id list in a list is that one prompt');
    assert.deepEqual(blocks([ids, [1, 2, 3]]), blocks(ids));
    assert.deepEqual(blocks([SYSTEM, LONG_USER]), blocks(SYSTEM));
    assert.deepEqual(blocks([SYSTEM]), blocks(SYSTEM));
  });

  test('malformed bodies give no key and say why (forward mode, the default)', () => {
    const cases: Array<[Buffer | string, string]> = [
      ['{"model": "m", "messages": [', 'not_json'],
      [Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), 'not_utf8'],
      ['[1,2,3]', 'not_object'],
      ['"just a string"', 'not_object'],
      ['', 'empty'],
    ];
    for (const [body, reason] of cases) {
      const u = understand(req({}, body), config);
      assert.equal(u.key, undefined);
      assert.equal(u.bodyProblem, reason);
    }
  });

  test('with malformed_body: reject, a bad body is a bad_request', () => {
    const strict = parseConfig({ limits: { malformed_body: 'reject' }, workers: [{ id: 'w', cluster: 'w' }] });
    assert.throws(() => understand(req({}, '{nope'), strict), { code: 'bad_request' });
  });

  test('a body over the limit is body_too_large', () => {
    const small = parseConfig({ limits: { max_body_bytes: 100 }, workers: [{ id: 'w', cluster: 'w' }] });
    assert.throws(() => understand(req({}, { prompt: 'x'.repeat(200) }), small), { code: 'body_too_large' });
    // Only where the body is read: elsewhere it is neither read nor measured.
    assert.equal(understand(req({}, { prompt: 'x'.repeat(200) }, '/v1/embeddings'), small).key, undefined);
  });

  test('prompts of unexpected types never throw and give no key', () => {
    for (const body of [{ messages: 'nope' }, { messages: [null, 3, 'x'] }, { prompt: 42 }, { prompt: { a: 1 } }, { user: 7 }, { metadata: [] }]) {
      const u = understand(req({}, body), config);
      assert.ok(u.key === undefined || u.key.kind === 'prefix', "u.key === undefined || u.key.kind === 'prefix'");
    }
  });

  test('deeply nested JSON is handled without throwing', () => {
    const deep = '['.repeat(100_000) + ']'.repeat(100_000);
    const u = understand(req({}, `{"messages": ${deep}}`), config);
    assert.ok(u.key === undefined || u.key.kind === 'prefix', "u.key === undefined || u.key.kind === 'prefix'");
  });

  test('the prompt block chain: whole blocks only, chained, seeded with model and cache_salt', () => {
    const body = (extra: object = {}) => ({ model: 'm', messages: [{ role: 'system', content: SYSTEM }], ...extra });
    const a = understand(req({}, body()), config);
    assert.equal(a.blocks.length, Math.floor(a.blocks.length), 'whole blocks');
    assert.ok(a.blocks.length >= 10, "a.blocks.length >= 10");
    const longer = understand(req({}, { ...body(), messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'more '.repeat(200) }] }), config);
    assert.deepEqual(longer.blocks.slice(0, a.blocks.length - 1), a.blocks.slice(0, -1), 'a longer prompt extends the chain');
    const salted = understand(req({}, body({ cache_salt: 'tenant-7' })), config);
    assert.notEqual(salted.blocks[0], a.blocks[0], 'cache_salt separates tenants');
    const withSession = understand(req({ 'x-session-id': 'z' }, body()), config);
    assert.deepEqual(withSession.blocks, a.blocks, 'sessions carry their prompt blocks too');
    assert.equal(understand(req({}, { model: 'm', prompt: 'short' }, '/v1/completions'), config).blocks.length, 0);
  });
});

// A different system prompt that differs only after its first block but inside the key's blocks:
// a key that ignored the system prompt (or read only its first block) would not tell them apart.
const SYSTEM_B = SYSTEM.slice(0, 1000) + 'X' + SYSTEM.slice(1001);
const LONG_USER = 'Please review the following diff line by line. '.repeat(40); // ~1.9 KB

describe('prompt_cache_key', () => {
  test('keys chat and completions between the session id and the prefix hash', () => {
    const chat = (extra: object) => ({ model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' }], ...extra });
    const a = understand(req({}, chat({ prompt_cache_key: 'tenant-a-agent' })), config);
    assert.equal(a.key?.kind, 'session');
    assert.equal(a.key?.source, 'prompt_cache_key');
    assert.ok(a.blocks.length >= 10, 'the prompt is still cut into blocks for prefix matching');
    // Same cache key, different prompts: one key. Different cache keys, same prompt: two keys.
    const other = understand(req({}, { model: 'm', messages: [{ role: 'user', content: LONG_USER }], prompt_cache_key: 'tenant-a-agent' }), config);
    assert.equal(other.key?.hash, a.key?.hash);
    assert.notEqual(understand(req({}, chat({ prompt_cache_key: 'tenant-b-agent' })), config).key?.hash, a.key?.hash);
    const completions = understand(req({}, { model: 'm', prompt: SYSTEM, prompt_cache_key: 'tenant-a-agent' }, '/v1/completions'), config);
    assert.equal(completions.key?.source, 'prompt_cache_key');
    assert.equal(completions.key?.hash, a.key?.hash);
  });

  test('a session id outranks it; it outranks `user` and the prefix hash', () => {
    const body = { model: 'm', messages: [{ role: 'system', content: SYSTEM }], prompt_cache_key: 'k' };
    assert.equal(understand(req({ 'x-session-id': 's' }, body), config).key?.source, 'header');
    // OpenAI deprecates `user` for caching in favour of prompt_cache_key: the explicit cache group wins.
    assert.equal(understand(req({}, { ...body, user: 'u' }), config).key?.source, 'prompt_cache_key');
    assert.equal(understand(req({}, { ...body, user: 'u' }, '/v1/completions'), config).key?.source, 'prompt_cache_key');
    assert.equal(understand(req({}, { ...body, metadata: { session_id: 's' } }), config).key?.source, 'body_metadata');
    assert.equal(understand(req({}, { ...body, prompt_cache_key: 7 }), config).key?.source, 'prompt_prefix', 'a non-string key is ignored');
    assert.equal(understand(req({}, { ...body, prompt_cache_key: '' }), config).key?.source, 'prompt_prefix');
  });

  test('is hashed in its own namespace: never the same key as a session id of the same text', () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'x' }] };
    const cache = understand(req({}, { ...body, prompt_cache_key: 'same' }), config).key;
    const session = understand(req({ 'x-session-id': 'same' }, body), config).key;
    assert.notEqual(cache?.hash, session?.hash);
    assert.notEqual(cache?.hash, hashSessionId('same'));
    assert.match(cache?.hash ?? '', /^[0-9a-f]{32}$/);
  });

  test('is not read when body session fields are off', () => {
    const off = parseConfig({ keys: { body_session_fields: false }, workers: [{ id: 'w', cluster: 'w' }] });
    const u = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }], prompt_cache_key: 'k' }), off);
    assert.equal(u.key?.source, 'prompt_prefix');
  });
});

describe('Anthropic Messages API (/v1/messages)', () => {
  const msgs = (body: object) => req({}, body, '/v1/messages');
  const base = (system: unknown, user = 'hi') => ({ model: 'm', max_tokens: 64, system, messages: [{ role: 'user', content: user }] });

  test('two requests sharing a long system prompt share a prefix key; another system prompt does not', () => {
    const a = understand(msgs(base(SYSTEM, 'first question')), config);
    const b = understand(msgs(base(SYSTEM, LONG_USER)), config);
    const c = understand(msgs(base(SYSTEM_B, 'first question')), config);
    assert.equal(a.key?.kind, 'prefix');
    assert.ok(a.blocks.length >= 10, `${a.blocks.length} blocks`);
    assert.equal(a.key?.hash, b.key?.hash);
    assert.notEqual(a.key?.hash, c.key?.hash);
    assert.deepEqual(a.blocks.slice(0, 3), c.blocks.slice(0, 3), 'the first blocks agree up to the difference');
    assert.notEqual(a.blocks[5], c.blocks[5]);
  });

  test('system as a string or as text blocks (cache_control included) is the same prompt', () => {
    const str = understand(msgs(base(SYSTEM)), config);
    const blocks = understand(msgs(base([{ type: 'text', text: SYSTEM.slice(0, 1500) }, { type: 'text', text: SYSTEM.slice(1500), cache_control: { type: 'ephemeral' } }])), config);
    assert.deepEqual(blocks.blocks, str.blocks);
    assert.equal(blocks.key?.hash, str.key?.hash);
  });

  test('renders like the same conversation over chat completions (the engine sees the same tokens)', () => {
    const m = understand(msgs({ model: 'm', system: SYSTEM, messages: [{ role: 'user', content: [{ type: 'text', text: LONG_USER }] }] }), config);
    const chat = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: LONG_USER }] }), config);
    assert.ok(m.blocks.length >= 18, "m.blocks.length >= 18");
    assert.deepEqual(m.blocks, chat.blocks);
  });

  test('tools come after the system prompt and count; tool_use and tool_result blocks count by their JSON', () => {
    // Chat templates render the system text, then the tools: the same system prompt with other
    // tools (or none) is a shared prefix the engine holds.
    const tool = (name: string) => [{ name, description: 'd'.repeat(600), input_schema: { type: 'object' } }];
    const a = understand(msgs({ ...base(SYSTEM), tools: tool('search') }), config);
    const b = understand(msgs({ ...base(SYSTEM), tools: tool('browse') }), config);
    const none = understand(msgs(base(SYSTEM)), config);
    assert.deepEqual(a.blocks.slice(0, 11), b.blocks.slice(0, 11), 'the system prompt is shared');
    assert.deepEqual(a.blocks.slice(0, 11), none.blocks.slice(0, 11));
    assert.notEqual(a.blocks.at(-1), b.blocks.at(-1), 'the tools count');
    const turn = (result: string) => ({
      model: 'm',
      system: SYSTEM,
      messages: [
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'search', input: { q: 'x' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: result.repeat(300) }] },
      ],
    });
    const r1 = understand(msgs(turn('a')), config);
    const r2 = understand(msgs(turn('b')), config);
    assert.equal(r1.blocks.length, r2.blocks.length);
    assert.deepEqual(r1.blocks.slice(0, 11), r2.blocks.slice(0, 11), 'the shared system prompt');
    assert.notEqual(r1.blocks.at(-1), r2.blocks.at(-1), 'the tool result is part of the prompt');
  });

  test('session key from metadata.user_id, after the session header; chat-only fields are not read', () => {
    const u = understand(msgs({ ...base(SYSTEM), metadata: { user_id: 'user-42' } }), config);
    assert.deepEqual(u.key, { kind: 'session', source: 'body_metadata_user_id', hash: hashSessionId('user-42') });
    assert.ok(u.blocks.length >= 10, "u.blocks.length >= 10");
    assert.equal(understand(req({ 'x-session-id': 'h' }, { ...base(SYSTEM), metadata: { user_id: 'user-42' } }, '/v1/messages'), config).key?.source, 'header');
    // `user` and `prompt_cache_key` are OpenAI fields; a Messages body carrying them is keyed by its prompt.
    assert.equal(understand(msgs({ ...base(SYSTEM), user: 'u', prompt_cache_key: 'k' }), config).key?.source, 'prompt_prefix');
    assert.equal(understand(msgs({ ...base(SYSTEM), metadata: { user_id: 5 } }), config).key?.source, 'prompt_prefix');
  });

  test('malformed system blocks and wrong types never throw: the bad field is left out', () => {
    const noSystem = understand(msgs({ model: 'm', messages: [{ role: 'user', content: LONG_USER }] }), config);
    assert.equal(noSystem.key?.kind, 'prefix');
    for (const system of [42, { text: SYSTEM }, true, null, '']) {
      const u = understand(msgs({ model: 'm', system, messages: [{ role: 'user', content: LONG_USER }] }), config);
      assert.deepEqual(u.blocks, noSystem.blocks, `system ${JSON.stringify(system)?.slice(0, 20)} is ignored`);
    }
    // Blocks without text: kept as their JSON, deterministically (the same body, the same key).
    const odd = { model: 'm', system: [null, 3, { type: 'text' }, { type: 'image', source: {} }, 'loose'], messages: [{ role: 'user', content: LONG_USER }] };
    assert.equal(understand(msgs(odd), config).key?.hash, understand(msgs(odd), config).key?.hash);
    for (const body of [{ messages: 'nope' }, { messages: [null, 3, 'x', { role: 9, content: {} }] }, { system: [[[]]] }, { tools: 'x' }, { metadata: 'x' }]) {
      const u = understand(msgs(body), config);
      assert.ok(u.key === undefined || u.key.kind === 'prefix', "u.key === undefined || u.key.kind === 'prefix'");
    }
  });

  test('malformed JSON gets the same answers as on the OpenAI paths', () => {
    assert.equal(understand(req({}, '{"system": [', '/v1/messages'), config).bodyProblem, 'not_json');
    const strict = parseConfig({ limits: { malformed_body: 'reject' }, workers: [{ id: 'w', cluster: 'w' }] });
    assert.throws(() => understand(req({}, '{nope', '/v1/messages'), strict), { code: 'bad_request' });
  });
});

describe('OpenAI Responses API (/v1/responses)', () => {
  const resp = (body: object, headers: Record<string, string> = {}) => req(headers, body, '/v1/responses');

  test('instructions and a string input render like chat; a shared long instruction shares a key', () => {
    const a = understand(resp({ model: 'm', instructions: SYSTEM, input: LONG_USER }), config);
    const chat = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: LONG_USER }] }), config);
    assert.ok(a.blocks.length >= 18, "a.blocks.length >= 18");
    assert.deepEqual(a.blocks, chat.blocks);
    const b = understand(resp({ model: 'm', instructions: SYSTEM, input: 'another question' }), config);
    assert.equal(a.key?.hash, b.key?.hash);
    assert.notEqual(understand(resp({ model: 'm', instructions: SYSTEM_B, input: 'q' }), config).key?.hash, a.key?.hash);
  });

  test('input items: messages with input_text parts, function calls and their outputs', () => {
    const items = (output: string) => [
      { role: 'system', content: SYSTEM },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'find it' }] },
      { type: 'function_call', call_id: 'c1', name: 'search', arguments: '{"q":"x"}' },
      { type: 'function_call_output', call_id: 'c1', output: output.repeat(600) },
    ];
    const a = understand(resp({ model: 'm', input: items('a') }), config);
    const b = understand(resp({ model: 'm', input: items('b') }), config);
    assert.ok(a.blocks.length >= 13, "a.blocks.length >= 13");
    assert.deepEqual(a.blocks.slice(0, 11), b.blocks.slice(0, 11));
    assert.notEqual(a.blocks.at(-1), b.blocks.at(-1), 'a function output is part of the prompt');
    const chatLike = understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }] }), config);
    assert.deepEqual(a.blocks.slice(0, 11), chatLike.blocks.slice(0, 11));
  });

  test('tools come after the instructions and leading developer items, and count', () => {
    const tools = (name: string) => [{ type: 'function', name, description: 'd'.repeat(600), parameters: {} }];
    const a = understand(resp({ model: 'm', tools: tools('a'), instructions: SYSTEM, input: 'q' }), config);
    const b = understand(resp({ model: 'm', tools: tools('b'), instructions: SYSTEM, input: 'q' }), config);
    const none = understand(resp({ model: 'm', instructions: SYSTEM, input: 'q' }), config);
    assert.deepEqual(a.blocks.slice(0, 11), b.blocks.slice(0, 11), 'the instructions are shared');
    assert.deepEqual(a.blocks.slice(0, 11), none.blocks.slice(0, 11));
    assert.notEqual(a.blocks.at(-1), b.blocks.at(-1), 'the tools count');
    const dev = (name: string) => understand(resp({ model: 'm', tools: tools(name), input: [{ role: 'developer', content: SYSTEM }, { role: 'user', content: 'q' }] }), config);
    assert.deepEqual(dev('a').blocks.slice(0, 11), dev('b').blocks.slice(0, 11), 'a leading developer item too');
    assert.notEqual(dev('a').blocks.at(-1), dev('b').blocks.at(-1));
  });

  test('session keys: header, cookie, conversation (string or object), metadata.session_id, prompt_cache_key, user', () => {
    const body = { model: 'm', instructions: SYSTEM, input: 'q' };
    assert.equal(understand(resp({ ...body, conversation: 'conv_1', user: 'u' }, { 'x-session-id': 'h' }), config).key?.source, 'header');
    const conv = understand(resp({ ...body, conversation: 'conv_1', user: 'u', prompt_cache_key: 'k' }), config);
    assert.deepEqual(conv.key, { kind: 'session', source: 'body_conversation', hash: hashSessionId('conv_1') });
    assert.equal(understand(resp({ ...body, conversation: { id: 'conv_1' } }), config).key?.hash, conv.key?.hash);
    assert.equal(understand(resp({ ...body, conversation: 5, user: 'u' }), config).key?.source, 'body_user');
    assert.equal(understand(resp({ ...body, conversation: {}, metadata: { session_id: 's' } }), config).key?.source, 'body_metadata');
    assert.equal(understand(resp({ ...body, prompt_cache_key: 'k' }), config).key?.source, 'prompt_cache_key');
    assert.equal(understand(resp({ ...body, user: 'u', prompt_cache_key: 'k' }), config).key?.source, 'prompt_cache_key');
    assert.equal(understand(resp({ ...body, metadata: { session_id: 's' }, prompt_cache_key: 'k' }), config).key?.source, 'body_metadata');
    assert.equal(understand(resp(body), config).key?.source, 'prompt_prefix');
  });

  test('previous_response_id is read and hashed, never kept raw', () => {
    const u = understand(resp({ model: 'm', previous_response_id: 'resp_abc123', input: 'next' }), config);
    assert.equal(u.storedResponse, responseIdHash('resp_abc123'));
    assert.match(u.storedResponse ?? '', /^[0-9a-f]{32}$/);
    assert.equal(understand(resp({ model: 'm', previous_response_id: 7, input: 'x' }), config).storedResponse, undefined);
    assert.equal(understand(req({}, { model: 'm', previous_response_id: 'resp_abc123', messages: [] }), config).storedResponse, undefined, 'only on Responses');
  });

  test('a /v1/responses/{id} path names its stored response (retrieve, delete, cancel, input items)', () => {
    const get = (path: string): RequestInfo => ({ method: 'GET', path, headers: new Map() });
    for (const path of ['/v1/responses/resp_abc123', '/v1/responses/resp_abc123/input_items', '/v1/responses/resp_abc123/cancel', '/v1/responses/resp%5Fabc123']) {
      assert.equal(understand(get(path), config).storedResponse, responseIdHash('resp_abc123'), path);
    }
    for (const path of ['/v1/responses', '/v1/responses/', '/v1/responsesX/resp_1', '/v1/chat/completions/resp_1', '/v2/responses/resp_1']) {
      assert.equal(understand(get(path), config).storedResponse, undefined, path);
    }
    assert.equal(understand(get('/v1/responses/%E0%A4%A'), config).storedResponse, responseIdHash('%E0%A4%A'), 'a bad escape is taken as sent');
    const prefixed = parseConfig({ keys: { session_paths: ['/openai/v1/responses'] }, workers: [{ id: 'w', cluster: 'w' }] });
    assert.equal(understand(get('/openai/v1/responses/resp_9'), prefixed).storedResponse, responseIdHash('resp_9'));
    assert.equal(understand(get('/v1/responses/resp_9'), prefixed).storedResponse, undefined, 'only configured paths');
  });

  test('wrong types never throw: the bad field is left out', () => {
    const plain = understand(resp({ model: 'm', instructions: SYSTEM }), config);
    for (const input of [42, { role: 'user' }, null, true]) {
      assert.deepEqual(understand(resp({ model: 'm', instructions: SYSTEM, input }), config).blocks, plain.blocks);
    }
    for (const body of [{ input: [null, 3, 'x', [], { type: 9 }] }, { instructions: ['x'] }, { tools: {} }, { conversation: [] }]) {
      const u = understand(resp(body), config);
      assert.ok(u.key === undefined || u.key.kind === 'prefix', "u.key === undefined || u.key.kind === 'prefix'");
    }
  });
});

describe('tool calls are part of the prompt', () => {
  /** Where two chains part: the count of leading blocks they share. */
  const common = (a: string[], b: string[]) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
  };

  test('chat: tool_calls on an assistant turn, tool_call_id and name on a tool turn', () => {
    const convo = (args: string, id = 'c1', name = 'get_weather') => ({
      model: 'm',
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: 'Find the weather' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: args } }] },
        { role: 'tool', tool_call_id: id, name, content: 'sunny' },
        { role: 'user', content: LONG_USER },
      ],
    });
    const a = understand(req({}, convo('{"city":"Paris"}')), config);
    assert.ok(a.blocks.length >= 18, `${a.blocks.length} blocks`);
    for (const other of [convo('{"city":"Tokyo"}'), convo('{"city":"Paris"}', 'c2'), convo('{"city":"Paris"}', 'c1', 'get_time')]) {
      const b = understand(req({}, other), config);
      assert.ok(common(a.blocks, b.blocks) >= 11, 'the system prompt is shared');
      assert.notEqual(a.blocks.at(-1), b.blocks.at(-1), JSON.stringify(other.messages.slice(2, 4)));
    }
    // Wrong types are left out, as any other field of the wrong type is.
    const odd = convo('{"city":"Paris"}');
    odd.messages[2] = { ...odd.messages[2]!, tool_calls: 'x' as never };
    const none = convo('{"city":"Paris"}');
    delete (none.messages[2] as { tool_calls?: unknown }).tool_calls;
    assert.deepEqual(understand(req({}, odd), config).blocks, understand(req({}, none), config).blocks);
  });

  test('Messages: tool_use input and tool_result tool_use_id count (by the JSON of the block)', () => {
    const convo = (input: object, id = 't1') => ({
      model: 'm',
      system: SYSTEM,
      messages: [
        { role: 'user', content: 'Find the weather' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: 'sunny' }] },
        { role: 'user', content: LONG_USER },
      ],
    });
    const a = understand(req({}, convo({ city: 'Paris' }), '/v1/messages'), config);
    for (const other of [convo({ city: 'Tokyo' }), convo({ city: 'Paris' }, 't2')]) {
      const b = understand(req({}, other, '/v1/messages'), config);
      assert.ok(common(a.blocks, b.blocks) >= 11);
      assert.notEqual(a.blocks.at(-1), b.blocks.at(-1));
    }
  });

  test('Responses: function_call arguments and call_id, function_call_output call_id count', () => {
    const convo = (args: string, id = 'c1', outId = id) => ({
      model: 'm',
      instructions: SYSTEM,
      input: [
        { role: 'user', content: 'Find the weather' },
        { type: 'function_call', call_id: id, name: 'get_weather', arguments: args },
        { type: 'function_call_output', call_id: outId, output: 'sunny' },
        { role: 'user', content: LONG_USER },
      ],
    });
    const a = understand(req({}, convo('{"city":"Paris"}'), '/v1/responses'), config);
    for (const other of [convo('{"city":"Tokyo"}'), convo('{"city":"Paris"}', 'c2'), convo('{"city":"Paris"}', 'c1', 'c2')]) {
      const b = understand(req({}, other, '/v1/responses'), config);
      assert.ok(common(a.blocks, b.blocks) >= 11);
      assert.notEqual(a.blocks.at(-1), b.blocks.at(-1));
    }
  });
});

describe("an assistant turn's reasoning (chat completions)", () => {
  const chat = (assistant: Record<string, unknown>) =>
    understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Find the bug' }, { role: 'assistant', content: 'Found it.', ...assistant }, { role: 'user', content: LONG_USER }] }), config).blocks;
  const THOUGHT = 'The loop bound is off by one, so the last element is never read. '.repeat(8);

  test('`reasoning` counts: vLLM hands it to the chat template, which renders it in interleaved thinking', () => {
    const plain = chat({});
    const thought = chat({ reasoning: THOUGHT });
    assert.ok(plain.length >= 18 && thought.length > plain.length, `${plain.length} and ${thought.length} blocks: the turns after it must fill blocks`);
    assert.notEqual(thought.at(-1), plain.at(-1), 'the reasoning is part of the prompt');
    assert.notEqual(chat({ reasoning: THOUGHT.replace('one', 'two') }).at(-1), thought.at(-1), 'other reasoning, another prompt');
    assert.deepEqual(thought.slice(0, 11), plain.slice(0, 11), 'the system prompt is still shared');
  });

  test('only a non-empty string on an assistant turn; `reasoning_content` is not read, as vLLM does not read it', () => {
    const plain = chat({});
    for (const other of [{ reasoning: '' }, { reasoning: 7 }, { reasoning: null }, { reasoning_content: THOUGHT }]) {
      assert.deepEqual(chat(other), plain, JSON.stringify(other).slice(0, 40));
    }
    const user = (extra: object) => understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: LONG_USER, ...extra }] }), config).blocks;
    assert.deepEqual(user({ reasoning: THOUGHT }), user({}), 'on a user turn');
  });
});

describe('Anthropic cache_control marks are never hashed', () => {
  const msgs = (body: object) => understand(req({}, body, '/v1/messages'), config);
  const cc = { cache_control: { type: 'ephemeral' } };

  test('on blocks nested in tool_result content, search results and content documents', () => {
    const body = (mark: object) => ({
      model: 'm',
      system: SYSTEM.slice(0, 300),
      messages: [
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 't1',
              content: [
                { type: 'text', text: 'ok', ...mark },
                { type: 'search_result', source: 's', title: 't', content: [{ type: 'text', text: 'found', ...mark }] },
                { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'doc', ...mark }] } },
                { type: 'text', text: SYSTEM },
              ],
            },
          ],
        },
      ],
    });
    const plain = msgs(body({}));
    assert.ok(plain.blocks.length >= 10, "plain.blocks.length >= 10");
    assert.deepEqual(msgs(body(cc)).blocks, plain.blocks);
  });

  test('on tool definitions', () => {
    const tools = (mark: object) => [{ name: 'a', description: 'd'.repeat(600), input_schema: { type: 'object' } }, { name: 'b', input_schema: { type: 'object' }, ...mark }];
    const plain = msgs({ model: 'm', system: SYSTEM, tools: tools({}), messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual(msgs({ model: 'm', system: SYSTEM, tools: tools(cc), messages: [{ role: 'user', content: 'hi' }] }).blocks, plain.blocks);
  });

  test('a cache_control that is data (a tool call input) still counts', () => {
    const body = (input: object) => ({ model: 'm', messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'n', input }] }, { role: 'user', content: SYSTEM }] });
    assert.notDeepEqual(msgs(body({ cache_control: 1 })).blocks, msgs(body({})).blocks);
  });
});

describe('text parts are joined as vLLM joins them', () => {
  const A = SYSTEM.slice(0, 1000);
  const B = SYSTEM.slice(1000);
  const parts = [{ type: 'text', text: A }, { type: 'text', text: B }];

  test('a turn of text parts is its texts joined with a newline, not the texts run together', () => {
    const chat = (content: unknown) => understand(req({}, { model: 'm', messages: [{ role: 'user', content }] }), config).blocks;
    assert.deepEqual(chat(parts), chat(`${A}\n${B}`));
    assert.notDeepEqual(chat(parts), chat(A + B));
    const messages = understand(req({}, { model: 'm', messages: [{ role: 'user', content: parts }] }, '/v1/messages'), config).blocks;
    assert.deepEqual(messages, chat(`${A}\n${B}`), 'Messages text blocks');
    const responses = understand(req({}, { model: 'm', input: [{ role: 'user', content: parts.map((p) => ({ ...p, type: 'input_text' })) }] }, '/v1/responses'), config).blocks;
    assert.deepEqual(responses, chat(`${A}\n${B}`), 'Responses input_text parts');
  });

  test('Messages system blocks are run together, as vLLM makes one system message of them', () => {
    const sys = (system: unknown) => understand(req({}, { model: 'm', system, messages: [] }, '/v1/messages'), config).blocks;
    assert.deepEqual(sys(parts), sys(A + B));
  });

  test("a user turn's tool_result: a content string and text blocks with that text (joined with a newline) are one prompt", () => {
    // vLLM's Messages endpoint makes one tool message of either, so the engine renders the same tokens.
    const result = (role: string, content: unknown) =>
      understand(req({}, { model: 'm', messages: [{ role, content: [{ type: 'tool_result', tool_use_id: 't1', content }] }] }, '/v1/messages'), config).blocks;
    const str = result('user', A);
    assert.ok(str.length >= 3, `${str.length} blocks: the result must fill whole blocks`);
    assert.deepEqual(result('user', [{ type: 'text', text: A }]), str, 'one text block');
    assert.deepEqual(result('user', [{ type: 'text', text: A.slice(0, 500), cache_control: { type: 'ephemeral' } }, { type: 'text', text: A.slice(500) }]), result('user', `${A.slice(0, 500)}\n${A.slice(500)}`), 'text blocks, one marked');
    assert.deepEqual(result('user', []), result('user', ''), 'no blocks is an empty result');
    // Anything but text blocks still counts by its JSON: vLLM sends an image on as a turn of its own.
    assert.notDeepEqual(result('user', [{ type: 'text', text: A }, { type: 'image', source: { type: 'url', url: 'u' } }]), str, 'an image');
    // vLLM writes an assistant turn's tool_result as the Python text of its content: a list is not its text.
    assert.notDeepEqual(result('assistant', [{ type: 'text', text: A }]), result('assistant', A), 'in an assistant turn');
  });
});

describe('chat content parts vLLM reads as text', () => {
  // vLLM's chat parser takes the text of a `thinking` part from `thinking` and of a `refusal`
  // part from `refusal`, and joins it with the turn's other texts like a text part's.
  const A = SYSTEM.slice(0, 1000);
  const B = SYSTEM.slice(1000, 2600);
  const chat = (content: unknown, path = '/v1/chat/completions') =>
    understand(req({}, { model: 'm', messages: [{ role: 'user', content: 'Fix the bug' }, { role: 'assistant', content }, { role: 'user', content: LONG_USER }] }, path), config).blocks;

  test('an assistant turn with a `thinking` or a `refusal` part is that text joined with a newline', () => {
    const joined = chat(`${A}\n${B}`);
    // The part's text ends past block 10 and the user turn after it fills more: a JSON-hashed part differs from there on.
    assert.ok(joined.length >= 16, `${joined.length} blocks: the turns after the part must fill blocks`);
    assert.deepEqual(chat([{ type: 'text', text: A }, { type: 'thinking', thinking: B, closed: true }]), joined, 'a thinking part');
    assert.deepEqual(chat([{ type: 'text', text: A }, { type: 'refusal', refusal: B }]), joined, 'a refusal part');
    assert.deepEqual(chat([{ type: 'thinking', thinking: A }, { type: 'output_text', text: B }]), joined, 'a thinking part, then output_text');
    // vLLM reads the type's own field, not `text`.
    assert.deepEqual(chat([{ type: 'text', text: A }, { type: 'thinking', thinking: B, text: 'other' }]), joined, 'a thinking part with a text too');
    assert.notDeepEqual(chat([{ type: 'text', text: A }, { type: 'thinking', thinking: B.replace('meticulous', 'careless') }]), joined, 'other thinking, another prompt');
  });

  test('without a string in its own field a part counts as before; Messages and Responses parts are unchanged', () => {
    const asJson = (part: object) => `assistant\u001e${JSON.stringify(part)}`;
    for (const part of [{ type: 'thinking', thinking: 7 }, { type: 'thinking' }, { type: 'refusal', refusal: 7 }, { type: 'text', text: 7 }, { type: 'reasoning', thinking: 'x' }, { type: 'tool_reference' }, { type: 'tool_reference', name: 3 }]) {
      assert.equal(canonicalPrompt({ messages: [{ role: 'assistant', content: [part] }] }), asJson(part), JSON.stringify(part));
    }
    assert.equal(canonicalPrompt({ messages: [{ role: 'assistant', content: [{ type: 'thinking', text: 'x' }] }] }), 'assistant\u001ex', 'a thinking part with only a text');
    // vLLM's Messages endpoint moves a thinking block to the turn's reasoning: kvgate keeps its JSON there.
    const block = { type: 'thinking', thinking: 'x', signature: 's' };
    assert.equal(messagesPrompt({ messages: [{ role: 'assistant', content: [block] }] }), asJson(block), 'a Messages thinking block');
    const refusal = { type: 'refusal', refusal: 'x' };
    assert.equal(responsesPrompt({ input: [{ role: 'assistant', content: [refusal] }] }), asJson(refusal), 'a Responses refusal part');
  });

  // vLLM skips a text or refusal part whose field is null or missing before it joins the turn's
  // texts (PART_TYPES_TO_SKIP_NONE_CONTENT in chat_utils.py): the engine's prompt has neither the
  // part nor a newline for it.
  test('a text or refusal part whose field is null or missing is not in the prompt, nor its newline', () => {
    const joined = chat(`${A}\n${B}`);
    // The dropped part sits after block 3 and the turns after it fill more: its JSON differs from there on.
    assert.ok(joined.length >= 16, `${joined.length} blocks: the turns after the part must fill blocks`);
    const text = (t: string) => ({ type: 'text', text: t });
    for (const gone of [{ type: 'text', text: null }, { type: 'text' }, { type: 'refusal', refusal: null }, { type: 'refusal' }, { type: 'refusal', text: 'not read' }, { type: 'text', text: null, cache_control: { type: 'ephemeral' } }]) {
      const name = JSON.stringify(gone);
      assert.deepEqual(chat([text(A), gone, text(B)]), joined, `${name} between two texts`);
      assert.deepEqual(chat([gone, text(A), text(B)]), joined, `${name} first`);
      assert.deepEqual(chat([text(A), text(B), gone]), joined, `${name} last`);
    }
    assert.deepEqual(chat([text(A), { type: 'text', text: null }, { type: 'refusal' }, text(B)]), joined, 'two in a row');
  });

  // vLLM hands a string-content template a tool_reference part's `name` as the part's text.
  test('a `tool_reference` part is its name, joined with the other parts', () => {
    const withName = chat(`${A}\nget_weather\n${B}`);
    assert.ok(withName.length >= 16, `${withName.length} blocks: the turns after the part must fill blocks`);
    assert.deepEqual(chat([{ type: 'text', text: A }, { type: 'tool_reference', name: 'get_weather' }, { type: 'text', text: B }]), withName);
    assert.notDeepEqual(chat([{ type: 'text', text: A }, { type: 'tool_reference', name: 'get_time' }, { type: 'text', text: B }]), withName, 'another tool, another prompt');
    // In a tool turn, where clients send them (a tool search's result).
    const tool = (content: unknown) => understand(req({}, { model: 'm', messages: [{ role: 'user', content: LONG_USER }, { role: 'tool', tool_call_id: 'c1', content }, { role: 'user', content: SYSTEM }] }), config).blocks;
    assert.deepEqual(tool([{ type: 'tool_reference', name: 'get_weather' }, { type: 'tool_reference', name: 'get_time' }]), tool('get_weather\nget_time'), 'a tool turn of references');
  });
});

describe('tools follow the system prompt (chat completions)', () => {
  const tools = (name: string) => [{ type: 'function', function: { name, description: 'd'.repeat(600), parameters: { type: 'object' } } }];
  const chat = (messages: object[], t?: unknown) => understand(req({}, { model: 'm', ...(t ? { tools: t } : {}), messages }), config).blocks;

  test('the same system (or developer) prompt with other tools, or none, shares its blocks', () => {
    for (const role of ['system', 'developer']) {
      const convo = [{ role, content: SYSTEM }, { role: 'user', content: 'hi' }];
      const a = chat(convo, tools('a'));
      const b = chat(convo, tools('b'));
      assert.deepEqual(a.slice(0, 11), b.slice(0, 11), role);
      assert.deepEqual(a.slice(0, 11), chat(convo).slice(0, 11), role);
      assert.notEqual(a.at(-1), b.at(-1), 'the tools count');
    }
  });

  test('every leading system or developer turn comes before the tools, the first other turn after', () => {
    const convo = [{ role: 'system', content: SYSTEM.slice(0, 1500) }, { role: 'developer', content: SYSTEM.slice(1500) }, { role: 'user', content: LONG_USER }];
    const a = chat(convo, tools('a'));
    const b = chat(convo, tools('b'));
    assert.deepEqual(a.slice(0, 11), b.slice(0, 11));
    // Without a leading system turn the tools open the prompt.
    const userFirst = [{ role: 'user', content: LONG_USER }, { role: 'system', content: SYSTEM }];
    assert.notEqual(chat(userFirst, tools('a'))[0], chat(userFirst, tools('b'))[0]);
  });
});

describe('fields that change the rendered prompt seed the chain', () => {
  const chat = (extra: object) => understand(req({}, { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' }], ...extra }), config).blocks;

  test('chat: reasoning_effort, chat_template, chat_template_kwargs, documents', () => {
    const plain = chat({});
    const seen = new Set([plain[0]]);
    for (const extra of [
      { reasoning_effort: 'high' },
      { reasoning_effort: 'low' },
      { chat_template: '{{ messages }}' },
      { chat_template_kwargs: { enable_thinking: false } },
      { chat_template_kwargs: { enable_thinking: true } },
      { documents: [{ title: 't', text: 'doc' }] },
      { reasoning_effort: 'high', chat_template_kwargs: { enable_thinking: false } },
    ]) {
      const b = chat(extra);
      assert.equal(b.length, plain.length);
      assert.ok(!seen.has(b[0]), JSON.stringify(extra));
      seen.add(b[0]);
    }
    // The same fields in another order in the body are the same prompt.
    assert.deepEqual(chat({ chat_template_kwargs: { a: 1 }, reasoning_effort: 'high' }), chat({ reasoning_effort: 'high', chat_template_kwargs: { a: 1 } }));
  });

  test('absent (or null) fields leave the hashes as they were: the model and cache_salt only', () => {
    const body = { model: 'm', messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'hi' }] };
    const { block_chars: chars, max_blocks: blocks } = config.prefix;
    const expected = (salt: string) => chainedBlockHashes(canonicalPrompt(body)!, chars, blocks, seedFor(`m\u0000${salt}`)).map((h) => h.toString(16).padStart(16, '0'));
    assert.deepEqual(chat({}), expected(''));
    assert.deepEqual(chat({ reasoning_effort: null, chat_template: null, chat_template_kwargs: null, documents: null, temperature: 0.2, stream: true }), expected(''));
    assert.deepEqual(chat({ cache_salt: 's' }), expected('s'));
  });

  test('the seed is the hash of the model, cache_salt and the fields as one JSON text, fields in a fixed order', () => {
    // Pinned: any other way of hashing them must give these seeds, or every prefix key moves.
    const documents = Array.from({ length: 40 }, (_, i) => ({ title: `doc ${i} é😀`, text: `Paragraph ${i}: "quoted", \\ and \ud800 alone. `.repeat(20), meta: { n: i, tags: ['a', null, true] } }));
    const cases: Array<[string, object, object, (b: Record<string, unknown>) => string | undefined]> = [
      ['/v1/chat/completions', { documents, chat_template_kwargs: { enable_thinking: false }, reasoning_effort: 'high', chat_template: 't' }, { reasoning_effort: 'high', chat_template: 't', chat_template_kwargs: { enable_thinking: false }, documents }, canonicalPrompt],
      ['/v1/responses', { reasoning: { effort: 'low', summary: 'auto' } }, { 'reasoning.effort': 'low' }, responsesPrompt],
      ['/v1/messages', { output_config: { effort: 'high' }, chat_template_kwargs: { a: [1, 2] } }, { chat_template_kwargs: { a: [1, 2] }, 'output_config.effort': 'high' }, messagesPrompt],
    ];
    const { block_chars: chars, max_blocks: blocks } = config.prefix;
    const firsts: string[] = [];
    for (const [path, fields, seeded, render] of cases) {
      const body = { model: 'm', cache_salt: 's', ...(path.endsWith('responses') ? { instructions: SYSTEM } : path.endsWith('messages') ? { system: SYSTEM } : { messages: [{ role: 'system', content: SYSTEM }] }), ...fields };
      const got = understand(req({}, body, path), config).blocks;
      const seed = seedFor(`m\u0000s\u0000${JSON.stringify(seeded)}`);
      assert.deepEqual(got, chainedBlockHashes(render(body)!, chars, blocks, seed).map((h) => h.toString(16).padStart(16, '0')), path);
      firsts.push(got[0]!);
    }
    assert.deepEqual(firsts, PINNED_FIRST_BLOCKS);
  });

  test('Responses: reasoning.effort; Messages: chat_template_kwargs and output_config.effort', () => {
    const resp = (extra: object) => understand(req({}, { model: 'm', instructions: SYSTEM, input: 'hi', ...extra }, '/v1/responses'), config).blocks[0];
    assert.notEqual(resp({ reasoning: { effort: 'high' } }), resp({ reasoning: { effort: 'low' } }));
    assert.notEqual(resp({ reasoning: { effort: 'high' } }), resp({}));
    assert.equal(resp({ reasoning: { summary: 'auto' } }), resp({}), 'only the effort');
    const msgs = (extra: object) => understand(req({}, { model: 'm', system: SYSTEM, messages: [{ role: 'user', content: 'hi' }], ...extra }, '/v1/messages'), config).blocks[0];
    assert.notEqual(msgs({ chat_template_kwargs: { enable_thinking: false } }), msgs({}));
    assert.notEqual(msgs({ output_config: { effort: 'high' } }), msgs({}));
  });
});
