import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { KvCache } from '../../src/sim/kv-cache.js';

describe('KV cache (vLLM prefix-caching semantics)', () => {
  test('a hit is the longest run of leading cached blocks', () => {
    const c = new KvCache(10);
    c.touch([1, 2, 3]);
    assert.deepEqual(c.match([1, 2, 3, 4]), { gpu: 3, offload: 0 });
    assert.deepEqual(c.match([1, 9, 3]), { gpu: 1, offload: 0 });
    assert.deepEqual(c.match([7, 1, 2]), { gpu: 0, offload: 0 });
  });

  test('LRU eviction, and a released prompt loses its tail blocks first', () => {
    const c = new KvCache(3);
    c.acquire([1, 2], 0);
    c.release([1, 2], 0); // evictable order: 2 (tail) then 1
    c.acquire([3, 4], 0); // needs one slot: evicts 2, keeps 1
    assert.equal(c.evictions, 1);
    assert.ok(c.has(1), "c.has(1)");
    assert.ok(!c.has(2), "!c.has(2)");
    assert.deepEqual(c.match([1, 2]), { gpu: 1, offload: 0 });
    c.release([3, 4], 0);
    c.touch([1]); // 1 is now the most recent
    c.acquire([5, 6], 0); // evicts the two least recent: 4 then 3
    assert.ok(c.has(1) && c.has(5) && c.has(6), "c.has(1) && c.has(5) && c.has(6)");
    assert.ok(!c.has(3) && !c.has(4), "!c.has(3) && !c.has(4)");
  });

  test('pinned blocks are never evicted; admission counts what it would newly pin', () => {
    const c = new KvCache(4);
    c.acquire([1, 2], 1); // 2 prompt blocks + 1 anonymous pinned
    assert.equal(c.pinnedBlocks, 3);
    assert.equal(c.pinCost([1, 2, 3], 1), 2); // 1 and 2 are pinned already: only 3 and the anonymous block
    assert.ok(c.fits(1), "c.fits(1)");
    assert.ok(!c.fits(2), "!c.fits(2)");
    c.acquire([7], 0);
    c.release([7], 0);
    c.acquire([8], 0); // must evict 7, the only unpinned block
    assert.ok(c.has(1) && c.has(2) && c.has(8) && !c.has(7), "c.has(1) && c.has(2) && c.has(8) && !c.has(7)");
    c.release([1, 2], 1);
    c.release([8], 0);
    assert.equal(c.pinnedBlocks, 0);
    assert.equal(c.usedBlocks, 3);
  });

  test('a block shared by two running requests stays pinned until both release it', () => {
    const c = new KvCache(2);
    c.acquire([1], 0);
    c.acquire([1], 0);
    c.release([1], 0);
    c.acquire([2], 0);
    c.release([2], 0);
    c.acquire([3], 0); // only 2 can go
    assert.ok(c.has(1) && c.has(3) && !c.has(2), "c.has(1) && c.has(3) && !c.has(2)");
  });

  test('the CPU tier keeps what the GPU evicts, LRU, and hits continue across tiers', () => {
    const c = new KvCache(2, 2);
    c.touch([1, 2]);
    c.touch([3, 4]); // evicts 2 then 1 into the CPU tier
    assert.deepEqual(c.match([1, 2, 5]), { gpu: 0, offload: 2 });
    c.touch([5, 6]); // evicts 4 then 3 to CPU; the CPU tier (2 blocks) drops 2 and 1
    assert.deepEqual(c.match([3, 4]), { gpu: 0, offload: 2 });
    assert.deepEqual(c.match([1]), { gpu: 0, offload: 0 });
    c.touch([3, 4]); // reloaded to GPU
    assert.deepEqual(c.match([3, 4]), { gpu: 2, offload: 0 });
  });

  test("an offload (a migrated session's KV) frees its unpinned blocks now, keeps the pinned ones, and counts no eviction", () => {
    const c = new KvCache(4);
    c.touch([1, 2, 3]);
    c.acquire([3], 0); // a running request still reads 3
    assert.equal(c.offload([1, 2, 3, 9]), 2);
    assert.ok(!c.has(1) && !c.has(2) && c.has(3), "!c.has(1) && !c.has(2) && c.has(3)");
    assert.equal(c.usedBlocks, 1);
    assert.equal(c.evictions, 0);
    // The room is free at once: three new blocks need no eviction.
    c.touch([5, 6, 7]);
    assert.equal(c.evictions, 0);
  });

  test('an offload goes to the CPU tier where there is one: the old worker can reload it, nobody else holds it', () => {
    const c = new KvCache(4, 4);
    c.touch([1, 2]);
    c.offload([1, 2]);
    assert.deepEqual(c.match([1, 2]), { gpu: 0, offload: 2 });
  });
});
