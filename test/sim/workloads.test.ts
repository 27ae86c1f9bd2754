import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { initHashing } from '../../src/request/hashing.js';
import { textBlockIds, tokensOfText } from '../../src/sim/blocks.js';
import { continuationParents } from '../../src/sim/workload.js';
import { parseAgentSessions } from '../../src/sim/workloads/agent-sessions.js';
import { mooncakeText, parseMooncake } from '../../src/sim/workloads/mooncake.js';
import { SYNTHETIC_WORKLOADS, syntheticWorkload } from '../../src/sim/workloads/synthetic.js';
import { detectFormat, loadTrace } from '../../src/sim/workloads/trace.js';

before(() => initHashing());

const MOONCAKE = [
  '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}',
  '{"timestamp": 500, "input_length": 1600, "output_length": 7, "hash_ids": [0, 1, 2, 3]}',
  '',
  '{"timestamp": 250, "input_length": 600, "output_length": 0, "hash_ids": [0, 9]}',
].join('\n');

const SESSION_A = [
  JSON.stringify({ timestamp: 1_000_000, input: 'You are an agent. '.repeat(20), output: 'ok', session_id: 'a' }),
  JSON.stringify({ timestamp: 3_500_000, input: 'You are an agent. '.repeat(20) + 'Tool said hi. '.repeat(10), output: 'done!', session_id: 'a' }),
].join('\n');
const SESSION_B = JSON.stringify({ timestamp: 9_000_000_000, input: 'Other agent prompt. '.repeat(5), output: '', session_id: 'b' });

