/**
 * kvgate's preemptive migration, run in the simulator: the real Migrator on the simulated clock,
 * fed by the signals the simulator hands the gate, and the offload event's effect on the engines.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { initHashing } from '../../src/request/hashing.js';
import type { FleetOptions } from '../../src/sim/cost-model.js';
import { KvgatePolicy } from '../../src/sim/policies/kvgate.js';
import { defaultSignalCadence, sessionOwnedBlocks, simulate, type PolicyRun } from '../../src/sim/simulator.js';
import type { Workload } from '../../src/sim/workload.js';
import { HAND_COST, handWorkload, type Spec } from './helpers.js';

before(() => initHashing());

/** Two workers of 250 blocks (100 tokens each); decode 10 ms a step, prefill 1000 tok/s. */
const FLEET: FleetOptions = { workers: 2, cacheTokens: 25_000, offloadTokens: 0, maxBatch: 64, prefillChunkTokens: 0 };
const SYSTEM = [1, 2];
const SESSIONS = 10;
const own = (i: number): number[] => [100 + 10 * i, 101 + 10 * i, 102 + 10 * i];
const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, k) => from + k);

/**
 * Ten conversations (a shared two-block system prompt, three blocks of their own) and a `hog`
 * session open at once; at 3 s the hog sends a second turn. With `pressure`, that turn pins
 * 220 of its worker's 250 blocks (88% ≥ the 85% threshold) for ~31 s: a 21,000-token prompt
 * and 1,000 tokens of output. Without, it is as small as the others. At 40 s every conversation
 * sends its second turn.
 */
function workload(pressure: boolean): Workload {
  const specs: Spec[] = [{ at: 0, prompt: 500, out: 10, blocks: [...SYSTEM, ...range(900, 3)], session: 'hog' }];
  for (let i = 0; i < SESSIONS; i++) specs.push({ at: 0.1 * (i + 1), prompt: 500, out: 10, blocks: [...SYSTEM, ...own(i)], session: `s${i}` });
  specs.push(
    pressure
      ? { at: 3, prompt: 21_000, out: 1000, blocks: [...SYSTEM, ...range(900, 208)], session: 'hog' }
      : { at: 3, prompt: 600, out: 10, blocks: [...SYSTEM, ...range(900, 4)], session: 'hog' },
  );
  for (let i = 0; i < SESSIONS; i++) specs.push({ at: 40 + 0.1 * i, prompt: 600, out: 10, blocks: [...SYSTEM, ...own(i), 500 + i], session: `s${i}` });
  return handWorkload(specs);
}

async function run(w: Workload, gateConfig?: Record<string, unknown>): Promise<{ run: PolicyRun; w: Workload }> {
  const p = await KvgatePolicy.create({ workers: 2, blockTokens: 100, seed: 1, maxInflight: 16, cacheTokens: FLEET.cacheTokens, ...(gateConfig ? { gateConfig } : {}) });
  try {
    return { run: await simulate(w, p, { fleet: FLEET, cost: HAND_COST }), w };
  } finally {
    await p.close();
  }
}

/** The request index of a session's turn (0-based). */
function turn(w: Workload, session: string, n: number): number {
  return w.requests.filter((r) => r.sessionId === session)[n]!.index;
}

