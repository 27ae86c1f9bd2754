/**
 * The sessions term: a worker's excess over its fair share of the fleet's live sessions, for a
 * long-prompt session being placed. The scorer on its own, in a decision (a worker holding the
 * prompt and many live sessions, but no queue, loses the next agent to an emptier one), the
 * store's count of live sessions, and the gate feeding that count to the decision.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate, type GateResult } from '../../src/gate/gate.js';
import { decide } from '../../src/routing/policy.js';
import { fleetLoad } from '../../src/routing/score.js';
import { sessionsScorer } from '../../src/routing/scorers/sessions.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';
import { LiveSessions } from '../../src/state/live-sessions.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { NO_PRECONDITIONS } from '../helpers/commits.js';
import { decisionInput } from '../helpers/decisions.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

function w(id: string, extra: Partial<WorkerView> = {}): WorkerView {
  return { id, state: 'healthy', inflight: 0, maxInflight: 16, prefixBlocks: 0, ...extra };
}

function input(workers: WorkerView[], sessions: number, extra: Partial<DecisionInput> = {}): DecisionInput {
  return decisionInput(workers, {
    totalBlocks: 40,
    promptTokens: 8000,
    weights: { prefix: 1, load: 1, kv: 0, balance: 0, backlog: 0, sessions },
    balanceFloor: 3,
    sessionsFloor: 3,
    sessionsMinTokens: 4096,
    ...extra,
  });
}

function ctx(ws: WorkerView[], extra: Partial<DecisionInput> = {}, staying?: WorkerView) {
  const i = input(ws, 3, extra);
  return { input: i, fleet: fleetLoad(ws, i.balanceFloor, i.sessionsFloor), placing: true, overLimit: false, staying };
}

describe('sessions scorer', () => {
  test('the excess over the mean, over the mean or the floor if larger, capped at 1; absent counts as none', () => {
    // Mean 6: a has 12 (6 over: -1), b 9 (3 over: -0.5), c 3 and d none (under: 0).
    const ws = [w('a', { liveSessions: 12 }), w('b', { liveSessions: 9 }), w('c', { liveSessions: 3 }), w('d')];
    assert.deepEqual(sessionsScorer.score(ws, ctx(ws)).map((x) => x + 0), [-1, -0.5, 0, 0]);
    // Mean 1, below the floor of 3: a's 2 over count against 3.
    const light = [w('a', { liveSessions: 3 }), w('b', { liveSessions: 1 }), w('c'), w('d')];
    assert.deepEqual(sessionsScorer.score(light, ctx(light)).map((x) => x + 0), [-2 / 3, 0, 0, 0]);
  });

  test('no term where no session is placed, for a short prompt, or for the session staying on its own worker', () => {
    const ws = [w('a', { liveSessions: 12 }), w('b')];
    const i = input(ws, 3);
    assert.deepEqual(sessionsScorer.score(ws, { input: i, fleet: undefined, overLimit: false }).map((x) => x + 0), [0, 0], 'not placing: no fleet figures');
    assert.deepEqual(sessionsScorer.score(ws, ctx(ws, { promptTokens: 1000 })).map((x) => x + 0), [0, 0], 'a chat turn is placed without it');
    assert.deepEqual(sessionsScorer.score(ws, ctx(ws, {}, ws[0])).map((x) => x + 0), [0, 0], 'staying is no new placement');
  });

  test('a worker holding the prompt and many live sessions, with no queue, loses the next long session to an emptier one', () => {
    // a holds the agent's instructions and 12 live sessions in tool calls (nothing running); b holds nothing.
    const ws = [w('a', { prefixBlocks: 40, liveSessions: 12 }), w('b', { liveSessions: 2 })];
    const off = decide(input(ws, 0));
    assert.equal(off.kind === 'route' && off.worker, 'a', 'without the term the prefix wins');
    const on = decide(input(ws, 3));
    assert.equal(on.kind === 'route' && on.worker, 'b', 'with it: 5 sessions over a mean of 7 costs 3 × 5/7 > the prefix');
    // A chat turn (short prompt) is placed as before; so is a request without a session.
    assert.equal((decide(input(ws, 3, { promptTokens: 1000 })) as { worker: string }).worker, 'a');
    assert.equal((decide(input(ws, 3, { session: false })) as { worker: string }).worker, 'a');
  });

  test('weight 0 leaves the term out: decisions are as without it', () => {
    const ws = [w('a', { prefixBlocks: 40, liveSessions: 12 }), w('b')];
    assert.deepEqual(decide(input(ws, 0)), decide({ ...input(ws, 0), weights: { prefix: 1, load: 1, kv: 0, balance: 0, backlog: 0 } }));
  });
});

describe('LiveSessions', () => {
  test('a session counts on its last worker until its window lapses; routed again it moves, not live it drops out', () => {
    const l = new LiveSessions();
    l.record('s1', 'a', true, 0);
    l.record('s2', 'a', true, 1000);
    l.record('s3', 'b', true, 2000);
    assert.deepEqual([...l.totalsSince(0, ['a', 'b', 'c'])], [['a', 2], ['b', 1]]);
    l.record('s1', 'b', true, 3000); // routed again, elsewhere
    assert.deepEqual([...l.totalsSince(0, ['a', 'b'])], [['a', 1], ['b', 2]]);
    l.moved('s3', 'a'); // migrated: counts on its new worker, with the time it had
    assert.deepEqual([...l.totalsSince(0, ['a', 'b'])], [['a', 2], ['b', 1]]);
    // s2 (1000) and s3 (2000) lapse; s1 (3000) stays.
    assert.deepEqual([...l.totalsSince(2500, ['a', 'b'])], [['b', 1]]);
    l.record('s1', 'b', false, 4000); // a short prompt now: not counted
    assert.deepEqual([...l.totalsSince(2500, ['a', 'b'])], []);
  });

  test('the memory store counts what commits mark live, within the window a snapshot asks for, on the store clock', async () => {
    let now = 0;
    const store = new MemoryStore({ now: () => now });
    const workers = ['a', 'b'];
    const commit = (key: string, worker: string, live?: boolean) =>
      store.commit({ pool: 'p', key, workers, blocks: [], worker, preconditions: NO_PRECONDITIONS, affinityTtlMs: 600_000, prefixTtlMs: 60_000, capacityBlocks: 100, live });
    await commit('s:1', 'a', true);
    await commit('s:2', 'a');
    now = 5000;
    await commit('s:3', 'b', true);
    const snap = (windowMs?: number) => store.cachedSnapshot({ pool: 'p', key: undefined, workers, blocks: [], liveWindowMs: windowMs });
    assert.equal(snap().live, undefined, 'not asked: not counted');
    assert.deepEqual([...snap(10_000).live!], [['a', 1], ['b', 1]], 'a commit without a weight is not counted');
    now = 12_000;
    assert.deepEqual([...snap(10_000).live!], [['b', 1]], 's:1, routed 12 s ago, has lapsed');
  });
});

describe('through the gate', () => {
  function routed(r: GateResult): Extract<GateResult, { kind: 'route' }> {
    assert.equal(r.kind, 'route');
    if (r.kind !== 'route') throw new Error('unreachable');
    return r;
  }
  const config = (sessions: number) =>
    parseConfig(
      {
        workers: [{ id: 'w1', cluster: 'gpu_1' }, { id: 'w2', cluster: 'gpu_2' }],
        scoring: { kv_weight: 0, balance_weight: 0, backlog_weight: 0, sessions_weight: sessions, sessions_floor: 1, sessions_min_tokens: 1000 },
      },
      'test',
    );
  // An agent's instructions, 24 blocks of 256 characters (~1,500 tokens), then its own task.
  const instructions = Array.from({ length: 24 }, (_, i) => `instructions b${i} `.padEnd(256, 'x')).join('');
  const agent = (n: number) => chatRequest(instructions + `task ${n} `.padEnd(256, 'y'), { session: `agent-${n}` });

  test('with the term, a new agent leaves the worker holding its instructions and a live agent; without it, it follows them', async () => {
    for (const [weight, apart] of [[3, true], [0, false]] as const) {
      const gate = new Gate(config(weight), new MemoryStore(), silentLogger());
      const first = routed(await gate.route(agent(1)));
      // The first agent is in a tool call: nothing in flight anywhere.
      await gate.release(first.lease);
      const second = routed(await gate.route(agent(2)));
      assert.ok(second.explanation.candidates.find((c) => c.worker === first.worker)!.prefixBlocks >= 24, 'its instructions are held there');
      if (apart) assert.notEqual(second.worker, first.worker, 'one live session over a mean of 0.5 (floor 1) costs 3 × 0.5, more than the prefix held is worth');
      else assert.equal(second.worker, first.worker);
      // The explanation shows the count the term weighed (only where the gate counts sessions).
      assert.equal(second.explanation.candidates.find((c) => c.worker === first.worker)!.liveSessions, apart ? 1 : undefined);
      await gate.release(second.lease);
    }
  });

  test("a session whose prompt is short (a chat turn) is not counted among its worker's live sessions", async () => {
    const gate = new Gate(config(3), new MemoryStore(), silentLogger());
    const q = { pool: gate.pool, key: undefined, workers: ['w1', 'w2'], blocks: [], liveWindowMs: 30_000 };
    const chat = routed(await gate.route(chatRequest('hello', { session: 'chat-1' })));
    await gate.release(chat.lease);
    assert.deepEqual([...(gate.store.cachedSnapshot(q).live ?? [])], []);
    const long = routed(await gate.route(agent(3)));
    await gate.release(long.lease);
    assert.deepEqual([...gate.store.cachedSnapshot(q).live!], [[long.worker, 1]]);
  });
});
