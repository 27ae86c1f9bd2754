/**
 * headerMapToMap reads header values in place (no copy of the bytes): it must give exactly what
 * copying them first gave, whatever the bytes and however they are held (a Buffer of their own, a
 * view into a larger decoded message at any offset, a plain Uint8Array view).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { headerMapToMap, MAX_HEADERS } from '../../src/extproc/headers.js';
import type { HeaderMap } from '../../src/extproc/messages.js';

/** The reading before: copy the bytes, then decode them as latin1. */
function oracle(map: HeaderMap): Map<string, string> {
  const out = new Map<string, string>();
  const list = map.headers ?? [];
  for (let i = 0; i < list.length && i < MAX_HEADERS; i++) {
    const h = list[i]!;
    if (typeof h.key !== 'string' || h.key === '') continue;
    const name = h.key.toLowerCase();
    if (out.has(name)) continue;
    const raw = h.raw_value;
    out.set(name, raw && raw.length > 0 ? Buffer.from(raw).toString('latin1') : (h.value ?? ''));
  }
  return out;
}

const holding = fc.constantFrom('buffer', 'buffer-view', 'uint8array-view');

/** The bytes as one of the shapes a decoded message may hold them in. */
function held(bytes: Uint8Array, how: string, pad: number): Uint8Array {
  if (how === 'buffer') return Buffer.from(bytes);
  const big = new Uint8Array(pad + bytes.length + 3).fill(0x41);
  big.set(bytes, pad);
  return how === 'buffer-view' ? Buffer.from(big.buffer, pad, bytes.length) : new Uint8Array(big.buffer, pad, bytes.length);
}

describe('headerMapToMap', () => {
  test('reads every value as copying it first did', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            key: fc.constantFrom(':path', ':method', 'X-Session-Id', 'x-session-id', 'content-type', '', 'x-a'),
            bytes: fc.uint8Array({ maxLength: 40 }),
            value: fc.string({ maxLength: 8 }),
            how: holding,
            pad: fc.nat(17),
          }),
          { maxLength: 12 },
        ),
        (hs) => {
          const map = { headers: hs.map((h) => ({ key: h.key, value: h.value, raw_value: held(h.bytes, h.how, h.pad) })) } as unknown as HeaderMap;
          assert.deepEqual([...headerMapToMap(map)], [...oracle(map)]);
        },
      ),
      { numRuns: 300 },
    );
  });
});