describe('workloads', () => {
  test('Mooncake: sorted by timestamp, whole 512-token blocks only, no sessions, text synthesized from ids', () => {
    const w = parseMooncake(MOONCAKE, 'tiny.jsonl');
    assert.equal(w.blockTokens, 512);
    assert.deepEqual(w.requests.map((r) => r.arrivalS), [0, 0.25, 0.5]);
    assert.deepEqual(w.requests.map((r) => r.promptTokens), [1100, 600, 1600]);
    assert.deepEqual(w.requests.map((r) => r.outputTokens), [5, 1, 7]); // 0 output tokens still yield the first
    // 1100 tokens = 2 whole blocks + a partial third; ids are interned in order of appearance.
    assert.deepEqual(w.requests.map((r) => r.blocks.length), [2, 1, 3]);
    assert.equal(w.requests[0]!.blocks[0], w.requests[2]!.blocks[0]);
    assert.equal(w.requests[0]!.blocks[1], w.requests[2]!.blocks[1]);
    assert.ok(w.requests.every((r) => r.sessionId === undefined), "w.requests.every((r) => r.sessionId === undefined)");
    // Equal id prefixes give equal text prefixes, ~2 KB per block, cut to the prompt length.
    const [t0, , t2] = w.requests.map((r) => r.text());
    assert.equal(t0!.length, 1100 * 4);
    assert.equal(t2!.slice(0, 3 * 2048), mooncakeText([0, 1, 2], 1536));
    assert.ok(t2!.startsWith(t0!.slice(0, 2 * 2048)));
    assert.notEqual(w.requests[1]!.text().slice(2048, 4096), t0!.slice(2048, 4096));
  });

  test('Mooncake: rate scale and request cap', () => {
    const w = parseMooncake(MOONCAKE, 'tiny.jsonl', { rateScale: 2, maxRequests: 2 });
    assert.deepEqual(w.requests.map((r) => r.arrivalS), [0, 0.125]);
    assert.throws(() => parseMooncake('{"timestamp": 0}', 'bad.jsonl'), /bad.jsonl:1/);
  });

  test('agent sessions: µs timestamps per folder, tokens and blocks from the text, session ids kept', () => {
    const w = parseAgentSessions(
      [
        { source: 'x/a.jsonl', group: 'x', text: SESSION_A },
        { source: 'y/b.jsonl', group: 'y', text: SESSION_B },
      ],
      'tiny',
    );
    // Folder y starts at its own first timestamp, so it does not wait 2.5 hours behind folder x.
    assert.deepEqual(w.requests.map((r) => [r.arrivalS, r.sessionId]), [
      [0, 'a'],
      [0, 'b'],
      [2.5, 'a'],
    ]);
    const second = w.requests[2]!;
    assert.equal(second.promptTokens, tokensOfText('You are an agent. '.repeat(20) + 'Tool said hi. '.repeat(10)));
    assert.equal(second.outputTokens, 2); // "done!" ≈ 2 tokens
    // The second turn extends the first: its block chain starts with the first's.
    const first = w.requests[0]!;
    assert.ok(first.blocks.length >= 2, "first.blocks.length >= 2");
    assert.deepEqual(second.blocks.slice(0, first.blocks.length), first.blocks);
    assert.deepEqual([...continuationParents(w)], [-1, -1, 0]);
  });

  test('format detection, and --trace on a file or a folder', () => {
    assert.equal(detectFormat(MOONCAKE.split('\n')[0]!, 'm'), 'mooncake');
    assert.equal(detectFormat(SESSION_B, 's'), 'agent-sessions');
    assert.throws(() => detectFormat('{"foo": 1}', 'z'), /neither/);
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-sim-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'm.jsonl'), MOONCAKE);
    assert.equal(loadTrace(join(dir, 'm.jsonl')).requests.length, 3);
    const sessions = join(dir, 'agents');
    mkdirSync(join(sessions, 'x'), { recursive: true });
    mkdirSync(join(sessions, 'y'), { recursive: true });
    writeFileSync(join(sessions, 'x', 'a.jsonl'), SESSION_A);
    writeFileSync(join(sessions, 'y', 'b.jsonl'), SESSION_B);
    const w = loadTrace(sessions);
    assert.equal(w.requests.length, 3);
    assert.equal(w.blockTokens, 16);
    writeFileSync(join(sessions, 'm.jsonl'), MOONCAKE);
    assert.throws(() => loadTrace(sessions), /mixes/);
  });

  test('text blocks are chained: a shared prefix gives shared leading ids, then they differ', () => {
    const a = textBlockIds('x'.repeat(64 * 3) + 'a'.repeat(64));
    const b = textBlockIds('x'.repeat(64 * 3) + 'b'.repeat(64));
    assert.equal(a.length, 4);
    assert.deepEqual(a.slice(0, 3), b.slice(0, 3));
    assert.notEqual(a[3], b[3]);
    assert.equal(textBlockIds('x'.repeat(63)).length, 0); // no whole block yet
  });

  for (const name of SYNTHETIC_WORKLOADS) {
    test(`synthetic ${name}: the requested size, sorted, deterministic per seed`, () => {
      const a = syntheticWorkload(name, { requests: 120, seed: 7 });
      const b = syntheticWorkload(name, { requests: 120, seed: 7 });
      const c = syntheticWorkload(name, { requests: 120, seed: 8 });
      assert.equal(a.requests.length, 120);
      assert.ok(a.requests.every((r, i) => i === 0 || r.arrivalS >= a.requests[i - 1]!.arrivalS));
      assert.deepEqual(
        a.requests.map((r) => [r.arrivalS, r.promptTokens, r.blocks.length]),
        b.requests.map((r) => [r.arrivalS, r.promptTokens, r.blocks.length]),
      );
      assert.equal(a.requests[5]!.text(), b.requests[5]!.text());
      assert.notDeepEqual(a.requests.map((r) => r.arrivalS), c.requests.map((r) => r.arrivalS));
      // Prompt token counts match the text (4 chars a token) and the blocks cover its whole blocks.
      const r = a.requests[3]!;
      assert.equal(r.text().length, r.promptTokens * 4);
      assert.equal(r.blocks.length, Math.floor(r.promptTokens / 16));
    });
  }

  test('synthetic sessions: chat and agent turns extend their previous turn; rag and system prompts have no session', () => {
    const chat = syntheticWorkload('chat', { requests: 200, seed: 1 });
    assert.ok(chat.requests.every((r) => r.sessionId?.startsWith('chat-')), "chat.requests.every((r) => r.sessionId?.startsWith('chat-'))");
    const parents = continuationParents(chat);
    const continued = chat.requests.filter((r) => parents[r.index]! >= 0);
    assert.ok(continued.length > 50, "continued.length > 50");
    for (const r of continued) assert.equal(chat.requests[parents[r.index]!]!.sessionId, r.sessionId);
    assert.ok(syntheticWorkload('rag', { requests: 50, seed: 1 }).requests.every((r) => r.sessionId === undefined));
    assert.ok(syntheticWorkload('system-prompt', { requests: 50, seed: 1 }).requests.every((r) => r.sessionId === undefined));
  });

  // The shared traces are read by path when present; nothing depends on them.
  const shared = resolve(import.meta.dirname, '../../../shared/data/traces');
  test('the shared traces load when present', { skip: !existsSync(shared) && 'no ../shared/data/traces' }, () => {
    const m = loadTrace(join(shared, 'mooncake/synthetic_trace.jsonl'), { maxRequests: 100 });
    assert.equal(m.requests.length, 100);
    assert.equal(m.blockTokens, 512);
    const a = loadTrace(join(shared, 'agent-sessions/taubench'), { maxRequests: 100 });
    assert.equal(a.requests.length, 100);
    assert.ok(a.requests.every((r) => r.sessionId !== undefined), "a.requests.every((r) => r.sessionId !== undefined)");
  });
});
