/**
 * The one-pass prompt hasher (src/request/prompt-blocks.ts) against the reference it replaced on
 * the request path: chainedBlockHashes(canonicalPrompt(body, blockChars × maxBlocks)), with
 * hashText of the whole text under one block. Any body fast-check makes, including prompts of many
 * blocks, surrogate pairs split at block and part boundaries, lone surrogates, tools, content
 * arrays, tool calls, prompt arrays and fields of the wrong type, must give the same hashes, or
 * none alike.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import fc from 'fast-check';
import { chainedBlockHashes, hashText, initHashing } from '../../src/request/hashing.js';
import { canonicalPrompt, messagesPrompt, responsesPrompt, type PromptApi } from '../../src/request/prompt.js';
import { promptBlocks } from '../../src/request/prompt-blocks.js';
import { directXxh64, withoutDirectXxh64 } from '../../src/util/xxhash.js';

before(async () => {
  await initHashing();
});

const RENDER = { openai: canonicalPrompt, messages: messagesPrompt, responses: responsesPrompt } as const;

function reference(body: Record<string, unknown>, blockChars: number, maxBlocks: number, seed: bigint, api: PromptApi = 'openai') {
  const text = RENDER[api](body, blockChars * maxBlocks);
  if (!text) return undefined;
  const chain = chainedBlockHashes(text, blockChars, maxBlocks, seed);
  return { chain, short: chain.length === 0 ? hashText(text, seed) : undefined };
}

/** Text with the characters that break naive block cutting: astral pairs, lone halves, multi-byte. */
const text = fc.string({
  unit: fc.constantFrom('a', 'b', ' ', 'é', '€', '😀', '\ud83d', '\ude00', '\u001e', '"', '\u0000', 'xyzxyzxyzxyz'),
  maxLength: 120,
});
const anyJson = fc.jsonValue({ maxDepth: 4 });
const mark = fc.constant({ type: 'ephemeral' });
const textBlock = fc.record({ type: fc.constant('text'), text, cache_control: mark }, { requiredKeys: ['type', 'text'] });
/** Blocks a tool_result may hold, each possibly marked: text, search results and content documents (which hold text blocks). */
const resultBlock = fc.oneof(
  textBlock,
  fc.record({ type: fc.constant('search_result'), content: fc.array(fc.oneof(textBlock, anyJson), { maxLength: 2 }), cache_control: mark }, { requiredKeys: ['type', 'content'] }),
  fc.record({ type: fc.constant('document'), source: fc.record({ type: fc.constant('content'), content: fc.array(fc.oneof(textBlock, anyJson), { maxLength: 2 }) }), cache_control: mark }, { requiredKeys: ['type', 'source'] }),
  anyJson,
);
/**
 * Parts whose text a chat message reads from another field (`thinking`, `refusal`, a
 * `tool_reference`'s `name`), or drops (a `text` or `refusal` part whose field is null or
 * missing), each field possibly null, missing, of the wrong type or beside a `text`.
 */
