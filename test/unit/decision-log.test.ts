/**
 * The admin endpoint's decision log: a ring of the last N, newest first, each with its time as
 * an ISO date (stored as epoch milliseconds and formatted only when read).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DecisionLog } from '../../src/gate/decision-log.js';

test('keeps the last N decisions, newest first, each dated in ISO form when read', () => {
  const log = new DecisionLog(3);
  const t0 = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
  for (let i = 0; i < 5; i++) {
    log.push({ atMs: t0 + i * 1000, key_kind: undefined, key_hash: `h${i}`, outcome: 'new', worker: `w${i}`, explanation: { mode: 'both', totalBlocks: 0, rule: 'scored', spilled: false, candidates: [] } });
  }
  const recent = log.recent();
  assert.deepEqual(recent.map((r) => r.key_hash), ['h4', 'h3', 'h2']);
  assert.equal(recent[0]!.at, '2026-01-02T03:04:09.678Z');
  assert.equal(recent[2]!.at, '2026-01-02T03:04:07.678Z');
  assert.ok(!('atMs' in recent[0]!), 'the stored form stays inside');
  assert.equal(Object.keys(recent[0]!)[0], 'at', 'the date leads, as it always did');
  assert.deepEqual(log.recent(1).map((r) => r.worker), ['w4']);
});
