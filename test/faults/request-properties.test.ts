/**
 * Property-based tests (fast-check) over request understanding (src/request/): for any bytes,
 * headers and path, body parsing and keying never throw (only KvgateError's defined request
 * errors), give well-formed, deterministic keys, and stay bounded: the canonical prompt grows at
 * most linearly with the body and stops at the prefix the key reads, and adversarial bodies at
 * the largest accepted size cost about what a plain prompt of that size costs, within a small heap.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { before, describe, test } from 'node:test';
import fc from 'fast-check';
import { parseConfig } from '../../src/config/load.js';
import { KvgateError } from '../../src/errors.js';
import { MAX_JSON_DEPTH, parseJsonBody } from '../../src/request/body.js';
import { initHashing } from '../../src/request/hashing.js';
import { chainedBlockHashes } from '../../src/request/hashing.js';
import { understand } from '../../src/request/keys.js';
import { canonicalPrompt } from '../../src/request/prompt.js';
import type { RequestInfo } from '../../src/request/request.js';

const FORWARD = parseConfig({ limits: { max_body_bytes: 64 * 1024 }, workers: [{ id: 'w', cluster: 'w' }] });
const REJECT = parseConfig({ limits: { max_body_bytes: 64 * 1024, malformed_body: 'reject' }, workers: [{ id: 'w', cluster: 'w' }] });
const RUNS = { numRuns: 300 };

before(async () => {
  await initHashing();
});

// ---- generators --------------------------------------------------------------------------------

/** Strings from JSON's own alphabet, so random text often gets deep into the parser. */
const jsonish = fc.string({
  unit: fc.constantFrom('{', '}', '[', ']', '"', '\\', ',', ':', ' ', '1', '-', 'e', '.', 'a', 'u', 'null', 'true', '\\u00', '\u2028', 'é', '😀', '\u0000'),
  maxLength: 300,
});

const anyJson = fc.jsonValue({ maxDepth: 6 });
const content = fc.oneof(
  fc.string(),
  fc.array(fc.oneof(fc.record({ type: fc.constant('text'), text: fc.string() }), fc.record({ type: fc.constant('image_url'), image_url: fc.record({ url: fc.string() }) }), anyJson), { maxLength: 5 }),
  anyJson,
);
const message = fc.oneof(fc.record({ role: fc.oneof(fc.constantFrom('system', 'user', 'assistant', 'tool'), anyJson), content }, { requiredKeys: [] }), anyJson);
/** OpenAI-shaped bodies with every field possibly of the wrong type. */
const openAiBody = fc.record(
  {
    model: fc.oneof(fc.string(), anyJson),
    messages: fc.oneof(fc.array(message, { maxLength: 8 }), anyJson),
    prompt: fc.oneof(fc.string(), fc.array(fc.oneof(fc.string(), fc.integer(), fc.array(fc.integer(), { maxLength: 5 })), { maxLength: 8 }), anyJson),
    tools: fc.oneof(fc.array(anyJson, { maxLength: 3 }), anyJson),
    user: fc.oneof(fc.string(), anyJson),
    metadata: fc.oneof(fc.record({ session_id: fc.oneof(fc.string(), anyJson) }), anyJson),
  },
  { requiredKeys: [] },
);

const bodyBytes = fc.oneof(
  fc.uint8Array({ maxLength: 512 }).map((b) => Buffer.from(b)),
  jsonish.map((s) => Buffer.from(s)),
  openAiBody.map((b) => Buffer.from(JSON.stringify(b))),
  // Valid JSON with one byte flipped: mostly-valid input is where parsers break.
  fc.tuple(openAiBody, fc.nat(), fc.integer({ min: 0, max: 255 })).map(([b, at, byte]) => {
    const buf = Buffer.from(JSON.stringify(b));
    if (buf.length > 0) buf[at % buf.length] = byte;
    return buf;
  }),
);