const textLikePart = fc.record(
  {
    type: fc.constantFrom('thinking', 'refusal', 'reasoning', 'text', 'tool_reference'),
    thinking: fc.oneof(text, anyJson),
    refusal: fc.oneof(text, fc.constant(null), anyJson),
    text: fc.oneof(text, fc.constant(null)),
    name: fc.oneof(text, fc.constant(null), anyJson),
  },
  { requiredKeys: ['type'] },
);
const block = fc.oneof(
  textBlock,
  textLikePart,
  fc.record({ type: fc.constant('image'), source: fc.record({ data: text }), cache_control: mark }, { requiredKeys: ['type'] }),
  fc.record({ type: fc.constant('tool_use'), id: text, name: text, input: anyJson, cache_control: mark }, { requiredKeys: ['type', 'input'] }),
  fc.record({ type: fc.constant('tool_result'), tool_use_id: text, content: fc.oneof(text, fc.array(resultBlock, { maxLength: 3 })), cache_control: mark }, { requiredKeys: ['type', 'content'] }),
  text,
  anyJson,
);
/** Tool definitions, possibly marked with cache_control (Messages), or a value of the wrong type. */
const toolList = fc.oneof(fc.array(fc.oneof(anyJson, fc.record({ name: text, input_schema: anyJson, cache_control: mark }, { requiredKeys: ['name'] })), { maxLength: 3 }), anyJson);
const content = fc.oneof(
  text,
  fc.array(fc.oneof(fc.record({ type: fc.constant('text'), text }), fc.record({ type: fc.constant('image_url'), image_url: fc.record({ url: text }) }), block, text, anyJson), { maxLength: 5 }),
  anyJson,
);
/** An assistant turn's tool calls (chat completions), or a value of the wrong type. */
const toolCalls = fc.oneof(
  fc.array(fc.record({ id: text, type: fc.constant('function'), function: fc.record({ name: text, arguments: text }) }), { maxLength: 2 }),
  anyJson,
);
const message = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record(
      { role: fc.oneof(fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool'), anyJson), content, reasoning: fc.oneof(text, anyJson), tool_calls: toolCalls, tool_call_id: fc.oneof(text, anyJson), name: fc.oneof(text, anyJson) },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: anyJson },
);
const body = fc.record(
  {
    messages: fc.oneof({ weight: 4, arbitrary: fc.array(message, { maxLength: 10 }) }, { weight: 1, arbitrary: anyJson }),
    // A completions prompt: a string, token ids, a batch of strings or of token-id lists, a mix, or another type.
    prompt: fc.oneof(
      text,
      fc.array(fc.integer(), { maxLength: 40 }),
      fc.array(text, { maxLength: 4 }),
      fc.array(fc.array(fc.integer(), { maxLength: 40 }), { maxLength: 4 }),
      fc.array(fc.oneof(text, fc.integer(), fc.array(fc.integer(), { maxLength: 5 })), { maxLength: 8 }),
      anyJson,
    ),
    tools: toolList,
    // Fields that seed the chain (keys.ts) and are not rendered: both renderers must ignore them alike.
    reasoning_effort: fc.oneof(fc.constantFrom('low', 'high'), anyJson),
    chat_template_kwargs: anyJson,
    documents: anyJson,
  },
  { requiredKeys: [] },
) as fc.Arbitrary<Record<string, unknown>>;

/** Anthropic Messages bodies, fields possibly of the wrong type. */
const messagesBody = fc.record(
  {
    system: fc.oneof(text, fc.array(block, { maxLength: 3 }), anyJson),
    messages: fc.oneof({ weight: 4, arbitrary: fc.array(fc.oneof(fc.record({ role: fc.constantFrom('system', 'developer', 'user', 'assistant'), content: fc.oneof(text, fc.array(block, { maxLength: 4 })) }), anyJson), { maxLength: 8 }) }, { weight: 1, arbitrary: anyJson }),
    tools: toolList,
  },
  { requiredKeys: [] },
) as fc.Arbitrary<Record<string, unknown>>;
/** OpenAI Responses bodies: instructions, input as a string or items (turns and typed items). */
const responsesBody = fc.record(
  {
    instructions: fc.oneof(text, anyJson),
    input: fc.oneof(
      text,
      fc.array(
        fc.oneof(
          fc.record({ role: fc.constantFrom('system', 'user', 'assistant', 'developer'), content: fc.oneof(text, fc.array(block, { maxLength: 3 })), name: text }, { requiredKeys: ['role', 'content'] }),
          fc.record({ type: fc.constantFrom('function_call', 'function_call_output', 'reasoning'), call_id: text, output: text, cache_control: fc.constant({ type: 'ephemeral' }) }, { requiredKeys: ['type'] }),
          anyJson,
        ),
        { maxLength: 8 },
      ),
      anyJson,
    ),
    tools: toolList,
    reasoning: fc.oneof(fc.record({ effort: fc.constantFrom('low', 'high') }), anyJson),
  },
  { requiredKeys: [] },
) as fc.Arbitrary<Record<string, unknown>>;

describe('promptBlocks gives exactly the reference hashes', () => {
  for (const [api, arb] of [['messages', messagesBody], ['responses', responsesBody], ['openai', messagesBody], ['messages', body]] as const) {
    test(`${api} path, ${arb === body ? 'OpenAI-shaped' : 'its own'} bodies, small blocks and caps`, () => {
      fc.assert(
        fc.property(arb, fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 40 }), (b, bc, mb) => {
          assert.deepEqual(promptBlocks(api, b, bc, mb, 3n), reference(b, bc, mb, 3n, api));
        }),
        { numRuns: 1000 },
      );
    });
  }

  test('any body, block sizes from 1 to 64 characters, any block cap', () => {
    fc.assert(
      fc.property(body, fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 40 }), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), (b, bc, mb, seed) => {
        assert.deepEqual(promptBlocks('openai', b, bc, mb, seed), reference(b, bc, mb, seed));
      }),
      { numRuns: 2000 },
    );
  });

  test('prompts of many 256-character blocks, cut at the configured cap', () => {
    const long = fc.string({ unit: fc.constantFrom('a', 'é', '😀', '\ud800', ' ', 'the quick brown fox '), minLength: 200, maxLength: 2000 });
    const chat = fc.record({
      messages: fc.array(
        fc.record(
          {
            role: fc.constantFrom('system', 'user', 'assistant', 'tool'),
            content: fc.oneof(
              long,
              fc.array(
                fc.oneof(
                  fc.record({ type: fc.constant('text'), text: long }),
                  fc.record({ type: fc.constant('thinking'), thinking: long }),
                  fc.record({ type: fc.constant('refusal'), refusal: long }),
                  // Parts vLLM drops, between long ones: the joins around them must match at block boundaries.
                  fc.record({ type: fc.constantFrom('text', 'refusal'), text: fc.constant(null), refusal: fc.constant(null) }, { requiredKeys: ['type'] }),
                  fc.record({ type: fc.constant('tool_reference'), name: long }),
                ),
                { maxLength: 4 },
              ),
            ),
            tool_calls: fc.array(fc.record({ id: text, type: fc.constant('function'), function: fc.record({ name: text, arguments: long }) }), { minLength: 1, maxLength: 2 }),
            tool_call_id: text,
          },
          { requiredKeys: ['role', 'content'] },
        ),
        { minLength: 1, maxLength: 12 },
      ),
      tools: fc.oneof(fc.constant(undefined), fc.array(fc.record({ name: long }), { maxLength: 2 })),
    }).map((r) => (r.tools === undefined ? { messages: r.messages } : r)) as fc.Arbitrary<Record<string, unknown>>;
    fc.assert(
      fc.property(chat, fc.integer({ min: 1, max: 600 }), (b, mb) => {
        const got = promptBlocks('openai', b, 256, mb, 7n);
        assert.deepEqual(got, reference(b, 256, mb, 7n));
        // Not vacuous: these bodies reach the hashing of many blocks.
        return got !== undefined;
      }),
      { numRuns: 300 },
    );
  });

  test('edge cases by hand', () => {
    const cases: Array<Record<string, unknown>> = [
      {},
      { prompt: '' },
      { prompt: ['', ''] },
      { prompt: [''] },
      { prompt: [[]] },
      { prompt: [[1, 2], 'a'] },
      { prompt: [[], [1]] },
      { prompt: [null, 'a'] },
      { prompt: 5 },
      { prompt: 5, tools: [{ a: 'x'.repeat(3000) }] },
      { prompt: 5, tools: [{ a: 'x' }] },
      // With 4 × 3 = 12 characters read, a tools part of 11 (`tools` + SEP + `[1,2]`) reaches the
      // cap with its separator, so the reference returns it before looking at the prompt; 10 does not.
      { prompt: 5, tools: [1, 2] },
      { prompt: 5, tools: [1] },
      { prompt: 5, tools: [1, 22] },
      { messages: [] },
      { messages: [{}, {}] },
      { messages: [null, 3, 'x', [1, 2]] },
      { messages: 'nope', prompt: 'p'.repeat(1000) },
      { messages: [{ role: 'user', content: '\ud83d' }, { role: '\ude00', content: 'x'.repeat(600) }] },
      { tools: [], messages: [{ role: 'system', content: [{ type: 'text', text: 'a'.repeat(255) }, { type: 'image_url', image_url: { url: 'u' } }] }] },
      { system: '', messages: [{ role: 'user', content: 'x'.repeat(300) }] },
      { system: [{ type: 'text', text: 's'.repeat(600), cache_control: { type: 'ephemeral' } }], messages: [{ role: 'user', content: [{ type: 'image', source: {}, cache_control: {} }] }] },
      { instructions: '', input: 'u'.repeat(300) },
      { instructions: 'i'.repeat(260), input: [{ type: 'function_call', call_id: 'c', cache_control: {} }, [1], null, { role: 'user', content: 'q' }] },
      { input: 7, tools: [1, 2] },
      // With 4 × 3 = 12 characters read, a leading system turn of 11 reaches the cap with its
      // separator: nothing more is added, not even the tools that would follow it.
      { input: [{ role: 'system', content: 'abcd' }], tools: [1] },
      { messages: [{ role: 'system', content: 'abcd' }], tools: [1] },
      { system: 'abcd', messages: [{ role: 'developer', content: 'x' }], tools: [1] },
      { messages: [{ role: 'developer', content: 'a' }, { role: 'system', content: 'b' }, null, { role: 'user', content: 'c' }], tools: [{ cache_control: {}, n: 'x' }] },
    ];
    for (const c of cases) for (const [bc, mb] of [[256, 512], [4, 3], [1, 1], [255, 2]] as const) {
      for (const api of ['openai', 'messages', 'responses'] as const) {
        assert.deepEqual(promptBlocks(api, c, bc, mb, 1n), reference(c, bc, mb, 1n, api), `${api} ${JSON.stringify(c).slice(0, 80)}`);
      }
    }
  });
});

