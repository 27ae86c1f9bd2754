/**
 * The process's xxhash (WebAssembly build of the reference implementation, `xxhash-wasm`).
 * Loaded once at startup by `initHashing()`; keying and tie-breaking call it synchronously after.
 */
import xxhash from 'xxhash-wasm';

type Hasher = Awaited<ReturnType<typeof xxhash>>;
let hasher: Hasher | undefined;

/** Loads the WebAssembly hasher; await once at startup before any keying. */
export async function initHashing(): Promise<void> {
  hasher ??= await xxhash();
}

export function xxh(): Hasher {
  if (!hasher) throw new Error('initHashing() must complete before keys are derived');
  return hasher;
}
