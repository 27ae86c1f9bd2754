/**
 * Golden decisions: `decide()` over 800 seeded random inputs (fleets of 1-16 workers in every
 * state, in flight below, at and past their limits, with and without engine figures, engine room,
 * LoRA adapters, with and without the adapter filter; prefix matches, sessions and their affinities, classes of service, overflow
 * factors, every mode, random weights) must give exactly the decisions in decide-golden.json:
 * kind, worker, outcome, preconditions and the whole explanation with every candidate's score.
 *
 * The snapshot was written by the policy as it stood before the decision was split into filters,
 * scorers and a picker; the refactor is only a refactor while this stays green. Any change of the
 * policy's behaviour turns it red, on purpose: regenerate (KVGATE_UPDATE_GOLDEN=1) only for a
 * change meant to alter decisions, and say so in the commit.
 *
 * Decisions are compared as JSON, the form they leave the policy in (traces, logs, the debug
 * endpoint, the store's preconditions): a score of -0 and one of 0 are the same decision.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { decide } from '../../src/routing/policy.js';
import { POLICY_MODES } from '../../src/config/vocabulary.js';
import type { DecisionInput, WorkerState, WorkerView } from '../../src/routing/types.js';
import { initHashing } from '../../src/util/xxhash.js';

before(() => initHashing());

const SNAPSHOT = fileURLToPath(new URL('./decide-golden.json', import.meta.url));
const CASES = 800;

/** mulberry32, here so the snapshot depends on nothing else in the tree. */
function rng(seed: number): { next(): number; int(lo: number, hi: number): number; pick<T>(xs: readonly T[]): T; chance(p: number): boolean } {
  let s = seed >>> 0;
  const next = (): number => {
    let t = (s = (s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (xs) => xs[Math.floor(next() * xs.length)]!,
    chance: (p) => next() < p,
  };
}

const STATES: readonly WorkerState[] = ['healthy', 'healthy', 'healthy', 'pressured', 'draining', 'down'];
const ADAPTERS = ['sql-lora', 'chat-lora', 'code-lora', 'math-lora'];

function randomInput(seed: number): DecisionInput {
  const r = rng(seed);
  const n = r.int(1, 16);
  const maxInflight = r.pick([1, 2, 4, 8, 10, 16]);
  const totalBlocks = r.chance(0.15) ? 0 : r.int(1, 40);
  // A few load levels, so ties (and the tie-break) are common; some past the limit (overflow).
  const crowded = r.chance(0.35);
  const workers: WorkerView[] = Array.from({ length: n }, (_, i) => {
    const max = r.chance(0.7) ? maxInflight : r.pick([1, 3, 8, 16]);
    const w: WorkerView = {
      id: `w${i + 1}`,
      state: r.pick(STATES),
      inflight: crowded ? r.int(max - 1, Math.ceil(max * 2.2)) : r.pick([0, 0, 1, 2, Math.floor(max / 2), max - 1, max]),
      maxInflight: max,
      prefixBlocks: totalBlocks > 0 && r.chance(0.4) ? r.int(0, totalBlocks + (r.chance(0.1) ? 3 : 0)) : 0,
    };
    if (r.chance(0.6)) w.kvUsage = r.pick([0, 0.1, 0.5, 0.84, 0.9, 1, r.next()]);
    if (r.chance(0.6)) w.waiting = r.int(0, 12);
    if (r.chance(0.6)) w.running = r.int(0, 40);
    if (r.chance(0.6)) w.engineRoom = r.chance(0.7);
    if (r.chance(0.3)) {
      const max = r.int(1, 3);
      const names = ADAPTERS.filter(() => r.chance(0.4)).slice(0, r.chance(0.8) ? max : max + 1);
      w.adapters = { names, max };
    }
    return w;
  });
  const session = r.chance(0.6);
  const affinity = r.chance(0.6) ? (r.chance(0.9) ? r.pick(workers).id : 'gone') : undefined;
  const input: DecisionInput = {
    keyHash: r.chance(0.9) ? (r.int(0, 2 ** 31) * 7919).toString(16).padStart(16, '0') : undefined,
    session,
    affinity,
    keyInflight: r.pick([0, 0, 0, 1, 3, 4, 8]),
    totalBlocks,
    workers,
    mode: r.pick(POLICY_MODES),
    weights: r.chance(0.5)
      ? { prefix: 1, load: 1, kv: 0.5, balance: 3 }
      : { prefix: r.pick([0, 0.5, 1, 2]), load: r.pick([0, 1, 1.5]), kv: r.pick([0, 0.5, 1]), balance: r.pick([0, 1, 3]) },
    balanceFloor: r.pick([0, 1, 3]),
    maxInflightPerSession: r.pick([1, 2, 4, 8]),
  };
  if (r.chance(0.7)) input.overflowFactor = r.pick([0, 1, 1.5, 2, 4]);
  if (r.chance(0.35)) input.classShare = r.pick([1, 0.875, 0.5, 0.25, 0.01]);
  if (r.chance(0.35)) {
    // Drawn in this order (name, then weight) since the snapshot was written, when the weight rode on the request.
    const name = r.pick(ADAPTERS);
    input.weights = { ...input.weights, adapter: r.pick([0, 0.5, 1, 2]) };
    input.adapter = { name };
  }
  // Drawn last, so the cases written before `scoring.adapter_filter` existed kept their inputs.
  if (input.adapter && r.chance(0.3)) input.adapter.filter = false;
  return input;
}

function decisions(): unknown[] {
  return Array.from({ length: CASES }, (_, i) => {
    const input = randomInput(0x5eed + i * 101);
    return JSON.parse(JSON.stringify(decide(input)));
  });
}

test('decide() gives the golden decisions on seeded random inputs', () => {
  const got = decisions();
  if (process.env.KVGATE_UPDATE_GOLDEN === '1') writeFileSync(SNAPSHOT, `[\n${got.map((d) => JSON.stringify(d)).join(',\n')}\n]\n`);
  const want = JSON.parse(readFileSync(SNAPSHOT, 'utf8')) as unknown[];
  assert.equal(got.length, want.length);
  for (let i = 0; i < got.length; i++) assert.deepEqual(got[i], want[i], `case ${i}`);
});

test('the golden inputs reach every rule and outcome (the snapshot covers what it claims)', () => {
  const seen = new Set<string>();
  for (const d of decisions() as Array<{ kind: string; outcome?: string; reason?: string; explanation: { rule: string; spilled: boolean } }>) {
    seen.add(`rule:${d.explanation.rule}`);
    seen.add(d.kind === 'route' ? `outcome:${d.outcome}` : `shed:${d.reason}`);
    if (d.explanation.spilled) seen.add('spilled');
  }
  for (const k of ['rule:sticky', 'rule:scored', 'rule:overflow', 'rule:shed', 'outcome:affinity_hit', 'outcome:new', 'outcome:migrated', 'outcome:prefix_hit', 'outcome:unkeyed', 'shed:overloaded', 'shed:no_healthy_workers', 'spilled']) {
    assert.ok(seen.has(k), `no golden case reaches ${k}`);
  }
});
