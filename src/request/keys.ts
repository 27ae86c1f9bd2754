/**
 * Routing keys. A request's key says which cached KV state it would reuse:
 *  1. a session id from the configured header, else the configured cookie, else the OpenAI body
 *     fields `user` / `metadata.session_id` (only on the configured OpenAI paths);
 *  2. otherwise a hash of the first blocks of the canonical prompt, seeded with the model, so
 *     requests sharing a system prompt share a key;
 *  3. otherwise none: the request is routed by load alone.
 * Raw session ids never leave this module: keys carry only their hash.
 */
import { parse as parseCookies } from 'cookie';
import type { Config } from '../config/schema.js';
import { KvgateError } from '../errors.js';
import { objectField, parseJsonBody, stringField, type ParsedBody } from './body.js';
import { hashSessionId, seedFor } from './hashing.js';
import { promptBlocks } from './prompt-blocks.js';
import type { RequestInfo } from './request.js';

export type KeySource = 'header' | 'cookie' | 'body_user' | 'body_metadata' | 'prompt_prefix';

export interface RoutingKey {
  kind: 'session' | 'prefix';
  source: KeySource;
  /** Hex hash; safe to store and log. */
  hash: string;
}

export interface Understanding {
  key: RoutingKey | undefined;
  model: string | undefined;
  /**
   * Chained hashes (hex) of the prompt's leading whole blocks, for prefix matching; empty when the
   * request carries no prompt. Block i's hash covers blocks 0..i, seeded with the model and any
   * `cache_salt`, so equal hashes mean an equal prefix for the same model and salt.
   */
  blocks: string[];
  /** Why the body gave no key, when it was read and unusable (for logs and metrics). */
  bodyProblem?: Exclude<ParsedBody, { ok: true }>['reason'];
}

/** Longest session id accepted; longer values are hashed only up to here (they are still unique enough). */
const MAX_SESSION_ID_CHARS = 1024;

export function understand(req: RequestInfo, cfg: Config): Understanding {
  const k = cfg.keys;
  const prompt = readPrompt(req, cfg);
  const fromHeader = req.headers.get(k.session_header);
  if (fromHeader) return { ...prompt, key: sessionKey(fromHeader, 'header') };

  const cookieHeader = req.headers.get('cookie');
  if (cookieHeader) {
    const fromCookie = safeCookie(cookieHeader, k.session_cookie);
    if (fromCookie) return { ...prompt, key: sessionKey(fromCookie, 'cookie') };
  }
  if (prompt.body && k.body_session_fields) {
    const user = stringField(prompt.body, 'user');
    if (user) return { ...prompt, key: sessionKey(user, 'body_user') };
    const metaSession = stringField(objectField(prompt.body, 'metadata') ?? {}, 'session_id');
    if (metaSession) return { ...prompt, key: sessionKey(metaSession, 'body_metadata') };
  }
  return { ...prompt, key: prompt.prefixKey };
}

interface PromptFacts {
  model: string | undefined;
  blocks: string[];
  body?: Record<string, unknown>;
  prefixKey?: RoutingKey;
  bodyProblem?: Understanding['bodyProblem'];
}

/** Reads the body once: model, prompt block chain and the sessionless prefix key. */
function readPrompt(req: RequestInfo, cfg: Config): PromptFacts & Pick<Understanding, 'model' | 'blocks'> {
  if (req.body === undefined || !cfg.keys.session_paths.includes(req.path)) return { model: undefined, blocks: [] };
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
    return { model: undefined, blocks: [], bodyProblem: parsed.reason };
  }
  const body = parsed.value;
  const model = stringField(body, 'model');
  const seed = seedFor(`${model ?? ''}\u0000${stringField(body, 'cache_salt') ?? ''}`);
  // One pass over the body's strings, no prompt text built; the same hashes as
  // chainedBlockHashes(canonicalPrompt(...)) (prompt-blocks.ts; the tests hold it to that).
  const hashed = promptBlocks(body, cfg.prefix.block_chars, cfg.prefix.max_blocks, seed);
  if (!hashed) return { model, blocks: [], body };
  const chain = hashed.chain;
  const keyBlock = chain.length > 0 ? chain[Math.min(cfg.keys.prefix_key_blocks, chain.length) - 1]! : hashed.short!;
  return {
    model,
    body,
    blocks: chain.map(hex),
    prefixKey: { kind: 'prefix', source: 'prompt_prefix', hash: hex(keyBlock) },
  };
}

function hex(h: bigint): string {
  return h.toString(16).padStart(16, '0');
}

function sessionKey(id: string, source: KeySource): RoutingKey {
  return { kind: 'session', source, hash: hashSessionId(id.slice(0, MAX_SESSION_ID_CHARS)) };
}

function safeCookie(header: string, name: string): string | undefined {
  try {
    return parseCookies(header)[name] || undefined;
  } catch {
    return undefined;
  }
}