describe("kvgate's preemptive migration runs in the simulator, on the simulated clock", () => {
  test('a worker past KV pressure sheds its coldest sessions at once, then again every migration.interval_ms of simulated time', async () => {
    const { run: r, w } = await run(workload(true));
    const hog = r.outcomes[turn(w, 'hog', 1)]!;
    const pressuredFrom = hog.firstTokenS - 20.5; // its prefill (20,500 uncached tokens) began then
    assert.ok(r.sessionMoves.length >= 3, `sessions moved: ${r.sessionMoves.length}`);
    for (const m of r.sessionMoves) assert.equal(m.from, hog.worker, 'only the pressured worker loses sessions');
    // Rounds: the moves of one round share an instant.
    const rounds = [...new Set(r.sessionMoves.map((m) => m.t))];
    assert.ok(rounds.length >= 3, `rounds: ${rounds.join(', ')}`);
    // The first on the first read that sees the pressure: one scrape and one read after it began.
    const cadence = defaultSignalCadence();
    assert.ok(rounds[0]! > pressuredFrom && rounds[0]! <= pressuredFrom + (cadence.scrapeIntervalMs + cadence.readIntervalMs) / 1000 + 1e-9, `first round at ${rounds[0]} s, pressure from ${pressuredFrom} s`);
    // Then one per interval of simulated time, on the first read after it is due. (On the wall
    // clock this whole run takes well under one interval, so only the first round would happen.)
    const interval = DEFAULTS.migrationIntervalMs / 1000;
    for (let i = 1; i < rounds.length; i++) {
      const gap = rounds[i]! - rounds[i - 1]!;
      assert.ok(gap >= interval - 1e-9 && gap <= interval + cadence.readIntervalMs / 1000 + 1e-9, `round ${i} came ${gap} s after the one before`);
    }
    // Each round takes the coldest quarter of the worker's sessions: the first of them is the
    // session that was placed there first, never the hog, which has just sent a turn.
    assert.notEqual(r.sessionMoves[0]!.sessionId, 'hog');
  });

  test("a moved session's next turn goes to its new worker, which recomputes what it does not hold; its own KV left the old worker, the shared prompt stayed", async () => {
    const { run: r, w } = await run(workload(true));
    const moved = r.sessionMoves.filter((m) => m.sessionId !== 'hog');
    assert.ok(moved.length >= 2, "moved.length >= 2");
    for (const m of moved) {
      const first = r.outcomes[turn(w, m.sessionId, 0)]!;
      const next = r.outcomes[turn(w, m.sessionId, 1)]!;
      assert.equal(first.worker, m.from, `${m.sessionId} was on the worker it left`);
      assert.equal(next.worker, m.to, `${m.sessionId}'s next turn went to its new worker`);
      assert.notEqual(next.worker, first.worker);
      // The new worker holds the shared system prompt (other conversations run there), not the
      // session's own three blocks: those 300 tokens and the new block are computed.
      assert.equal(next.cachedTokens, 200, `${m.sessionId} hit only the shared prompt`);
      assert.equal(next.computedTokens, 400);
      // The offload took its three blocks, not the two it shares with every other session.
      assert.equal(m.offloadedBlocks, 3, `${m.sessionId}: blocks that left the old worker`);
    }
    // A session that was not moved found its whole history where it was.
    const stayed = [...Array(SESSIONS).keys()].map((i) => `s${i}`).filter((s) => !moved.some((m) => m.sessionId === s));
    for (const s of stayed) {
      const first = r.outcomes[turn(w, s, 0)]!;
      const next = r.outcomes[turn(w, s, 1)]!;
      assert.equal(next.worker, first.worker);
      assert.equal(next.cachedTokens, 500, `${s} kept its cache`);
    }
  });

  test('the same workload without pressure moves nothing, and every session stays where its cache is', async () => {
    const { run: r, w } = await run(workload(false));
    assert.deepEqual(r.sessionMoves, []);
    for (let i = 0; i < SESSIONS; i++) {
      assert.equal(r.outcomes[turn(w, `s${i}`, 1)]!.worker, r.outcomes[turn(w, `s${i}`, 0)]!.worker);
      assert.equal(r.outcomes[turn(w, `s${i}`, 1)]!.cachedTokens, 500);
    }
  });

  test('migration.enabled: false turns it off in the simulator as in production', async () => {
    const { run: r } = await run(workload(true), { migration: { enabled: false } });
    assert.deepEqual(r.sessionMoves, []);
  });
});

describe("a session's own blocks", () => {
  test('are the ones no other session, and no request without a session, has in its prompt', () => {
    const w = handWorkload([
      { at: 0, prompt: 300, out: 1, blocks: [1, 2, 3], session: 'a' },
      { at: 1, prompt: 400, out: 1, blocks: [1, 2, 3, 4], session: 'a' },
      { at: 0, prompt: 300, out: 1, blocks: [1, 5, 6], session: 'b' },
      { at: 2, prompt: 200, out: 1, blocks: [6, 7] },
    ]);
    const owns = sessionOwnedBlocks(w);
    const [a1, b1, a2, u] = w.requests.map((r) => r.blocks); // in arrival order, block ids interned
    const all = [...new Set([...a1!, ...a2!, ...b1!, ...u!])];
    assert.deepEqual(all.filter((b) => owns(b, 'a')), [a1![1], a1![2], a2![3]]);
    assert.deepEqual(all.filter((b) => owns(b, 'b')), [b1![1]]);
    assert.equal(owns(a1![1]!, 'nobody'), false);
    assert.equal(owns(1e6, 'a'), false);
  });
});
