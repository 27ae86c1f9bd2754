/**
 * The full-duplex echo cuts the kept request chunks as their join would be cut (streamedPieces
 * against streamedChunks of the join): the same bytes in pieces of the same sizes, whatever sizes
 * the chunks came in, and chunks that are already whole pieces go back as views, never copied.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { STREAMED_CHUNK_BYTES, streamedChunks, streamedPieces } from '../../src/extproc/body-mode.js';

test('streamedPieces answers streamedChunks of the join, for chunks of any size', () => {
  const size = fc.oneof(fc.nat(70), fc.integer({ min: STREAMED_CHUNK_BYTES - 3, max: STREAMED_CHUNK_BYTES + 3 }), fc.nat(3 * STREAMED_CHUNK_BYTES));
  fc.assert(
    fc.property(fc.array(size, { maxLength: 6 }), (sizes) => {
      let n = 0;
      const chunks = sizes.map((s) => Buffer.from(Array.from({ length: s }, () => n++ % 251)));
      const expected = streamedChunks(Buffer.concat(chunks));
      const got = streamedPieces(chunks);
      assert.deepEqual(got.map((p) => p.length), expected.map((p) => p.length));
      assert.ok(got.every((p, i) => p.equals(expected[i]!)));
    }),
    { numRuns: 300 },
  );
});

test('chunks of exactly one piece go back as views of themselves', () => {
  const chunks = [Buffer.alloc(STREAMED_CHUNK_BYTES, 1), Buffer.alloc(STREAMED_CHUNK_BYTES, 2), Buffer.alloc(100, 3)];
  const pieces = streamedPieces(chunks);
  assert.equal(pieces.length, 3);
  pieces.forEach((p, i) => assert.equal(p.buffer, chunks[i]!.buffer, `piece ${i} was copied`));
});
