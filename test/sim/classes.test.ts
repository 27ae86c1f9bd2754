/**
 * Classes of service in the simulator: under overload the real gate sheds the lowest class most
 * and the top class least; a conversation keeps one class.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { assignClasses, classTable, runClassMix } from '../../src/sim/classes.js';
import { DEFAULT_COST_MODEL, DEFAULT_FLEET } from '../../src/sim/cost-model.js';
import { syntheticWorkload } from '../../src/sim/workloads/synthetic.js';

before(() => initHashing());

describe('kvgate sim: a priority mix under overload', () => {
  test('each class is shed in order of its share; the top class least', async () => {
    // Four workers of 8 places at ten times the chat workload's rate: far past what they serve.
    const workload = syntheticWorkload('chat', { requests: 3000, seed: 3, rateScale: 10 });
    const rows = await runClassMix(workload, { fleet: { ...DEFAULT_FLEET, workers: 4 }, cost: DEFAULT_COST_MODEL, maxInflight: 8, seed: 3 });
    const rate = Object.fromEntries(rows.map((r) => [r.class, r.shedRate]));
    assert.deepEqual(rows.map((r) => r.class), ['critical', 'standard', 'sheddable']);
    assert.ok(rate.sheddable! > rate.standard! && rate.standard! > rate.critical!, classTable(rows));
    assert.ok(rate.critical! < 0.2 && rate.sheddable! > 0.4, classTable(rows));
    for (const r of rows) assert.ok(r.ttftP50 !== null && r.ttftP50 > 0, `${r.class} has served requests`);
  });

  test("a conversation's turns share one class; the mix is followed", () => {
    const workload = syntheticWorkload('chat', { requests: 2000, seed: 1 });
    const classes = assignClasses(workload, { critical: 0.2, standard: 0.5, sheddable: 0.3 }, 1);
    const bySession = new Map<string, Set<string>>();
    workload.requests.forEach((r, i) => {
      if (r.sessionId === undefined) return;
      const s = bySession.get(r.sessionId) ?? new Set();
      s.add(classes[i]!);
      bySession.set(r.sessionId, s);
    });
    assert.ok(bySession.size > 10, "bySession.size > 10");
    for (const s of bySession.values()) assert.equal(s.size, 1);
    const share = classes.filter((c) => c === 'standard').length / classes.length;
    assert.ok(share > 0.35 && share < 0.65, `standard share ${share}`);
  });
});
