import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { maxScorePicker } from '../../src/routing/pickers/max-score.js';
import { runProfile, type Scorer } from '../../src/routing/plugins.js';
import { buildProfiles, weightsByName } from '../../src/routing/profiles.js';
import { SCORER_NAMES } from '../../src/routing/scorers/index.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';
import { initHashing } from '../../src/util/xxhash.js';
import { decisionInput } from '../helpers/decisions.js';

before(() => initHashing());

function w(id: string, inflight: number, extra: Partial<WorkerView> = {}): WorkerView {
  return { id, state: 'healthy', inflight, maxInflight: 10, prefixBlocks: 0, ...extra };
}

function input(workers: WorkerView[]): DecisionInput {
  return decisionInput(workers, { session: false, totalBlocks: 8, weights: { prefix: 1, load: 1, kv: 0.5, balance: 3 }, balanceFloor: 3 });
}

test('weights are looked up by scorer name as <name>_weight; other keys are not weights', () => {
  assert.deepEqual(weightsByName({ prefix_weight: 1, load_weight: 2, gpu_temp_weight: 0.25, balance_floor: 3, adapter_filter: true }, ['prefix', 'load', 'gpu_temp', 'kv']), { prefix: 1, load: 2, gpu_temp: 0.25 });
  assert.deepEqual([...SCORER_NAMES], ['prefix', 'load', 'kv', 'balance', 'adapter', 'backlog', 'sessions'], 'the order terms are added in');
});

test('profiles weigh each registered scorer by its name, in registry order, and leave out weight 0', () => {
  const p = buildProfiles({ prefix: 2, load: 1, kv: 0, balance: 3, adapter: 0.5 });
  assert.deepEqual(p.adapter.prefix.place.scorers.map((s) => [s.scorer.name, s.weight]), [['prefix', 2], ['load', 1], ['balance', 3], ['adapter', 0.5]]);
  assert.deepEqual(p.adapter.load.place.scorers.map((s) => [s.scorer.name, s.weight]), [['inflight', 1], ['adapter', 0.5]]);
  // A request that names no adapter: the adapter term would be 0 everywhere, so it is left out.
  assert.deepEqual(p.prefix.place.scorers.map((s) => [s.scorer.name, s.weight]), [['prefix', 2], ['load', 1], ['balance', 3]]);
  assert.deepEqual(p.load.place.scorers.map((s) => [s.scorer.name, s.weight]), [['inflight', 1]]);
  assert.deepEqual(buildProfiles({ prefix: 2, load: 1, kv: 0, balance: 3, adapter: 0 }).adapter.load.place.scorers.map((s) => s.scorer.name), ['inflight']);
  assert.deepEqual(p.prefix.place.filters.map((f) => f.name), ['takes-new-work', 'class-share']);
  assert.deepEqual(p.prefix.overflow.filters.map((f) => f.name), ['overflow-room']);
});

test('a new scorer is one object in a profile: it changes the pick by its weight, the filters still hold', () => {
  // A made-up signal: prefer the cooler GPU. Worker a is idle but hot; b is busier and cool; c is cool but down.
  const workers = [w('a', 0, { kvUsage: 0.9 }), w('b', 3, { kvUsage: 0.1 }), w('c', 0, { state: 'down', kvUsage: 0 })];
  const cool: Scorer = { name: 'cool', score: (cands) => cands.map((x) => -(x.kvUsage ?? 0)) };
  const base = buildProfiles({ prefix: 1, load: 1, kv: 0, balance: 0 }).prefix.place;
  const ctx = { input: input(workers), fleet: undefined, overLimit: false };
  assert.equal(runProfile(base, workers, { input: input(workers) }, ctx).best?.id, 'a', 'load alone: the idle one');
  const withCool = { ...base, scorers: [...base.scorers, { scorer: cool, weight: 1 }] };
  const r = runProfile(withCool, workers, { input: input(workers) }, ctx);
  assert.equal(r.best?.id, 'b', 'the new term outweighs 0.3 of load');
  assert.equal(r.scores.has('c'), false, 'a down worker is filtered out before any scorer sees it');
  assert.equal(withCool.picker, maxScorePicker);
});
