import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { initHashing } from '../../src/request/hashing.js';
import type { RouteChoice, RouterPolicy, WorkerObservation } from '../../src/sim/policies/policy.js';
import { POLICY_FACTORIES } from '../../src/sim/policies/registry.js';
import { KvgatePolicy, workerId } from '../../src/sim/policies/kvgate.js';
import { defaultSignalCadence, simulate } from '../../src/sim/simulator.js';
import { HAND_COST, HAND_FLEET, handWorkload } from './helpers.js';

before(() => initHashing());

/** Routes everything to worker 0 and records every observation it is handed. */
class Recorder implements RouterPolicy {
  readonly name = 'recorder';
  readonly seen: Array<{ t: number; workers: WorkerObservation[] }> = [];
  route(): RouteChoice {
    return { worker: 0 };
  }
  observe(workers: readonly WorkerObservation[], t: number): void {
    this.seen.push({ t, workers: workers.map((w) => ({ ...w })) });
  }
}

// A 1-token request at 0 (done in 1 ms), then one long prefill: 5000 tokens at 1000 tok/s keeps
// worker 0 busy from 0.13 s to 5.13 s.
const longJob = () =>
  handWorkload([
    { at: 0, prompt: 1, out: 1, blocks: [] },
    { at: 0.13, prompt: 5000, out: 2, blocks: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] },
  ]);
const fleet = { ...HAND_FLEET, cacheTokens: 100_000 };

describe('every policy that reads engine metrics gets them as a real router does: scraped, then read late', () => {
  test("the default cadence is kvgate's: scrape every signals.interval_ms, read twice as slowly (the collector's read loop)", () => {
    assert.deepEqual(defaultSignalCadence(), { scrapeIntervalMs: DEFAULTS.scrapeIntervalMs, readIntervalMs: 2 * DEFAULTS.scrapeIntervalMs });
    assert.deepEqual(defaultSignalCadence(1000), { scrapeIntervalMs: 1000, readIntervalMs: 250 });
  });

  test('observations arrive only at read times, each carrying the age of the scrape it holds', async () => {
    const p = new Recorder();
    await simulate(longJob(), p, { fleet, cost: HAND_COST, signals: { scrapeIntervalMs: 200, readIntervalMs: 300 } });
    assert.ok(p.seen.length > 10, "p.seen.length > 10");
    for (const [i, s] of p.seen.entries()) {
      assert.ok(Math.abs(s.t - i * 0.3) < 1e-9, `read ${i} at ${s.t}`);
      // The latest scrape at a read at t was taken at floor(t / 0.2) × 0.2, or (a read at the
      // instant of a scrape may come first) one scrape before.
      const expectedAge = s.t - Math.floor(s.t / 0.2 + 1e-9) * 0.2;
      for (const w of s.workers) {
        const ok = [expectedAge, expectedAge + 0.2].some((a) => Math.abs((w.ageS ?? -1) - a) < 1e-9) && (w.ageS! > 0 || s.t === 0);
        assert.ok(ok || (expectedAge < 1e-9 && w.ageS === 0), `age at ${s.t}: ${w.ageS} vs ${expectedAge}`);
      }
    }
    assert.ok(p.seen.some((s) => (s.workers[0]!.ageS ?? 0) > 0.05), 'some reads hand over data a tenth of a second old');
  });

  test('a worker that turned busy is seen busy only after the next scrape and the read after it', async () => {
    const p = new Recorder();
    await simulate(longJob(), p, { fleet, cost: HAND_COST, signals: { scrapeIntervalMs: 200, readIntervalMs: 300 } });
    const firstBusy = p.seen.find((s) => s.t > 0 && s.workers[0]!.running > 0);
    // The job arrives at 0.13; the scrape at 0.2 catches it; the read at 0.3 is the first to tell.
    assert.equal(firstBusy?.t.toFixed(2), '0.30');
    assert.equal(p.seen.filter((s) => s.t > 0 && s.t < 0.3).every((s) => s.workers[0]!.running === 0), true);
  });

  test('kvgate and llm-d read engine metrics; the baselines whose real systems do not (Dynamo as shipped among them), never get them', async () => {
    const ctx = { workers: 2, blockTokens: 100, seed: 1, maxInflight: 16 };
    const reads: Record<string, boolean> = {};
    for (const [name, f] of Object.entries(POLICY_FACTORIES)) {
      const policy = await f.create(ctx);
      reads[name] = typeof policy.observe === 'function';
      await policy.close?.();
    }
    assert.deepEqual(reads, {
      kvgate: true,
      'round-robin': false,
      'least-loaded': false,
      'consistent-hash': false,
      article: false,
      'sglang-cache-aware': false,
      'dynamo-cost': false,
      'llm-d': true,
      'llm-d-session': true,
    });
  });

  test("kvgate's gate holds each scrape with its age, as its collector would hand it over", async () => {
    const p = await KvgatePolicy.create({ workers: 2, blockTokens: 100, seed: 1, maxInflight: 16 });
    const ages: number[] = [];
    const original = p.observe.bind(p);
    p.observe = (ws, t) => {
      original(ws, t);
      ages.push(p.gate.signalsOf(workerId(0))!.record!.ageMs);
    };
    await simulate(longJob(), p, { fleet, cost: HAND_COST, signals: { scrapeIntervalMs: 200, readIntervalMs: 300 } });
    assert.ok(ages.some((a) => Math.abs(a - 100) < 1e-6), `a read 100 ms after its scrape: ${ages.slice(0, 6).join(', ')}`);
    assert.ok(ages.every((a) => a >= 0 && a < 200 + 1e-6), "ages.every((a) => a >= 0 && a < 200 + 1e-6)");
  });
});
