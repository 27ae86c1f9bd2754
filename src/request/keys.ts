/**
 * Routing keys. A request's key says which cached KV state it would reuse:
 *  1. a session id from the configured header, else the configured cookie, else the body's own
 *     conversation ids (only on the configured paths, by API): OpenAI chat and completions
 *     `metadata.session_id`; Responses `conversation` first, then the same; Anthropic Messages
 *     `metadata.user_id`;
 *  2. else `prompt_cache_key` (OpenAI chat, completions and Responses): the client's own name for
 *     "requests that should share a cache", kept sticky like a session but never mixed up with one;
 *  3. else the OpenAI body's `user` (chat, completions, Responses): an end user, who may hold many
 *     conversations, and a field OpenAI deprecates (for `safety_identifier`, and for
 *     `prompt_cache_key` where caching is meant), so an explicit cache key outranks it;
 *  4. otherwise a hash of the first blocks of the canonical prompt, seeded with the model (and
 *     `cache_salt` and the fields that change the rendered prompt: promptOptions), so requests
 *     sharing a system prompt share a key;
 *  5. otherwise none: the request is routed by load alone.
 * Raw session ids never leave this module: keys carry only their hash. A Responses request's
 * `previous_response_id` is not a key but a pin (the gate sends it to the worker that stored that
 * response); it is hashed here like a session id.
 */
import { parse as parseCookies } from 'cookie';
import type { Config } from '../config/schema.js';
import { KvgateError } from '../errors.js';
import { objectField, parseJsonBody, stringField, type ParsedBody } from './body.js';
import { hashSessionId, hex64, seedFor } from './hashing.js';
import { promptBlocks } from './prompt-blocks.js';
import { promptApiOf, stableJson, type PromptApi } from './prompt.js';
import type { RequestInfo } from './request.js';

export type KeySource =
  | 'header'
  | 'cookie'
  | 'body_user'
  | 'body_metadata'
  | 'body_conversation'
  | 'body_metadata_user_id'
  | 'prompt_cache_key'
  | 'prompt_prefix';

export interface RoutingKey {
  kind: 'session' | 'prefix';
  source: KeySource;
  /** Hex hash; safe to store and log. */
  hash: string;
  /**
   * A session's hash under the previous session hash key, while a rotation keeps one
   * (`--session-hash-key-previous`): where its affinity was recorded before the rotation.
   */
  previousHash?: string;
}

export interface Understanding {
  key: RoutingKey | undefined;
  model: string | undefined;
  /**
   * Chained hashes (hex) of the prompt's leading whole blocks, for prefix matching; empty when the
   * request carries no prompt. Block i's hash covers blocks 0..i, seeded with the model, any
   * `cache_salt` and any field that changes the rendered prompt (promptOptions), so equal hashes
   * mean an equal prefix for the same model, salt and rendering.
   */
  blocks: string[];
  /** Why the body gave no key, when it was read and unusable (for logs and metrics). */
  bodyProblem?: Exclude<ParsedBody, { ok: true }>['reason'];
  /**
   * The stored response this request needs, hashed like a session id: a Responses request's
   * `previous_response_id`, or the id in a `/v1/responses/{id}` path (retrieve, delete, cancel,
   * input items). It lives on the worker that produced it, so the gate sends the request there.
   */
  storedResponse?: string;
  /** `storedResponse` under the previous session hash key, while a rotation keeps one. */
  storedResponsePrevious?: string;
}

/**
 * The keys session ids and stored response ids are hashed under (hashing.ts `hashSessionId`):
 * the gate's own (none: plain SHA-256) and, while a rotation keeps it, the one before it.
 */
export interface SessionHashKeys {
  current: Uint8Array | undefined;
  previous: Uint8Array | undefined;
}

/** No keys: plain SHA-256, no rotation. */
export const NO_HASH_KEYS: SessionHashKeys = Object.freeze({ current: undefined, previous: undefined });

/** Longest session id accepted; longer values are hashed only up to here (they are still unique enough). */
const MAX_SESSION_ID_CHARS = 1024;

