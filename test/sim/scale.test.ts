import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { textBlockIds, TEXT_BLOCK_TOKENS } from '../../src/sim/blocks.js';
import { DEFAULT_COST_MODEL, DEFAULT_FLEET } from '../../src/sim/cost-model.js';
import { pooledBound } from '../../src/sim/pooled-bound.js';
import { measureCapacity, replicateSessions, saltText, sharedBlocks } from '../../src/sim/scale.js';
import { finishWorkload, type SimRequest, type Workload } from '../../src/sim/workload.js';

before(() => initHashing());

/** Prompts are many 64-byte blocks long (16 tokens × 4 chars). */
const BLOCK = TEXT_BLOCK_TOKENS * 4;
const chunk = (tag: string, blocks: number) => `${tag}:`.padEnd(blocks * BLOCK, tag.slice(0, 1));

/**
 * Two agent sessions sharing a 6-block instruction prefix; each then runs three turns, each turn
 * resending the previous one plus a 4-block tool result (and a partial tail).
 */
function agentTrace(): Workload {
  const instructions = chunk('instructions', 6);
  const raw: Array<Omit<SimRequest, 'index'>> = [];
  for (const [s, session] of ['alpha', 'beta'].entries()) {
    let prompt = instructions;
    for (let turn = 0; turn < 3; turn++) {
      prompt += chunk(`${session}-tool-${turn}`, 4) + 'tail';
      const text = prompt;
      raw.push({ arrivalS: s * 0.5 + turn * 2, promptTokens: Math.ceil(text.length / 4), outputTokens: 8, blocks: textBlockIds(text), sessionId: session, text: () => text });
      prompt = prompt.slice(0, -4);
    }
  }
  return finishWorkload('test-trace', 'two agent sessions', TEXT_BLOCK_TOKENS, raw);
}

describe('scaling a session trace up by re-salted copies', () => {
  test('blocks that two or more sessions contain are the shared ones: here the instructions only', () => {
    const w = agentTrace();
    const shared = sharedBlocks(w);
    assert.equal(shared.size, 6);
    for (const r of w.requests) assert.deepEqual(r.blocks.slice(0, 6).every((b) => shared.has(b)), true);
    assert.ok(w.requests.every((r) => r.blocks.slice(6).every((b) => !shared.has(b))), "w.requests.every((r) => r.blocks.slice(6).every((b) => !shared.has(b)))");
  });

  test('a copy keeps the shared blocks, gets private blocks of its own, and its turns still extend one another', () => {
    const w = agentTrace();
    const replay = replicateSessions(w, 10, 30);
    const r = replay.workload.requests;
    const copies = [...new Set(r.map((x) => x.sessionId))];
    assert.ok(copies.includes('alpha#copy1') && copies.includes('alpha#copy2'), copies.join(','));
    const turns = (sid: string) => r.filter((x) => x.sessionId === sid);
    const [orig, one, two] = ['alpha', 'alpha#copy1', 'alpha#copy2'].map(turns);
    const common = orig![0]!.blocks.slice(0, 6);
    for (const t of [...one!, ...two!]) assert.deepEqual(t.blocks.slice(0, 6), common, 'instructions stay common');
    // Private blocks: same count, none shared with the original or the other copy.
    const privateOf = (ts: SimRequest[]) => new Set(ts.flatMap((t) => t.blocks.slice(6)));
    const [po, p1, p2] = [orig!, one!, two!].map(privateOf);
    assert.equal(p1!.size, po!.size);
    for (const b of p1!) assert.ok(!po!.has(b) && !p2!.has(b), "!po!.has(b) && !p2!.has(b)");
    // A copy's second turn starts with its first turn's blocks: it hits its own cache.
    assert.deepEqual(one![1]!.blocks.slice(0, one![0]!.blocks.length), one![0]!.blocks);
    // And the text the router sees is salted the same way (kvgate hashes the text itself).
    assert.deepEqual(textBlockIds(one![1]!.text()).slice(6, 10).length, 4);
    assert.notEqual(one![1]!.text(), orig![1]!.text());
    assert.equal(one![1]!.text().length, orig![1]!.text().length);
    assert.ok(one![1]!.text().startsWith(orig![1]!.text().slice(0, 6 * BLOCK)));
  });

  test('sessions keep their recorded turn timing; more of them run at once to reach a rate; a warm-up is marked', () => {
    const w = agentTrace();
    const replay = replicateSessions(w, 6, 60);
    const alpha1 = replay.workload.requests.filter((x) => x.sessionId === 'alpha#copy1').map((x) => x.arrivalS);
    assert.deepEqual(alpha1.map((t) => Math.round((t - alpha1[0]!) * 1e6) / 1e6), [0, 2, 4]);
    assert.equal(replay.warmupS, 4); // the median session lasts 4 s
    const measured = replay.workload.requests.filter((x) => x.arrivalS >= replay.warmupS);
    assert.equal(measured.length, 60);
    const span = measured[measured.length - 1]!.arrivalS - measured[0]!.arrivalS;
    assert.ok(Math.abs(measured.length / span - 6) < 1.5, `steady rate ${(measured.length / span).toFixed(2)} req/s`);
  });

  test('salting keeps the byte length and every byte before the salt point, even inside multi-byte text', () => {
    const text = 'é'.repeat(40) + 'abc'.repeat(30);
    const salted = saltText(text, 33, 5); // byte 33 is inside an 'é'
    const enc = new TextEncoder();
    assert.equal(enc.encode(salted).length, enc.encode(text).length);
    assert.deepEqual(enc.encode(salted).slice(0, 33), enc.encode(text).slice(0, 33));
    assert.notEqual(salted, text);
    assert.equal(saltText('short', 64, 1), 'short');
  });

  test('capacity: the lower of the compute limit, workers / (overhead + (prompt × (1 − pooled hit) + output) / prefill rate), and the KV-memory limit', () => {
    const w = agentTrace();
    const fleet = { ...DEFAULT_FLEET, workers: 4 };
    const c = measureCapacity(w, fleet, DEFAULT_COST_MODEL);
    const hit = pooledBound(w, fleet).hitRate;
    const prompt = w.requests.reduce((n, r) => n + r.promptTokens, 0) / w.requests.length;
    const out = 8;
    const service = DEFAULT_COST_MODEL.prefillOverheadS + (prompt * (1 - hit) + out) / DEFAULT_COST_MODEL.prefillTokensPerS;
    assert.ok(Math.abs(c.computeRps - 4 / service) < 1e-9, "Math.abs(c.computeRps - 4 / service) < 1e-9");
    assert.equal(c.capacityRps, Math.min(c.computeRps, c.memoryRps));
    // A cache too small for the requests running at once makes memory the limit.
    const tiny = measureCapacity(w, { ...fleet, cacheTokens: 2000 }, DEFAULT_COST_MODEL);
    assert.ok(tiny.memoryRps < tiny.computeRps && tiny.capacityRps === tiny.memoryRps, "tiny.memoryRps < tiny.computeRps && tiny.capacityRps === tiny.memoryRps");
    assert.ok(hit > 0.3, 'the instructions and earlier turns are reused');
    assert.ok(Math.abs(c.naturalRps - 5 / 4.5) < 1e-9, "Math.abs(c.naturalRps - 5 / 4.5) < 1e-9");
  });
});
