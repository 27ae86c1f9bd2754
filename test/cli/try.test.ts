/**
 * `kvgate try` against a real gate: the decision of each turn (cluster, headers, the gate's own
 * explanation), a conversation staying on its worker, a shed answered by the gate, the lease
 * released as Envoy's response headers would, and clear errors.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import { registerTryCommand, type TurnReport } from '../../src/cli/try-command.js';
import { setWorkerState, startTestGate, workers, type TestGate } from '../helpers/gate.js';

async function tryIt(...args: string[]): Promise<string> {
  let out = '';
  const program = new Command('kvgate').exitOverride();
  registerTryCommand(program, { write: (s) => (out += s) });
  await program.parseAsync(['node', 'kvgate', 'try', ...args]);
  return out;
}

describe('kvgate try', () => {
  let gate: TestGate;
  before(async () => {
    gate = await startTestGate({ workers: [{ id: 'w1', cluster: 'c1' }, { id: 'w2', cluster: 'c2' }, { id: 'w3', cluster: 'c3' }] });
  });
  after(() => gate.close(100));

  test('a conversation: placed by score, then sticky, with every candidate explained', async () => {
    const out = await tryIt('--target', gate.target, '--admin', gate.admin, '--session', 'conv-1', '--turns', '3', '--json');
    const turns = JSON.parse(out) as TurnReport[];
    assert.equal(turns.length, 3);
    assert.equal(turns[0]!.result, 'routed');
    assert.match(turns[0]!.cluster!, /^c[123]$/);
    assert.deepEqual(turns[0]!.headers_set, { 'x-kvgate-cluster': turns[0]!.cluster });
    assert.equal(turns[0]!.decision?.outcome, 'new');
    assert.equal(turns[0]!.decision?.explanation?.rule, 'scored');
    assert.equal(turns[0]!.decision?.explanation?.candidates?.length, 3);
    // The default system prompt spans several prefix blocks, so the index has something to match.
    assert.ok((turns[0]!.decision?.explanation?.total_blocks ?? 0) >= 7, "(turns[0]!.decision?.explanation?.total_blocks ?? 0) >= 7");
    for (const t of turns.slice(1)) {
      assert.equal(t.cluster, turns[0]!.cluster, 'the conversation stays');
      assert.equal(t.decision?.outcome, 'affinity_hit');
    }
    // Each turn's lease ended with the response headers kvgate try sent, as Envoy's would.
    assert.ok((await workers(gate.admin)).every((w) => w.inflight === 0), "(await workers(gate.admin)).every((w) => w.inflight === 0)");
  });

  test('plain output: the cluster, the outcome in words, a row per candidate with the chosen one marked', async () => {
    const out = await tryIt('--target', gate.target, '--admin', gate.admin, '--session', 'plain-1');
    assert.match(out, /^kvgate try: 1 turn to the gate at 127\.0\.0\.1:\d+, session plain-1$/m);
    assert.match(out, /^turn 1: → cluster c[123] {2}\((new: a new key, placed by score)\)$/m);
    assert.match(out, /^ {2}headers set: x-kvgate-cluster: c[123]$/m);
    assert.match(out, /WORKER\s+STATE\s+IN-FLIGHT\s+PREFIX BLOCKS\s+KV USE\s+ENGINE WORK\s+SCORE/);
    assert.equal(out.split('\n').filter((l) => /^ {2}\* {2}w[123]\s+healthy/.test(l)).length, 1, 'one chosen worker');
  });

  test('a shed is the gate answering the client itself', async () => {
    const drained = await startTestGate({ workers: [{ id: 'd1', cluster: 'd1' }] });
    try {
      await setWorkerState(drained.admin, 'd1', 'draining');
      const out = await tryIt('--target', drained.target, '--admin', drained.admin, '--json');
      const [turn] = JSON.parse(out) as TurnReport[];
      assert.equal(turn!.result, 'answered');
      assert.equal(turn!.status, 503);
      assert.match(turn!.body!, /"error"/);
    } finally {
      await drained.close(100);
    }
  });

  test('no admin API: the decision still prints, and the note says how to get the explanation', async () => {
    const out = await tryIt('--target', gate.target, '--admin', 'http://127.0.0.1:1', '--session', 'no-admin');
    assert.match(out, /^turn 1: → cluster c[123]$/m);
    assert.match(out, /pass the gate's admin address with --admin/);
  });

  test('a gate routing on another header: the note names it and the flag that reads it', async () => {
    const out = await tryIt('--target', gate.target, '--admin', gate.admin, '--routing-header', 'x-other');
    assert.match(out, /^turn 1: no routing answer: the gate set no x-other but did set x-kvgate-cluster: .*pass --routing-header x-kvgate-cluster$/m);
  });

  test('a model no pool serves: the 404, and the note names --model', async () => {
    const pools = await startTestGate({ pools: [{ name: 'p1', models: ['m1'], workers: [{ id: 'p1w', cluster: 'p1w' }] }] });
    try {
      const out = await tryIt('--target', pools.target, '--admin', pools.admin, '--model', 'llama');
      assert.match(out, /^turn 1: the gate answered the client itself: 404 .*model_not_found/m);
      assert.match(out, /no pool of the gate serves this model: pass --model/);
    } finally {
      await pools.close(100);
    }
  });

  test('no gate at the target: a clear error naming the flag', async () => {
    // Port 1: nothing listens there. A gate's port freed by closing it could be taken at once by
    // another test file's server running beside this one (CI once saw the "dead" target answer).
    const target = '127.0.0.1:1';
    await assert.rejects(tryIt('--target', target), /no gate answers ext_proc at 127\.0\.0\.1:\d+: is it running\? .*--target/);
    const program = new Command('kvgate').exitOverride().configureOutput({ writeErr: () => {} });
    registerTryCommand(program, { write: () => assert.fail('nothing may run') });
    await assert.rejects(program.parseAsync(['node', 'kvgate', 'try', '--target', 'nohost']), { name: 'CommanderError' });
  });
});

describe('kvgate try: a gate hashing session ids under a key', () => {
  const KEY = 'try-test-key-0123456789abcdef';
  let gate: TestGate;
  before(async () => {
    gate = await startTestGate({ workers: [{ id: 'k1', cluster: 'k1' }, { id: 'k2', cluster: 'k2' }] }, { sessionHashKey: KEY });
  });
  after(() => gate.close(100));

  test('with the key it finds its decision; without it, the note says how to pass it', async () => {
    const keyed = JSON.parse(await tryIt('--target', gate.target, '--admin', gate.admin, '--session', 'keyed-1', '--session-hash-key', KEY, '--json')) as TurnReport[];
    assert.equal(keyed[0]!.decision?.outcome, 'new', 'the record found by the keyed hash');
    assert.equal(keyed[0]!.explanation_missing, undefined);
    // The same session id, hashed without the key, names no decision of this gate.
    const plain = JSON.parse(await tryIt('--target', gate.target, '--admin', gate.admin, '--session', 'keyed-1', '--json')) as TurnReport[];
    assert.equal(plain[0]!.decision, undefined);
    assert.match(plain[0]!.explanation_missing!, /hashing session ids under a key: pass it here too, in KVGATE_SESSION_HASH_KEY or --session-hash-key/);
  });
});

describe('kvgate try: a candidate past KV pressure', () => {
  test('shows the free KV a one-off fitted in beside its KV use', async () => {
    const { formatTurn } = await import('../../src/cli/try-command.js');
    const out = formatTurn({
      turn: 1,
      result: 'routed',
      cluster: 'c1',
      headers_set: { 'x-gateway-destination-cluster': 'c1' },
      decision: {
        at: '2026-12-02T00:00:00.000Z',
        pool: 'default',
        outcome: 'prefix_hit',
        worker: 'w1',
        explanation: {
          mode: 'both',
          rule: 'overflow',
          total_blocks: 6,
          candidates: [
            { worker: 'w1', state: 'pressured', inflight: 16, max_inflight: 16, prefix_blocks: 0, kv_usage: 0.9, kv_room_tokens: 4000, score: -0.5 },
            { worker: 'w2', state: 'pressured', inflight: 16, max_inflight: 16, prefix_blocks: 0, kv_usage: 0.97 },
          ],
        },
      } as never,
    });
    assert.match(out, /\* +w1 +pressured +16\/16 +0\/6 +90\.0%, 4,000 tokens free/);
    assert.match(out, /w2 +pressured +16\/16 +0\/6 +97\.0% +- +-/);
  });
});
