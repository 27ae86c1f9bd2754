/**
 * Product text (code, docs, configs, scripts) names no path of a development machine and no
 * internal tracking number: readers outside the team cannot follow either. Upstream projects'
 * issues are cited by their own names (e.g. "GIE issue #692"), which this does not match.
 * Nor does it cite the team's internal reference notes, which do not ship: a figure names the
 * public source it came from (a paper, a project's doc or source file) or says what it is.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

const ROOT = path.resolve(import.meta.dirname, '../..');
const ROOTS = ['src', 'docs', 'envoy', 'scripts', 'proto', 'test', 'README.md', 'Dockerfile', '.ci'];
/** This file names the patterns it looks for. */
const SELF = path.relative(ROOT, import.meta.filename);
const FORBIDDEN: Array<[RegExp, string]> = [
  [/\/work\//, 'a development machine path'],
  [/\bissue \d/i, 'an internal tracking number'],
  [/shared\/reference/, 'an internal reference note'],
  [/routing-landscape/, 'an internal reference note'],
  [/gateways\.md/, 'an internal reference note'],
  [/stateful-llm-load-balancing/, 'an internal reference note'],
];

function files(p: string): string[] {
  const abs = path.join(ROOT, p);
  if (!existsSync(abs)) return [];
  if (statSync(abs).isFile()) return [p];
  return readdirSync(abs).flatMap((e) => files(path.join(p, e)));
}

test('no product file names a development machine path, an internal tracking number or an internal reference note', () => {
  const found: string[] = [];
  const all = ROOTS.flatMap(files).filter((f) => f !== SELF && !f.endsWith('.json') && !f.endsWith('.binpb'));
  assert.ok(all.length > 50, `scanned ${all.length} files`);
  for (const f of all) {
    const lines = readFileSync(path.join(ROOT, f), 'utf8').split('\n');
    lines.forEach((line, i) => {
      for (const [re, what] of FORBIDDEN) if (re.test(line)) found.push(`${f}:${i + 1}: ${what}: ${line.trim()}`);
    });
  }
  assert.deepEqual(found, []);
});
