/**
 * The log buffer is bounded: a stdout nobody reads costs dropped lines, counted, not the process's
 * memory. pino writes asynchronously, and without a bound its buffer held every line written
 * (here 20 MB, the whole run) for a pipe that never drained.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, test } from 'node:test';
import { Metrics } from '../../src/telemetry/metrics.js';
import { ROOT } from '../helpers/kvgate-cli.js';
import { parseExposition } from './prometheus.js';

interface Report {
  lines: number;
  dropped: number;
  held: number;
  heapGrowth: number;
}

/** Runs the child with stdout piped and never read; resolves with its report. */
function stalledChild(boundBytes: number): Promise<Report> {
  const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), path.join(ROOT, 'test/helpers/stalled-stdout-child.ts'), String(boundBytes)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // Never read: the pipe fills (64 KiB on Linux) and the logger's writes stop completing.
  child.stdout.pause();
  return new Promise((resolve, reject) => {
    let err = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => {
      err += d;
      const line = err.split('\n').find((l) => l.startsWith('{'));
      if (line) {
        child.kill('SIGKILL');
        resolve(JSON.parse(line) as Report);
      }
    });
    child.on('exit', (code) => reject(new Error(`child exited (${code}) before reporting: ${err}`)));
    child.on('error', reject);
  });
}

describe('log buffer', () => {
  test('a stdout that is never read: lines past the bound are dropped and counted, the buffer stays within it', async () => {
    const bound = 256 * 1024;
    const r = await stalledChild(bound);
    // 20,000 lines of ~1 KB is ~20 MB: far past the bound and the pipe together.
    assert.ok(r.held <= bound, `held ${r.held} bytes, bound ${bound}`);
    assert.ok(r.held > bound / 2, `the buffer filled (${r.held} bytes): the pipe really stalled`);
    // At most the pipe's 64 KiB and the bound were written or kept; the rest was dropped.
    assert.ok(r.dropped > r.lines * 0.9, `${r.dropped} of ${r.lines} dropped`);
    // Without the bound the heap held the whole 20 MB of text.
    assert.ok(r.heapGrowth < 8 * 1024 * 1024, `heap grew ${r.heapGrowth} bytes`);
  });

  test('kvgate_log_lines_dropped_total shows the logger\'s count at each scrape', async () => {
    let drops = 0;
    const m = new Metrics({ processMetrics: false, logLinesDropped: () => drops });
    assert.equal(parseExposition(await m.registry.metrics()).value('kvgate_log_lines_dropped_total'), 0);
    drops = 42;
    assert.equal(parseExposition(await m.registry.metrics()).value('kvgate_log_lines_dropped_total'), 42);
    drops = 50;
    assert.equal(parseExposition(await m.registry.metrics()).value('kvgate_log_lines_dropped_total'), 50);
  });

  test('a count that cannot be read does not fail the scrape', async () => {
    const m = new Metrics({
      processMetrics: false,
      logLinesDropped: () => {
        throw new Error('boom');
      },
    });
    assert.equal(parseExposition(await m.registry.metrics()).value('kvgate_log_lines_dropped_total'), 0);
  });
});