/**
 * Whole blocks of ASCII text are encoded in runs into the direct hasher's memory and hashed where
 * they lie; from the first run that is not ASCII on, every block goes through h64 of its string.
 * Both must give the reference's hashes (and each other's) wherever the non-ASCII characters
 * fall: at a run's first or last character, astride a block's end, as a lone surrogate, at U+007F
 * and U+0080, or nowhere; with block sizes that make runs of one block and blocks longer than the
 * module's memory.
 */
describe('ASCII runs hashed in place give the same hashes as one string per block', () => {
  const ascii = fc.constantFrom('a', ' ', 'the quick brown fox ', '\u007f', '\u0000', '{"x":1}\n');
  const other = fc.constantFrom('é', '€', '😀', '\ud83d', '\ude00', '\u0080', 'ÿ');
  const mostlyAscii = fc.string({ unit: fc.oneof({ weight: 60, arbitrary: ascii }, { weight: 1, arbitrary: other }), maxLength: 3000 });
  const sizes = fc.oneof(fc.integer({ min: 1, max: 64 }), fc.constantFrom(255, 256, 257, 1000, 16_384, 16_385, 65_536, 65_537));
  const chat = fc.array(fc.record({ role: fc.constantFrom('system', 'user', 'assistant'), content: mostlyAscii }), { minLength: 1, maxLength: 8 }).map((messages) => ({ messages }));

  test('the direct hasher is loaded, so the tests below reach it', () => {
    assert.ok(directXxh64());
  });

  test('chat bodies of mostly ASCII text, any block size and cap', () => {
    fc.assert(
      fc.property(chat, sizes, fc.integer({ min: 1, max: 600 }), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }), (b, bc, mb, seed) => {
        const got = promptBlocks('openai', b, bc, mb, seed);
        assert.deepEqual(got, reference(b, bc, mb, seed));
        assert.deepEqual(got, withoutDirectXxh64(() => promptBlocks('openai', b, bc, mb, seed)));
      }),
      { numRuns: 1500 },
    );
  });

  test('huge prompts: one character out of ASCII anywhere, or none', () => {
    const base = 'All work and no play makes Jack a dull boy. '.repeat(10_000).slice(0, 400_000);
    const places = [undefined, 0, 1, 255, 256, 257, 16_383, 16_384, 16_385, 65_535, 65_536, 131_071, 399_999];
    for (const at of places) {
      for (const ch of ['é', '😀', '\ud83d', '\u0080']) {
        const prompt = at === undefined ? base : base.slice(0, at) + ch + base.slice(at + 1);
        const b = { messages: [{ role: 'user', content: prompt }] };
        for (const [bc, mb] of [[256, 512], [256, 2000], [1, 600], [16_384, 30], [70_000, 4]] as const) {
          const got = promptBlocks('openai', b, bc, mb, 11n);
          assert.deepEqual(got, reference(b, bc, mb, 11n), `at ${at} ${JSON.stringify(ch)} ${bc}x${mb}`);
          assert.deepEqual(got, withoutDirectXxh64(() => promptBlocks('openai', b, bc, mb, 11n)));
        }
        if (at === undefined) break;
      }
    }
  });

  test('empty and all non-ASCII prompts', () => {
    for (const content of ['', 'x', '€'.repeat(5000), '😀'.repeat(3000), '\ud83d'.repeat(700), 'a'.repeat(256) + '€'.repeat(256) + 'a'.repeat(256)]) {
      const b = { messages: [{ role: 'user', content }] };
      for (const [bc, mb] of [[256, 512], [3, 100]] as const) {
        assert.deepEqual(promptBlocks('openai', b, bc, mb, 5n), reference(b, bc, mb, 5n));
        assert.deepEqual(promptBlocks('openai', b, bc, mb, 5n), withoutDirectXxh64(() => promptBlocks('openai', b, bc, mb, 5n)));
      }
    }
  });
});