/**
 * `keys`: what session ids (and stored response ids) are hashed under (hashing.ts
 * `hashSessionId`): the gate's key, when it has one, and during a rotation the previous one, under
 * which session keys and stored responses also carry a hash. Prompt blocks are never keyed (their
 * hashes must match across every gate and the simulator, and a prompt hash reveals only a prompt
 * one already has).
 */
export function understand(req: RequestInfo, cfg: Config, keys: SessionHashKeys = NO_HASH_KEYS): Understanding {
  const k = cfg.keys;
  const prompt = readPrompt(req, cfg);
  prompt.responseId ??= responseOfPath(req.path, k.session_paths);
  const fromHeader = headerValue(req.headers.get(k.session_header));
  if (fromHeader) return answer(prompt, keys, sessionKey(fromHeader, 'header', keys));

  const cookieHeader = req.headers.get('cookie');
  if (cookieHeader) {
    const fromCookie = safeCookie(cookieHeader, k.session_cookie);
    if (fromCookie) return answer(prompt, keys, sessionKey(fromCookie, 'cookie', keys));
  }
  if (prompt.body && k.body_session_fields) {
    const fromBody = bodyKey(prompt.body, prompt.api, keys);
    if (fromBody) return answer(prompt, keys, fromBody);
  }
  return answer(prompt, keys, prompt.prefixKey);
}

/**
 * The answer, built field by field: spreading the prompt's facts (`{ ...prompt, key }`) copied an
 * object whose shape varies by request through V8's generic path, and carried the parsed body
 * and other internals out with it.
 */
function answer(prompt: PromptFacts, keys: SessionHashKeys, key: RoutingKey | undefined): Understanding {
  const u: Understanding = { key, model: prompt.model, blocks: prompt.blocks };
  if (prompt.bodyProblem !== undefined) u.bodyProblem = prompt.bodyProblem;
  // A stored response's id, hashed here alone: under the gate's key, and during a rotation the previous one.
  const id = prompt.responseId;
  if (id !== undefined) {
    u.storedResponse = responseIdHash(id, keys.current);
    if (keys.previous !== undefined) u.storedResponsePrevious = responseIdHash(id, keys.previous);
  }
  return u;
}

/** The body's own session or cache key, by API, in the order of this module's comment. */
function bodyKey(body: Record<string, unknown>, api: PromptApi, keys: SessionHashKeys): RoutingKey | undefined {
  const metadata = objectField(body, 'metadata');
  if (api === 'messages') {
    const userId = metadata && stringField(metadata, 'user_id');
    return userId ? sessionKey(userId, 'body_metadata_user_id', keys) : undefined;
  }
  if (api === 'responses') {
    const conversation = conversationId(body['conversation']);
    if (conversation) return sessionKey(conversation, 'body_conversation', keys);
  }
  const metaSession = metadata && stringField(metadata, 'session_id');
  if (metaSession) return sessionKey(metaSession, 'body_metadata', keys);
  const cacheKey = stringField(body, 'prompt_cache_key');
  // Its own namespace: a cache key "abc" and a session "abc" are different things.
  if (cacheKey) return sessionKey(`${CACHE_KEY_NAMESPACE}${cacheKey}`, 'prompt_cache_key', keys);
  const user = stringField(body, 'user');
  if (user) return sessionKey(user, 'body_user', keys);
  return undefined;
}

/**
 * `/v1/responses/{id}` and what hangs below it (`/cancel`, `/input_items`), for each configured
 * Responses path: the id (not hashed), else undefined. Cheap for every other path: one suffix test per
 * configured path, only when the path is longer than it.
 */
function responseOfPath(path: string, paths: readonly string[]): string | undefined {
  for (const p of paths) {
    if (path.length <= p.length + 1 || path.charCodeAt(p.length) !== 0x2f || !path.startsWith(p) || promptApiOf(p) !== 'responses') continue;
    const end = path.indexOf('/', p.length + 1);
    const id = path.slice(p.length + 1, end < 0 ? undefined : end);
    return id ? decodeSegment(id) : undefined;
  }
  return undefined;
}

