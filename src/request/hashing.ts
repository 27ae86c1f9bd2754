/**
 * Hashing for keys. Prompt blocks use xxhash64 (fast, maintained, the hash SGLang/llm-d/AIBrix use
 * for block chains); session ids use SHA-256 so that what is stored or logged cannot be turned
 * back into the id a client sent.
 */
import * as crypto from 'node:crypto';
import { xxh as h } from '../util/xxhash.js';

export { initHashing } from '../util/xxhash.js';

const encoder = new TextEncoder();

/** 64-bit seed from a string (the model name), so equal prompts for different models never collide. */
export function seedFor(text: string): bigint {
  return h().h64(text, 0n);
}

/**
 * Chained block hashes: block i's hash covers blocks 0..i (each block is hashed with the previous
 * hash as its seed). Equal hash at index i means an equal prefix of i+1 blocks. Only whole blocks
 * are hashed: a trailing partial block is not a stable prefix yet.
 */
export function chainedBlockHashes(text: string, blockChars: number, maxBlocks: number, seed: bigint): bigint[] {
  const out: bigint[] = [];
  let prev = seed;
  const raw = h().h64Raw;
  // Each block is encoded into one reused buffer (a UTF-16 unit is at most 3 UTF-8 bytes):
  // the same bytes as encoding each block afresh, without an allocation per block.
  const scratch = new Uint8Array(blockChars * 3);
  for (let i = 0; i < maxBlocks && (i + 1) * blockChars <= text.length; i++) {
    const { written } = encoder.encodeInto(text.slice(i * blockChars, (i + 1) * blockChars), scratch);
    prev = raw(scratch.subarray(0, written), prev);
    out.push(prev);
  }
  return out;
}

/** xxhash64 of a whole string under a seed (for prompts shorter than one block). */
export function hashText(text: string, seed: bigint): bigint {
  return h().h64(text, seed);
}

/**
 * Node's one-shot digest (20.12 and later): the same SHA-256 of the same UTF-8 bytes as a Hash
 * object, without building one per call, 0.85 -> 0.35 us per id. Older Node 20 releases, which
 * package.json's engines still admit, lack it and use the Hash object.
 */
const oneShot: ((algorithm: string, data: string, encoding: 'hex') => string) | undefined =
  typeof crypto.hash === 'function' ? crypto.hash : undefined;

/**
 * A session id as stored and logged: 128 bits of SHA-256, hex; with a key (`--session-hash-key`),
 * of HMAC-SHA-256 under it. A plain digest of a guessable id (the `user` field often carries an
 * email or an account number) can be reversed by hashing candidates; a keyed one cannot without
 * the key, which never leaves the gates (docs/DESIGN.md "Session ids are hashed, optionally keyed").
 */
export function hashSessionId(id: string, key?: Uint8Array): string {
  // A key of no bytes is none: the previous key of a rotation that starts from unkeyed hashes
  // (UNKEYED_PREVIOUS). No other empty key reaches here: an empty setting is no key at start.
  if (key !== undefined && key.length > 0) return crypto.createHmac('sha256', key).update(id).digest('hex').slice(0, 32);
  const hex = oneShot ? oneShot('sha256', id, 'hex') : crypto.createHash('sha256').update(id).digest('hex');
  return hex.slice(0, 32);
}

/**
 * The shortest session hash key accepted, in bytes. The key is what keeps a guessable id from
 * being found by hashing candidates, so it must not itself be guessable: 16 bytes (128 bits) of
 * randomness, e.g. `openssl rand -hex 32`. A shorter one is refused at start rather than trusted.
 */
export const MIN_SESSION_HASH_KEY_BYTES = 16;

/**
 * `--session-hash-key-previous unkeyed`: the sessions recorded before the rotation were hashed
 * without a key (plain SHA-256), as before a first key is set. It cannot be a key: it is shorter
 * than MIN_SESSION_HASH_KEY_BYTES.
 */
export const UNKEYED_PREVIOUS = 'unkeyed';
