import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { benchRequests, parseSize, sizeLabel } from '../../src/bench/bodies.js';
import { replaceSection, simVerdicts } from '../../src/bench/docs.js';
import { findTracesDir, traceReplays } from '../../src/bench/traces.js';
import type { ResultRow } from '../../src/sim/metrics.js';

describe('benchmark docs and inputs', () => {
  test('generated sections are replaced between their markers; prose around them stays; missing ones are appended', () => {
    const doc = 'intro\n<!-- bench:gate:start -->\nold\n<!-- bench:gate:end -->\noutro\n';
    const once = replaceSection(doc, 'gate', 'new table');
    assert.equal(once, 'intro\n<!-- bench:gate:start -->\nnew table\n<!-- bench:gate:end -->\noutro\n');
    assert.equal(replaceSection(once, 'gate', 'new table'), once, 'idempotent');
    const appended = replaceSection(doc, 'micro', 'rows');
    assert.ok(appended.startsWith(doc.trimEnd()), "appended.startsWith(doc.trimEnd())");
    assert.ok(appended.endsWith('<!-- bench:micro:start -->\nrows\n<!-- bench:micro:end -->\n'), "appended.endsWith('<!-- bench:micro:start -->\\nrows\\n<!-- bench:micro:end -->\\n')");
  });

  test('sizes parse with units and bodies come out near their size, a quarter with a session header', () => {
    assert.equal(parseSize('2k'), 2048);
    assert.equal(parseSize('400KB'), 409600);
    assert.equal(parseSize('1m'), 1048576);
    assert.throws(() => parseSize('12'), /too small/);
    assert.throws(() => parseSize('-3k'), /not a size/);
    assert.equal(sizeLabel(32768), '32k');
    const reqs = benchRequests(32 * 1024, 8);
    for (const r of reqs) {
      assert.ok(Math.abs(r.body.length - 32 * 1024) < 32 * 1024 * 0.03, `size ${r.body.length}`);
      const body = JSON.parse(r.body.toString('utf8')) as { messages: Array<{ role: string }>; user?: string };
      assert.equal(body.messages[0]!.role, 'system');
      assert.equal(body.messages.at(-1)!.role, 'user');
      assert.equal(r.headers.some(([k]) => k === 'x-session-id'), r.keyedBy === 'header');
      assert.equal(body.user !== undefined, r.keyedBy === 'body_user');
    }
    assert.deepEqual(reqs.map((r) => r.keyedBy).slice(0, 4), ['header', 'body_user', 'prefix', 'prefix']);
  });

  test('traces are found by path and replayed per Mooncake file and per agent-session folder', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-traces-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'mooncake'));
    mkdirSync(join(dir, 'agents', 'a'), { recursive: true });
    writeFileSync(join(dir, 'mooncake', 'm.jsonl'), '{"timestamp":0,"input_length":10,"output_length":5,"hash_ids":[1]}\n');
    writeFileSync(join(dir, 'agents', 'a', 's1.jsonl'), '{"timestamp":0,"input":"hi","output":"yo","session_id":"s1"}\n');
    writeFileSync(join(dir, 'agents', 'a', 's2.jsonl'), '{"timestamp":1,"input":"hi","output":"yo","session_id":"s2"}\n');
    writeFileSync(join(dir, 'README.md'), 'not a trace');
    assert.deepEqual(traceReplays(dir).map((t) => t.name), ['agents/a/', 'mooncake/m.jsonl']);
    assert.equal(findTracesDir('/nonexistent-repo', dir), dir);
    assert.equal(findTracesDir('/nonexistent-repo', join(dir, 'missing')), undefined);
  });

  test('simulator verdicts name the baseline that beat kvgate', () => {
    const row = (policy: string, hit: number, p99: number, imbalance: number, bound: number | null): ResultRow =>
      ({ policy, hit_rate: hit, ttft_p99_s: p99, imbalance, bound_fraction: bound }) as ResultRow;
    const v = simVerdicts([row('kvgate', 0.5, 1, 1.1, 0.95), row('round-robin', 0.6, 0.5, 1, 1.2), row('pooled-bound', 0.52, 0, 0, 1)]);
    assert.deepEqual(v, [
      'hit rate ≥ every baseline: **missed** (round-robin 60.00% > 50.00%)',
      'p99 TTFT ≤ every baseline: **missed** (round-robin 500.0 ms < 1.000 s)',
      'imbalance 1.10 ≤ 1.25: met',
      '95.00% of the pooled bound (≥ 90%): met',
    ]);
  });
});
