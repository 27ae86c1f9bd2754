/**
 * The gate builds its per-request objects field by field (no conditional spreads, which V8 copies
 * through its slow path). These tests pin what those objects carry, so that a field dropped or an
 * optional one written when it should be absent turns them red: the commit request (every field
 * of the query, the prompt's whole block chain), the routed result and decision-log entry with
 * `from` only on a migration, and a pool pick's `unknownKnob` only when a knob named no pool.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate, type GateResult } from '../../src/gate/gate.js';
import type { RequestInfo } from '../../src/request/request.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import type { CommitRequest, CommitResult } from '../../src/state/store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

const config = () =>
  parseConfig(
    {
      pools: [
        {
          name: 'main',
          models: ['m'],
          workers: [
            { id: 'w1', cluster: 'gpu_1' },
            { id: 'w2', cluster: 'gpu_2' },
          ],
        },
      ],
    },
    'test',
  );

/** A chat request of many 256-character blocks, with a session header when given. */
function req(session?: string): RequestInfo {
  const text = 'the quick brown fox jumps over the lazy dog. '.repeat(60);
  return chatRequest(text, { model: 'm', session });
}

function routed(r: GateResult): Extract<GateResult, { kind: 'route' }> {
  assert.equal(r.kind, 'route');
  if (r.kind !== 'route') throw new Error('unreachable');
  return r;
}

describe('the gate per-request objects', () => {
  test('a commit carries the whole query: pool, store key, workers and the prompt block chain', async () => {
    const store = new MemoryStore();
    const seen: CommitRequest[] = [];
    const commit = store.commit.bind(store);
    store.commit = (c: CommitRequest): Promise<CommitResult> => {
      seen.push(c);
      return commit(c);
    };
    const gate = new Gate(config(), store, silentLogger());
    const r = routed(await gate.route(req('s1')));
    assert.equal(seen.length, 1);
    const c = seen[0]!;
    assert.equal(c.pool, gate.pool);
    assert.equal(c.key, `s:${r.key!.hash}`);
    assert.deepEqual(c.workers, ['w1', 'w2']);
    assert.equal(r.explanation.totalBlocks, 10, 'a prompt of many blocks');
    assert.equal(c.blocks.length, 10);
    assert.equal(c.worker, r.worker);
    assert.ok(c.affinityTtlMs > 0 && c.prefixTtlMs > 0 && c.capacityBlocks > 0, "c.affinityTtlMs > 0 && c.prefixTtlMs > 0 && c.capacityBlocks > 0");
    assert.deepEqual(Object.keys(c).sort(), ['affinityTtlMs', 'blocks', 'capacityBlocks', 'key', 'live', 'liveWindowMs', 'pool', 'preconditions', 'prefixTtlMs', 'worker', 'workers']);
    // A session of 10 blocks (~640 tokens) is below sessions_min_tokens: not weighed among its
    // worker's live sessions, and the counts are not asked for.
    assert.equal(c.live, undefined);
    assert.equal(c.liveWindowMs, undefined);
    // The preconditions as the policy made them, the prefix bound included (the commit checks it).
    assert.deepEqual(Object.keys(c.preconditions), ['affinity', 'below', 'atOrAbove', 'states', 'prefix']);
    assert.deepEqual(c.preconditions.states, [{ worker: r.worker, in: ['healthy'] }]);
    assert.deepEqual(c.preconditions.prefix, { atMost: 0, over: ['w1', 'w2'] });
  });

  test('`from` is on a migration only, in the result and in the decision log', async () => {
    const store = new MemoryStore();
    const gate = new Gate(config(), store, silentLogger());
    const first = routed(await gate.route(req('s2')));
    await gate.release(first.lease);
    assert.equal(first.outcome, 'new');
    assert.equal('from' in first, false);
    assert.equal('from' in gate.decisions.recent(1)[0]!, false);
    await store.setWorkerState(gate.pool, first.worker, 'draining');
    const moved = routed(await gate.route(req('s2')));
    assert.equal(moved.outcome, 'migrated');
    assert.equal(moved.from, first.worker);
    assert.notEqual(moved.worker, first.worker);
    assert.equal(gate.decisions.recent(1)[0]!.from, first.worker);
  });

  test('a pool pick names an unknown knob only when there was one', () => {
    const gate = new Gate(config(), new MemoryStore(), silentLogger());
    const plain = gate.pools.pick(undefined, undefined);
    assert.equal(plain.kind, 'pool');
    assert.equal('unknownKnob' in plain, false);
    assert.equal('unknownKnob' in gate.pools.pick(undefined, 'm'), false);
    const unknown = gate.pools.pick('nope', undefined);
    assert.equal(unknown.kind === 'pool' && unknown.via, 'default');
    assert.equal(unknown.unknownKnob, 'nope');
    const byModel = gate.pools.pick('nope', 'm');
    assert.equal(byModel.kind === 'pool' && byModel.via, 'model');
    assert.equal(byModel.unknownKnob, 'nope');
  });
});
