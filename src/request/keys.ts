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
import { chainedBlockHashes, hashSessionId, hashText, seedFor } from './hashing.js';
import { canonicalPrompt } from './prompt.js';
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
  /** Why the body gave no key, when it was read and unusable (for logs and metrics). */
  bodyProblem?: Exclude<ParsedBody, { ok: true }>['reason'];
}

/** Longest session id accepted; longer values are hashed only up to here (they are still unique enough). */
const MAX_SESSION_ID_CHARS = 1024;

export function understand(req: RequestInfo, cfg: Config): Understanding {
  const k = cfg.keys;
  const fromHeader = req.headers.get(k.session_header);
  if (fromHeader) return { key: sessionKey(fromHeader, 'header'), model: undefined };

  const cookieHeader = req.headers.get('cookie');
  if (cookieHeader) {
    const fromCookie = safeCookie(cookieHeader, k.session_cookie);
    if (fromCookie) return { key: sessionKey(fromCookie, 'cookie'), model: undefined };
  }

  if (req.body === undefined || !k.session_paths.includes(req.path)) return { key: undefined, model: undefined };
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
    return { key: undefined, model: undefined, bodyProblem: parsed.reason };
  }
  const body = parsed.value;
  const model = stringField(body, 'model');
  if (k.body_session_fields) {
    const user = stringField(body, 'user');
    if (user) return { key: sessionKey(user, 'body_user'), model };
    const metaSession = stringField(objectField(body, 'metadata') ?? {}, 'session_id');
    if (metaSession) return { key: sessionKey(metaSession, 'body_metadata'), model };
  }
  // Only the first prefix_blocks blocks are hashed: the rest of the prompt need not be rendered.
  const text = canonicalPrompt(body, k.prefix_block_chars * k.prefix_blocks);
  if (!text) return { key: undefined, model };
  return { key: prefixKey(text, model ?? '', k.prefix_block_chars, k.prefix_blocks), model };
}

function sessionKey(id: string, source: KeySource): RoutingKey {
  return { kind: 'session', source, hash: hashSessionId(id.slice(0, MAX_SESSION_ID_CHARS)) };
}

/**
 * The prefix key is the chained hash of the first `blocks` whole blocks (fewer if the prompt is
 * shorter); a prompt shorter than one block is keyed by its whole text.
 */
export function prefixKey(text: string, model: string, blockChars: number, blocks: number): RoutingKey {
  const seed = seedFor(model);
  const chain = chainedBlockHashes(text, blockChars, blocks, seed);
  const last = chain.length > 0 ? chain[chain.length - 1]! : hashText(text, seed);
  return { kind: 'prefix', source: 'prompt_prefix', hash: last.toString(16).padStart(16, '0') };
}

function safeCookie(header: string, name: string): string | undefined {
  try {
    return parseCookies(header)[name] || undefined;
  } catch {
    return undefined;
  }
}
