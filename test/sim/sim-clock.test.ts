/**
 * The simulated gate's store runs on simulated time, as a real gate's runs on real time: with the
 * TTLs configured short (as `--gate-config` would), a session returning after more than the
 * affinity TTL of simulated time is placed afresh, and a prefix routed longer ago than the prefix
 * TTL no longer attracts its next request. The whole simulation takes milliseconds of wall time,
 * so a store timed by the wall clock still holds both, and these go red.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { KvgatePolicy } from '../../src/sim/policies/kvgate.js';
import { simulate } from '../../src/sim/simulator.js';
import { HAND_COST, HAND_FLEET, handWorkload } from './helpers.js';

before(() => initHashing());

/** One-second TTLs: the shortest the config allows. */
const SHORT = { affinity: { ttl_s: 1 }, prefix: { ttl_s: 1 } };
const ctx = { workers: 2, blockTokens: 100, seed: 1, maxInflight: 16, gateConfig: SHORT };
/** Ten 100-token blocks: each 400 characters of text, so the gate's own 256-character prefix blocks are many. */
const BLOCKS = Array.from({ length: 10 }, (_, i) => i + 1);

async function outcomesOf(gapS: number, session: string | undefined): Promise<Record<string, number>> {
  const p = await KvgatePolicy.create(ctx);
  const w = handWorkload([
    { at: 0, prompt: 1000, out: 5, blocks: BLOCKS, session },
    { at: gapS, prompt: 1100, out: 5, blocks: [...BLOCKS, 11], session },
  ]);
  await simulate(w, p, { fleet: HAND_FLEET, cost: HAND_COST });
  await p.close();
  return Object.fromEntries(p.outcomes);
}

describe('the simulated gate times its affinities and prefix holdings by simulated time', () => {
  test('a session back within the affinity TTL goes home; back after it, it is placed fresh', async () => {
    assert.deepEqual(await outcomesOf(0.5, 'alice'), { new: 1, affinity_hit: 1 });
    // 30 simulated seconds later: the affinity (and the prefix it left) lapsed, as in a real gate.
    assert.deepEqual(await outcomesOf(30, 'alice'), { new: 2 });
  });

  test('a prompt prefix routed within the prefix TTL attracts the next request; routed before it, it does not', async () => {
    assert.deepEqual(await outcomesOf(0.5, undefined), { unkeyed: 1, prefix_hit: 1 });
    assert.deepEqual(await outcomesOf(30, undefined), { unkeyed: 2 });
  });
});