const headerName = fc.oneof(fc.constantFrom('x-session-id', 'cookie', 'content-type', 'content-length', 'X-Session-Id'), fc.string({ maxLength: 12 }));
const headerValue = fc.oneof(
  fc.string({ maxLength: 64 }),
  fc.constantFrom('kvgate-session=abc', 'kvgate-session=%E0%A4%A', 'a=b; kvgate-session=; c', '=;;=', 'kvgate-session="q"'),
  fc.uint8Array({ maxLength: 32 }).map((b) => Buffer.from(b).toString('latin1')),
);
const request: fc.Arbitrary<RequestInfo> = fc.record({
  method: fc.constantFrom('GET', 'POST', '', 'PATCH'),
  path: fc.oneof(fc.constantFrom('/v1/chat/completions', '/v1/completions', '/v1/embeddings', '', '*'), fc.string({ maxLength: 40 })),
  headers: fc.array(fc.tuple(headerName, headerValue), { maxLength: 6 }).map((pairs) => new Map(pairs.map(([k, v]) => [k.toLowerCase(), v]))),
  body: fc.option(bodyBytes, { nil: undefined }),
}, { requiredKeys: ['method', 'path', 'headers'] }) as fc.Arbitrary<RequestInfo>;

// ---- properties --------------------------------------------------------------------------------

describe('body parsing', () => {
  test('never throws, and ok means a plain object', () => {
    fc.assert(
      fc.property(bodyBytes, (b) => {
        const r = parseJsonBody(b);
        if (r.ok) assert.ok(r.value !== null && typeof r.value === 'object' && !Array.isArray(r.value), "r.value !== null && typeof r.value === 'object' && !Array.isArray(r.value)");
        else assert.ok(['empty', 'not_utf8', 'not_json', 'not_object', 'too_complex'].includes(r.reason));
      }),
      { numRuns: 1000 },
    );
  });

  test('agrees with JSON.parse on every valid UTF-8 JSON document within the limits', () => {
    fc.assert(
      fc.property(anyJson, (v) => {
        const r = parseJsonBody(Buffer.from(JSON.stringify(v)));
        const isObject = v !== null && typeof v === 'object' && !Array.isArray(v);
        assert.equal(r.ok, isObject);
        if (r.ok) assert.deepEqual(r.value, JSON.parse(JSON.stringify(v)));
      }),
      RUNS,
    );
  });

  test('brackets inside strings never count, whatever quotes and backslash runs surround them', () => {
    const noise = fc.array(fc.constantFrom('"', '\\', '\\\\', 'a', ']'), { maxLength: 12 }).map((p) => p.join(''));
    // The depth scan skips strings to their closing quote; an escaped quote (odd backslash run)
    // must not end one early, or the brackets after it would count as nesting.
    fc.assert(
      fc.property(noise, noise, fc.constantFrom('[', '{'), (before, after, open) => {
        // Past MAX_JSON_DEPTH brackets: a string ended early would be refused as too deep.
        const text = `${before}${open.repeat(MAX_JSON_DEPTH + 10)}${after}`;
        const r = parseJsonBody(Buffer.from(JSON.stringify({ s: text, t: [text] })));
        assert.ok(r.ok, JSON.stringify(text));
        assert.equal(r.value['s'], text);
      }),
      RUNS,
    );
  });

  test('nesting is read up to MAX_JSON_DEPTH and refused past it, however the brackets mix', () => {
    let refused = 0;
    fc.assert(
      // Lengths drawn around the limit itself: fast-check's arrays are short unless told otherwise.
      fc.property(fc.array(fc.constantFrom('[', '{"k":'), { minLength: MAX_JSON_DEPTH - 4, maxLength: MAX_JSON_DEPTH + 2 }), (opens) => {
        const inner = opens.map((o) => o).join('');
        const closes = opens.map((o) => (o === '[' ? ']' : '}')).reverse().join('');
        const doc = `{"x":${inner}1${closes}}`;
        const r = parseJsonBody(Buffer.from(doc));
        const depth = opens.length + 1;
        if (depth <= MAX_JSON_DEPTH) assert.ok(r.ok, `depth ${depth} is read`);
        else {
          assert.deepEqual(r, { ok: false, reason: 'too_complex' });
          refused++;
        }
      }),
      RUNS,
    );
    assert.ok(refused > 0, 'no body past the limit was drawn');
  });
});

