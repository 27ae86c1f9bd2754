/**
 * Sample timestamps: a page whose samples are stamped older than `stale_after_ms` is stale, however
 * freshly it was scraped. The fake worker's `metrics: stale` mode serves exactly that: the values
 * frozen when it was set, each stamped with that time.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { startFakeWorker } from '../../src/fake-worker/server.js';
import { assessHealth, type HealthThresholds } from '../../src/routing/health.js';
import { parseSignals } from '../../src/signals/parse.js';
import { waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { startMetricsServer } from '../helpers/metrics-server.js';

const T: HealthThresholds = { kvPressure: 0.85, memoryPressure: 0.85, maxQueue: 32, maxTempC: 85, staleAfterMs: 2000, failuresDown: 3 };

type Listed = { id: string; state: string; reasons?: string[]; signals?: { sample_age_ms?: number } };
const listed = async (g: TestGate, id: string) => ((await (await fetch(`${g.admin}/workers`)).json()) as { workers: Listed[] }).workers.find((w) => w.id === id);

describe('sample timestamps', () => {
  test('the parse reports the oldest sample timestamp; health adds its age to the scrape’s', () => {
    const text = 'vllm:num_requests_running 1 1700000002000\nvllm:num_requests_waiting 0 1700000001000\nvllm:kv_cache_usage_perc 0.1\n';
    assert.equal(parseSignals(text, 'vllm').oldestSampleMs, 1700000001000);
    assert.equal(parseSignals('vllm:num_requests_running 1\n', 'vllm').oldestSampleMs, undefined);
    // An info metric written once (stamped at the engine's start) does not age the page.
    const info = `vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1 1600000000000\n${text}`;
    assert.equal(parseSignals(info, 'vllm').oldestSampleMs, 1700000001000);
    const rec = (sampleAgeMs?: number) => ({ signals: { kvUsage: 0.1, ...(sampleAgeMs !== undefined ? { sampleAgeMs } : {}) }, ageMs: 100, failures: 0 });
    assert.equal(assessHealth(rec(), T, false).state, 'healthy');
    assert.equal(assessHealth(rec(1800), T, false).state, 'healthy');
    const stale = assessHealth(rec(1950), T, false);
    assert.deepEqual(stale.codes, ['stale']);
    assert.deepEqual(stale.reasons, ['metrics 2050 ms old']);
  });

  test("a fake worker in 'stale' mode is down once its frozen samples are older than stale_after_ms, and back when fresh", async () => {
    const fw = await startFakeWorker({ id: 'frozen', decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 1e9 });
    let g: TestGate | undefined;
    try {
      g = await startTestGate({ signals: { stale_after_ms: 1000 }, workers: [{ id: 'frozen', cluster: 'worker_1', metrics_url: `${fw.url}/metrics` }] });
      const gate = g;
      await waitFor(async () => (await listed(gate, 'frozen'))?.state === 'healthy', 3000, 'healthy');
      const frozenAt = Date.now();
      await fw.control({ metrics: 'stale' });
      // Scraped every 50 ms with 200s all along: only the timestamps say the figures are old. The
      // age is read by the worker's own clock (its Date header, whole seconds): never early, at
      // most a second late.
      await new Promise((r) => setTimeout(r, 500));
      assert.equal((await listed(gate, 'frozen'))?.state, 'healthy', 'samples younger than stale_after_ms are fresh');
      await waitFor(async () => (await listed(gate, 'frozen'))?.state === 'down', 4000, 'down when stale');
      const took = Date.now() - frozenAt;
      assert.ok(took >= 1000, `down ${took} ms after the freeze, not before stale_after_ms`);
      const w = (await listed(gate, 'frozen'))!;
      assert.match(w.reasons?.join(';') ?? '', /metrics \d+ ms old/);
      assert.ok((w.signals?.sample_age_ms ?? 0) >= 900, JSON.stringify(w.signals));
      await fw.control({ metrics: 'ok' });
      await waitFor(async () => (await listed(gate, 'frozen'))?.state === 'healthy', 3000, 'healthy again');
    } finally {
      await g?.close(100);
      await fw.close();
    }
  });

  test('DCGM samples exactly stale_after_ms old (by the exporter’s Date header) are still used', async () => {
    const engine = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
    const dcgm = http.createServer((_req, res) => {
      const dateMs = Math.floor(Date.now() / 1000) * 1000;
      res.writeHead(200, { 'content-type': 'text/plain', date: new Date(dateMs).toUTCString() }).end(`DCGM_FI_DEV_GPU_TEMP{gpu="0"} 95 ${dateMs - 2000}\n`);
    });
    await new Promise<void>((r) => dcgm.listen(0, '127.0.0.1', r));
    let g: TestGate | undefined;
    try {
      g = await startTestGate({ signals: { stale_after_ms: 2000 }, workers: [{ id: 'w', cluster: 'worker_1', metrics_url: engine.url, dcgm_url: `http://127.0.0.1:${(dcgm.address() as AddressInfo).port}/metrics` }] });
      const gate = g;
      await waitFor(async () => (await listed(gate, 'w'))?.state === 'pressured', 3000, 'pressured: a 95 °C reading exactly stale_after_ms old counts');
      assert.match((await listed(gate, 'w'))?.reasons?.join(';') ?? '', /95 °C/);
    } finally {
      await g?.close(100);
      await engine.close();
      dcgm.closeAllConnections();
      await new Promise((r) => dcgm.close(r));
    }
  });

  test('a DCGM page stamped stale leaves out its GPU figures, not the engine’s', async () => {
    const engine = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
    const old = Date.now() - 60_000;
    const dcgm = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(`DCGM_FI_DEV_GPU_TEMP{gpu="0"} 95 ${old}\n`));
    await new Promise<void>((r) => dcgm.listen(0, '127.0.0.1', r));
    let g: TestGate | undefined;
    try {
      g = await startTestGate({ workers: [{ id: 'w', cluster: 'worker_1', metrics_url: engine.url, dcgm_url: `http://127.0.0.1:${(dcgm.address() as AddressInfo).port}/metrics` }] });
      const gate = g;
      await waitFor(async () => (await listed(gate, 'w'))?.state === 'healthy', 3000, 'healthy: a 95 °C reading a minute old is no reading');
      await new Promise((r) => setTimeout(r, 300));
      assert.equal((await listed(gate, 'w'))?.state, 'healthy');
    } finally {
      await g?.close(100);
      await engine.close();
      dcgm.closeAllConnections();
      await new Promise((r) => dcgm.close(r));
    }
  });
});
