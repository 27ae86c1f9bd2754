/**
 * The process's xxhash (WebAssembly build of the reference implementation, `xxhash-wasm`).
 * Loaded once at startup by `initHashing()`; keying and tie-breaking call it synchronously after.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import xxhash from 'xxhash-wasm';

type Hasher = Awaited<ReturnType<typeof xxhash>>;
let hasher: Hasher | undefined;

/**
 * xxhash64 over bytes already in the WebAssembly module's memory: the same module as `xxh()`, in
 * an instance of kvgate's own, called without xxhash-wasm's wrapper. Hashing a prompt's blocks
 * through `h64(string)` costs about 110 ns a block whatever its length (a 1-character string costs
 * nearly as much as 256): the wrapper reads `memory.buffer` for its size check and calls
 * `encodeInto` once per block, and the hash itself is the small part. With the memory in hand the
 * prompt hasher (request/prompt-blocks.ts) encodes many blocks of text with one `encodeInto` and
 * hashes each in place, about 70 ns a block.
 */
export interface DirectXxh64 {
  /** The module's memory as bytes (its own instance: nothing else writes there). */
  readonly bytes: Uint8Array;
  /** xxhash64 of `bytes[offset, offset + length)` under `seed`, as `h64Raw` of those bytes gives it. */
  at(offset: number, length: number, seed: bigint): bigint;
}

/** The little of the WebAssembly global used here (the project's TypeScript libs do not declare it). */
interface Wasm {
  instantiate(bytes: Uint8Array): Promise<{ instance: { exports: Record<string, unknown> } }>;
  Memory: abstract new () => { readonly buffer: ArrayBuffer };
}
const wasm = (globalThis as unknown as { WebAssembly: Wasm }).WebAssembly;

/** undefined: not loaded yet; null: not available (the library's own calls are used instead). */
let direct: DirectXxh64 | null | undefined;

/** Loads the WebAssembly hasher; await once at startup before any keying. */
export async function initHashing(): Promise<void> {
  hasher ??= await xxhash();
  if (direct === undefined) direct = await loadDirect(hasher);
}

export function xxh(): Hasher {
  if (!hasher) throw new Error('initHashing() must complete before keys are derived');
  return hasher;
}

/** The direct hasher, or undefined where it could not be loaded: callers then use `xxh()`. */
export function directXxh64(): DirectXxh64 | undefined {
  return direct ?? undefined;
}

/**
 * Runs `f` with the direct hasher turned off, as where it cannot be loaded: for tests, which hold
 * both ways of hashing to the same answers.
 */
export function withoutDirectXxh64<T>(f: () => T): T {
  const was = direct;
  direct = null;
  try {
    return f();
  } finally {
    direct = was;
  }
}

/** Bytes of module memory the direct hasher always has (its initial page); longer input is not written there. */
export const DIRECT_BYTES = 65_536;

/**
 * The package ships its module as a file too (`workerd/xxhash.wasm`, byte for byte the one its
 * JavaScript embeds; the package's exports map does not name it, so it is found beside the entry
 * point). Used only if it instantiates with the exports expected and hashes probe strings exactly
 * as the library does; otherwise null, and nothing changes but speed.
 */
async function loadDirect(lib: Hasher): Promise<DirectXxh64 | null> {
  try {
    const entry = createRequire(import.meta.url).resolve('xxhash-wasm');
    const file = path.join(path.dirname(entry), '..', 'workerd', 'xxhash.wasm');
    const { instance } = await wasm.instantiate(await readFile(file));
    const { mem, xxh64 } = instance.exports;
    if (!(mem instanceof wasm.Memory) || typeof xxh64 !== 'function' || mem.buffer.byteLength < DIRECT_BYTES) return null;
    const fn = xxh64 as (offset: number, length: number, seed: bigint) => bigint;
    const bytes = new Uint8Array(mem.buffer);
    const d: DirectXxh64 = {
      bytes,
      // The export returns a signed i64; the library's answers are unsigned.
      at: (offset, length, seed) => BigInt.asUintN(64, fn(offset, length, seed)),
    };
    const encoder = new TextEncoder();
    for (const [probe, seed] of [['', 0n], ['kvgate', 1n], ['x'.repeat(300), 0xffff_ffff_ffff_ffffn], ['é€😀', 0x8000_0000_0000_0000n]] as const) {
      const { written } = encoder.encodeInto(probe, bytes);
      if (d.at(0, written, seed) !== lib.h64(probe, seed)) return null;
    }
    return d;
  } catch {
    return null;
  }
}
