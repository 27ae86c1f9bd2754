/**
 * The bench's measured window and `minCompleted`: a window that would close with too few requests
 * in it (a short one on a loaded machine, or at a low open-loop rate) stays open until enough
 * completed, so a rate and latencies are measured of real requests.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import { LoadPool } from '../../src/bench/load-pool.js';
import { startNoopServer, type NoopServer } from '../../src/bench/noop-server.js';

describe('bench load window', () => {
  let server: NoopServer;
  let pool: LoadPool;
  before(async () => {
    server = await startNoopServer(1 << 20);
    pool = LoadPool.create(1);
  });
  after(async () => {
    await pool.close();
    await server.close();
  });

  test('a window with fewer completions than minCompleted stays open until it has them', async () => {
    // 4 arrivals a second for 50 ms: the window alone sees the arrival at its start and almost
    // never two more (p ≈ 0.018), as the no-op at half load once saw none on a loaded machine.
    const w = await pool.run({ target: `127.0.0.1:${server.port}`, mode: 'open', concurrency: 8, ratePerS: 4, bodyBytes: 2048, seed: 1, warmupMs: 0, durationMs: 50, minCompleted: 3 });
    assert.ok(w.completed >= 3, `${w.completed} requests completed in the window`);
    assert.equal(w.errors, 0, w.errorSamples.join('; '));
    assert.ok(w.windowS > 0.05, `the window (${w.windowS} s) lasted past its 50 ms`);
    assert.ok(w.added.samples >= 3, 'their latencies are measured too');
  });

  test("the server's event-loop use covers the extended window, not only the planned one", async () => {
    // busy µs/request is serverElu × window / completed: an ELU taken over the planned 50 ms only
    // (the first request's work) but spread over the whole extended window made it several times
    // more than the main thread's whole busy time over the run.
    // A server of its own: its first connection's work (what a cold start costs) lands in the planned
    // 50 ms, the rest of the window is nearly idle.
    const cold = await startNoopServer(1 << 20);
    const e0 = performance.eventLoopUtilization();
    const w = await pool.run({ target: `127.0.0.1:${cold.port}`, mode: 'open', concurrency: 8, ratePerS: 4, bodyBytes: 2048, seed: 2, warmupMs: 0, durationMs: 50, minCompleted: 3 });
    const busyMs = performance.eventLoopUtilization(e0).active;
    await cold.close();
    assert.ok(w.completed >= 3, "w.completed >= 3");
    // The span the server's figures cover is the window, extension included (not the planned 50 ms).
    assert.ok(w.serverWindowS >= w.windowS - 0.05, `server figures over ${w.serverWindowS} s of a ${w.windowS} s window`);
    const reported = (w.serverElu * w.serverWindowS * 1000) / w.completed;
    assert.ok(reported <= busyMs / w.completed + 1, `busy ${reported.toFixed(2)} ms/request reported, ${(busyMs / w.completed).toFixed(2)} spent in all`);
  });

  test('without minCompleted the window closes when told', async () => {
    const w = await pool.run({ target: `127.0.0.1:${server.port}`, mode: 'open', concurrency: 8, ratePerS: 4, bodyBytes: 2048, seed: 1, warmupMs: 0, durationMs: 50 });
    assert.ok(w.windowS < 1, `the window lasted ${w.windowS} s`);
  });
});