describe('keying', () => {
  test('never throws except the defined request errors; keys are well-formed and deterministic', () => {
    fc.assert(
      fc.property(request, fc.boolean(), (req, strict) => {
        const cfg = strict ? REJECT : FORWARD;
        let first;
        try {
          first = understand(req, cfg);
        } catch (err) {
          assert.ok(err instanceof KvgateError, `threw ${String(err)}`);
          assert.ok(err.code === 'bad_request' || err.code === 'body_too_large', err.code);
          return;
        }
        const again = understand(req, cfg);
        assert.deepEqual(again, first, 'deterministic');
        const key = first.key;
        if (key?.kind === 'session') assert.match(key.hash, /^[0-9a-f]{32}$/);
        if (key?.kind === 'prefix') assert.match(key.hash, /^[0-9a-f]{16}$/);
      }),
      { numRuns: 1000 },
    );
  });

  test('the canonical prompt is linear in the body and stopping at the keyed prefix never changes the key', () => {
    const { block_chars: chars, max_blocks: blocks } = FORWARD.prefix;
    const chain = (text: string) => chainedBlockHashes(text, chars, blocks, 0n);
    fc.assert(
      fc.property(openAiBody, fc.integer({ min: 0, max: 4000 }), (body, pad) => {
        // Pad a message so some prompts run past the keyed prefix.
        const padded = { ...body, messages: Array.isArray(body.messages) ? [...body.messages, { role: 'user', content: 'p'.repeat(pad) }] : body.messages };
        const bytes = Buffer.byteLength(JSON.stringify(padded));
        const full = canonicalPrompt(padded);
        const capped = canonicalPrompt(padded, chars * blocks);
        assert.ok((full?.length ?? 0) <= 2 * bytes + 16, `canonical ${full?.length} for ${bytes} bytes`);
        assert.equal(capped === undefined, full === undefined);
        if (full !== undefined && capped !== undefined) {
          assert.ok(full.startsWith(capped), "full.startsWith(capped)");
          assert.deepEqual(chain(capped), chain(full));
        }
      }),
      RUNS,
    );
  });

  test('bodies of every adversarial shape, at the largest accepted size, cost about a plain prompt and fit a small heap', () => {
    // A child process with a 64 MB heap, so running out is a clean failure, not this runner's.
    // Time is compared with a plain prompt of the same size in the same run (never a wall clock).
    const child = path.resolve(import.meta.dirname, '../helpers/request-bounds-child.ts');
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--max-old-space-size=64', child], {
      encoding: 'utf8',
      env: { ...process.env, KVGATE_BOUNDS_BYTES: String(4 * 1024 * 1024) },
      timeout: 120_000,
    });
    assert.equal(r.status, 0, `child failed (${r.signal ?? r.status}): ${r.stderr.slice(-2000)}`);
    const { ratios } = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { ratios: Record<string, number> };
    assert.ok(Object.keys(ratios).length >= 10, "Object.keys(ratios).length >= 10");
    // The bound is for shapes that make the work superlinear: at 4 MB a quadratic path costs
    // thousands of times a plain prompt. 30× leaves room for a loaded machine's noise and the GC
    // that millions of tiny values cause in a 64 MB heap (seen at 10-14× under load) while
    // still failing on any such path.
    for (const [shape, ratio] of Object.entries(ratios)) assert.ok(ratio < 30, `${shape}: ${ratio.toFixed(1)}× a plain prompt`);
  });
});
