import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, test } from 'node:test';
import type { MicroRow } from '../../src/bench/micro/suite.js';

const run = promisify(execFile);

describe('micro-benchmarks', () => {
  test('the runner runs in quick mode and reports every group against its baseline', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'scripts/bench-micro.ts', '--quick', '--json'], { maxBuffer: 16 * 1024 * 1024 });
    const report = JSON.parse(stdout) as { rows: MicroRow[] };
    const groups = [...new Set(report.rows.map((r) => r.group))];
    assert.deepEqual(groups, ['keying/2k', 'hashing/2k', 'decide/4 workers', 'decide/16 workers', 'store/16 workers', 'route/2k']);
    for (const g of groups) {
      const rows = report.rows.filter((r) => r.group === g);
      assert.equal(rows.filter((r) => r.baseline).length, 1, `${g} has one baseline`);
      for (const r of rows) {
        assert.ok(r.ns_per_op > 0 && Number.isFinite(r.ratio), `${g} / ${r.task}`);
        if (g.startsWith('keying') || g.startsWith('hashing') || g.startsWith('route')) assert.ok(r.ns_per_kb !== null && r.ns_per_kb > 0, "r.ns_per_kb !== null && r.ns_per_kb > 0");
        if (g.startsWith('decide')) assert.ok(r.ns_per_candidate !== null && r.ns_per_candidate > 0, "r.ns_per_candidate !== null && r.ns_per_candidate > 0");
      }
    }
  });
});
