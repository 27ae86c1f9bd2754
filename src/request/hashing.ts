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

/**
 * A 64-bit hash as 16 lower-case hex digits, leading zeros kept: what
 * `h.toString(16).padStart(16, '0')` gives for 0 <= h < 2^64, in about half its time (21-31 ns a
 * name against 36-64). A prompt of 32 KB has some 128 blocks to name; BigInt's toString goes
 * through V8's runtime for each and padStart makes a second string whenever a digit is missing.
 * Here the value's two 32-bit halves are read back through a typed array (no BigInt arithmetic,
 * no intermediate BigInt) and the 16 digits are made in one flat string.
 */
export function hex64(h: bigint): string {
  u64[0] = h;
  const hi = u32[HI]!;
  const lo = u32[LO]!;
  return String.fromCharCode(
    DIGIT[hi >>> 28]!,
    DIGIT[(hi >>> 24) & 15]!,
    DIGIT[(hi >>> 20) & 15]!,
    DIGIT[(hi >>> 16) & 15]!,
    DIGIT[(hi >>> 12) & 15]!,
    DIGIT[(hi >>> 8) & 15]!,
    DIGIT[(hi >>> 4) & 15]!,
    DIGIT[hi & 15]!,
    DIGIT[lo >>> 28]!,
    DIGIT[(lo >>> 24) & 15]!,
    DIGIT[(lo >>> 20) & 15]!,
    DIGIT[(lo >>> 16) & 15]!,
    DIGIT[(lo >>> 12) & 15]!,
    DIGIT[(lo >>> 8) & 15]!,
    DIGIT[(lo >>> 4) & 15]!,
    DIGIT[lo & 15]!,
  );
}

/** hex64's scratch: one 64-bit slot seen as two 32-bit words, in the platform's byte order. */
const u64 = new BigUint64Array(1);
const u32 = new Uint32Array(u64.buffer);
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const HI = LITTLE_ENDIAN ? 1 : 0;
const LO = LITTLE_ENDIAN ? 0 : 1;
/** Char codes of the hex digits 0-9a-f. */
const DIGIT = Uint8Array.from('0123456789abcdef', (c) => c.charCodeAt(0));

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