/** A percent-encoded path segment as the client meant it; left as is when it does not decode. */
function decodeSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Responses' `conversation`: an id, or an object carrying one. */
function conversationId(v: unknown): string | undefined {
  if (typeof v === 'string') return v || undefined;
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) return stringField(v as Record<string, unknown>, 'id') || undefined;
  return undefined;
}

/** Prefix of a `prompt_cache_key` before hashing (a control character no header or cookie carries). */
const CACHE_KEY_NAMESPACE = 'prompt_cache_key\u0000';

interface PromptFacts {
  model: string | undefined;
  blocks: string[];
  api: PromptApi;
  body?: Record<string, unknown>;
  prefixKey?: RoutingKey;
  bodyProblem?: Understanding['bodyProblem'];
  /** The stored response a request names (its `previous_response_id`, or the id in its path), not yet hashed. */
  responseId?: string;
}

/**
 * Whether the decision for a request on this path reads its body (session fields, model, prompt
 * prefix). When it does not, the transport can decide on the headers without waiting for the body.
 */
export function readsBody(req: Pick<RequestInfo, 'path'>, cfg: Config): boolean {
  return cfg.keys.session_paths.includes(req.path);
}

/** Reads the body once: model, prompt block chain and the sessionless prefix key. */
function readPrompt(req: RequestInfo, cfg: Config): PromptFacts & Pick<Understanding, 'model' | 'blocks'> {
  if (req.body === undefined || !readsBody(req, cfg)) return { model: undefined, blocks: [], api: 'openai' };
  const api = promptApiOf(req.path);
  if (req.body.length > cfg.limits.max_body_bytes) {
    throw new KvgateError('body_too_large', `request body of ${req.body.length} bytes exceeds limits.max_body_bytes`, {
      details: { bytes: req.body.length, limit: cfg.limits.max_body_bytes },
    });
  }
  const parsed = parseJsonBody(req.body);
  if (!parsed.ok) {
    if (cfg.limits.malformed_body === 'reject' && parsed.reason !== 'empty') {
      throw new KvgateError('bad_request', `request body is not a JSON object (${parsed.reason})`, {
        details: { reason: parsed.reason },
      });
    }
    return { model: undefined, blocks: [], api, bodyProblem: parsed.reason };
  }
  const body = parsed.value;
  const model = stringField(body, 'model');
  const previous = api === 'responses' ? stringField(body, 'previous_response_id') : undefined;
  const options = promptOptions(body, api);
  const salted = `${model ?? ''}\u0000${stringField(body, 'cache_salt') ?? ''}`;
  const seed = seedFor(options === undefined ? salted : `${salted}\u0000${options}`);
  // One pass over the body's strings, no prompt text built, only the first max_blocks blocks: the
  // same hashes as chainedBlockHashes of prompt.ts's text (prompt-blocks.ts; the tests hold it to that).
  const hashed = promptBlocks(api, body, cfg.prefix.block_chars, cfg.prefix.max_blocks, seed);
  const facts: PromptFacts = { model, blocks: [], api, body };
  if (previous) facts.responseId = previous;
  if (!hashed) return facts;
  const blocks = hashed.chain.map(hex64);
  // The key is one of the chain's blocks (its hex already made), or the short prompt's hash.
  const keyHash = blocks.length > 0 ? blocks[Math.min(cfg.keys.prefix_key_blocks, blocks.length) - 1]! : hex64(hashed.short!);
  facts.blocks = blocks;
  facts.prefixKey = { kind: 'prefix', source: 'prompt_prefix', hash: keyHash };
  return facts;
}

/**
 * Chat-completions fields that vLLM hands to the chat template, so that they change the prompt the
 * engine renders without being part of the messages: a model's reasoning switch (gpt-oss writes
 * the effort into its first system message), another template, the template's own arguments
 * (`enable_thinking`), RAG documents.
 */
