/**
 * The gate's targets as the bench checks them: the memory store's bar is lower at ~400 KB, where
 * reading the body is most of any server's work, and full duplex is held to buffered's rate.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RunRow } from '../../src/bench/run-row.js';
import { evaluateTargets } from '../../src/bench/targets.js';

/** A saturation row with only what the target checks read. */
function row(target: RunRow['target'], size: string, bodyMode: RunRow['body_mode'], decisionsPerS: number, ratio: number | null): RunRow {
  return { target, size, body_mode: bodyMode, load: 'saturation', decisions_per_s: decisionsPerS, ratio_to_noop: ratio } as RunRow;
}

const find = (checks: ReturnType<typeof evaluateTargets>, store: string, size: string, prefix: string) =>
  checks.find((c) => c.store === store && c.size === size && c.target.startsWith(prefix));

test('memory: 70% of the ceiling at 2 KB and 32 KB, 50% at 400 KB; Redis 50% everywhere', () => {
  const checks = evaluateTargets([
    row('memory', '2k', 'buffered', 600, 0.6),
    row('memory', '32k', 'buffered', 700, 0.71),
    row('memory', '400k', 'buffered', 100, 0.55),
    row('redis', '400k', 'buffered', 90, 0.49),
  ]);
  assert.deepEqual([find(checks, 'memory', '2k', 'decisions')?.limit, find(checks, 'memory', '2k', 'decisions')?.met], [0.7, false]);
  assert.deepEqual([find(checks, 'memory', '32k', 'decisions')?.limit, find(checks, 'memory', '32k', 'decisions')?.met], [0.7, true]);
  assert.deepEqual([find(checks, 'memory', '400k', 'decisions')?.limit, find(checks, 'memory', '400k', 'decisions')?.met], [0.5, true]);
  assert.deepEqual([find(checks, 'redis', '400k', 'decisions')?.limit, find(checks, 'redis', '400k', 'decisions')?.met], [0.5, false]);
});

test('full duplex is held to 80% of buffered for the same store and size, only where both ran', () => {
  const checks = evaluateTargets([
    row('memory', '2k', 'buffered', 1000, 0.6),
    row('memory', '2k', 'full_duplex', 850, 0.6),
    row('memory', '400k', 'buffered', 300, 0.52),
    row('memory', '400k', 'full_duplex', 200, 0.5),
    row('memory', '32k', 'full_duplex', 500, 0.5),
  ]);
  const small = find(checks, 'memory', '2k', 'full duplex');
  assert.equal(small?.met, true);
  assert.ok(Math.abs((small?.value ?? 0) - 0.85) < 1e-9, "Math.abs((small?.value ?? 0) - 0.85) < 1e-9");
  assert.equal(find(checks, 'memory', '400k', 'full duplex')?.met, false);
  assert.equal(find(checks, 'memory', '32k', 'full duplex'), undefined, 'no buffered row to compare with');
  // Full-duplex rows never stand in for the buffered ratio targets.
  assert.equal(checks.filter((c) => c.target.startsWith('decisions') && c.store === 'memory').length, 2);
});