const CHAT_PROMPT_OPTIONS = ['reasoning_effort', 'chat_template', 'chat_template_kwargs', 'documents'] as const;

/**
 * The fields of the body that change the rendered prompt outside its messages, as one stable
 * JSON (fields in a fixed order), or undefined when none is present: chat and completions
 * CHAT_PROMPT_OPTIONS, Responses `reasoning.effort`, Messages `chat_template_kwargs` and
 * `output_config.effort` (vLLM's Messages endpoint passes both on). It joins the model and
 * `cache_salt` in the chain's seed, so that two requests alike but for one of them never share a
 * block; a field that is absent or null leaves the seed, and every hash, as without it.
 *
 * The JSON is built as a string, not fed to a streaming hasher field by field: measured with 400
 * KB of RAG `documents`, the seed costs about 1 ms either way. Two thirds of it is JSON.stringify,
 * which any way of hashing the same text pays; most of the rest is flattening its result (V8
 * builds a large JSON as a rope of pieces), which the hasher's encoding pays once whether the
 * JSON stands alone or is joined to the model and salt first. Streaming added only its own
 * overhead (10 KB of documents: 23 -> 31 us).
 */
function promptOptions(body: Record<string, unknown>, api: PromptApi): string | undefined {
  let o: Record<string, unknown> | undefined;
  if (api === 'openai') {
    for (const f of CHAT_PROMPT_OPTIONS) {
      const v = body[f];
      if (v !== undefined && v !== null) (o ??= {})[f] = v;
    }
  } else if (api === 'responses') {
    const effort = objectField(body, 'reasoning')?.['effort'];
    if (effort !== undefined && effort !== null) o = { 'reasoning.effort': effort };
  } else {
    const kwargs = body['chat_template_kwargs'];
    if (kwargs !== undefined && kwargs !== null) o = { chat_template_kwargs: kwargs };
    const effort = objectField(body, 'output_config')?.['effort'];
    if (effort !== undefined && effort !== null) (o ??= {})['output_config.effort'] = effort;
  }
  return o === undefined ? undefined : stableJson(o);
}

/**
 * A Responses response id as stored and logged: hashed like a session id (an id lets whoever holds
 * it read the stored response, so it is not kept in the clear). The same function reads a
 * request's `previous_response_id` and the id a worker's response carries.
 */
export function responseIdHash(id: string, hashKey?: Uint8Array): string {
  return hashSessionId(id.slice(0, MAX_SESSION_ID_CHARS), hashKey);
}

function sessionKey(id: string, source: KeySource, keys: SessionHashKeys): RoutingKey {
  const cut = id.slice(0, MAX_SESSION_ID_CHARS);
  const key: RoutingKey = { kind: 'session', source, hash: hashSessionId(cut, keys.current) };
  if (keys.previous !== undefined) key.previousHash = hashSessionId(cut, keys.previous);
  return key;
}

/**
 * A header's value without the spaces and tabs around it, which HTTP says are not part of it
 * (RFC 9110, section 5.5). Envoy's HTTP/1 codec strips them before kvgate sees the header; its
 * HTTP/2 codec passes them on. A client that pads its session id must get one key whichever
 * protocol (or proxy before Envoy) carried it; a blank value is no session id. Body ids are not
 * trimmed: a JSON string carries no transport's padding, it is exactly the value the client chose.
 */
function headerValue(v: string | undefined): string | undefined {
  if (v === undefined || v.length === 0) return v;
  let start = 0;
  let end = v.length;
  while (start < end && isOws(v.charCodeAt(start))) start++;
  while (end > start && isOws(v.charCodeAt(end - 1))) end--;
  return start === 0 && end === v.length ? v : v.slice(start, end);
}

/** HTTP's optional whitespace: space and horizontal tab. */
function isOws(c: number): boolean {
  return c === 0x20 || c === 0x09;
}

/** The named cookie's value; the cookie parser already drops the spaces and tabs around it. */
function safeCookie(header: string, name: string): string | undefined {
  try {
    return parseCookies(header)[name] || undefined;
  } catch {
    return undefined;
  }
}
