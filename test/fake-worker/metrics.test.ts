/**
 * The fake worker's /metrics, read through a Prometheus text parser as a scraper reads it: vLLM's
 * names, types and labels, values that follow the worker's own load and prefix cache, and the
 * optional DCGM GPU metrics.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { startFakeWorker } from '../../src/fake-worker/server.js';
import { waitFor } from '../helpers/envoy.js';
import { family, scrape, value } from './prometheus.js';

const FAST = { decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 1e9 };

function complete(url: string, prompt: string, maxTokens: number, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt, max_tokens: maxTokens }), ...(signal ? { signal } : {}) });
}

describe('fake worker /metrics', () => {
  test("vLLM's families with their types and labels; no DCGM unless asked", async () => {
    const w = await startFakeWorker({ ...FAST, model: 'm1', kvCapacityTokens: 32_000, blockTokens: 16 });
    try {
      const res = await fetch(`${w.url}/metrics`);
      assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
      const fams = await scrape(w.url);
      const types = Object.fromEntries(fams.map((f) => [f.name, f.type]));
      assert.deepEqual(
        {
          running: types['vllm:num_requests_running'],
          waiting: types['vllm:num_requests_waiting'],
          kv: types['vllm:kv_cache_usage_perc'],
          kvLegacy: types['vllm:gpu_cache_usage_perc'],
          info: types['vllm:cache_config_info'],
          queries: types['vllm:prefix_cache_queries_total'],
          hits: types['vllm:prefix_cache_hits_total'],
          ttft: types['vllm:time_to_first_token_seconds'],
        },
        { running: 'GAUGE', waiting: 'GAUGE', kv: 'GAUGE', kvLegacy: 'GAUGE', info: 'GAUGE', queries: 'COUNTER', hits: 'COUNTER', ttft: 'HISTOGRAM' },
      );
      assert.deepEqual(family(fams, 'vllm:num_requests_running')!.metrics[0]!.labels, { model_name: 'm1', engine: '0' });
      const info = family(fams, 'vllm:cache_config_info')!.metrics[0]!;
      assert.equal(info.labels!['block_size'], '16');
      assert.equal(info.labels!['num_gpu_blocks'], '2000');
      assert.equal(Number(info.value), 1);
      assert.equal(family(fams, 'DCGM_FI_DEV_GPU_TEMP'), undefined);
    } finally {
      await w.close();
    }
  });

  test('running, waiting and KV usage follow the load, and fall back when it ends', async () => {
    // 2,000 tokens of KV; each request pins ~100 prompt + 400 output tokens.
    const w = await startFakeWorker({ ...FAST, decodeMsPerToken: 20, maxBatch: 2, kvCapacityTokens: 2000, dcgm: true });
    const stop = new AbortController();
    try {
      const idle = await scrape(w.url);
      assert.equal(value(idle, 'vllm:num_requests_running'), 0);
      assert.equal(value(idle, 'vllm:kv_cache_usage_perc'), 0);
      assert.equal(value(idle, 'DCGM_FI_DEV_GPU_TEMP'), 35);
      const pending = [0, 1, 2, 3].map((i) => complete(w.url, `${i} `.repeat(200), 400, stop.signal).catch(() => undefined));
      await waitFor(() => w.engine.requestsRunning === 2 && w.engine.requestsWaiting === 2, 3000, 'two running, two waiting');
      const busy = await scrape(w.url);
      assert.equal(value(busy, 'vllm:num_requests_running'), 2);
      assert.equal(value(busy, 'vllm:num_requests_waiting'), 2);
      const kv = value(busy, 'vllm:kv_cache_usage_perc')!;
      assert.ok(kv > 0.4 && kv <= 1, `two requests pin about half the cache (${kv})`);
      assert.equal(value(busy, 'vllm:gpu_cache_usage_perc'), kv, 'the legacy name reports the same value');
      assert.equal(value(busy, 'DCGM_FI_DEV_GPU_TEMP'), 75, 'a full batch runs hot');
      stop.abort();
      await Promise.all(pending);
      await waitFor(() => w.engine.requestsRunning === 0 && w.engine.requestsWaiting === 0, 3000, 'all gone');
      const after = await scrape(w.url);
      assert.equal(value(after, 'vllm:num_requests_running'), 0);
      assert.equal(value(after, 'vllm:num_requests_waiting'), 0);
      assert.equal(value(after, 'vllm:kv_cache_usage_perc'), 0);
    } finally {
      stop.abort();
      await w.close();
    }
  });

  test('prefix cache counters count queried and hit tokens; token counters count prompts and outputs', async () => {
    const w = await startFakeWorker({ ...FAST });
    try {
      const prompt = 'y'.repeat(64 * 10); // 160 tokens, 10 whole blocks
      await (await complete(w.url, prompt, 3)).json();
      const one = await scrape(w.url);
      assert.equal(value(one, 'vllm:prefix_cache_queries_total'), 160);
      assert.equal(value(one, 'vllm:prefix_cache_hits_total'), 0);
      await (await complete(w.url, prompt, 3)).json();
      const two = await scrape(w.url);
      assert.equal(value(two, 'vllm:prefix_cache_queries_total'), 320);
      assert.equal(value(two, 'vllm:prefix_cache_hits_total'), 159, 'the second time all but the last token hit');
      assert.equal(value(two, 'vllm:prompt_tokens_total'), 320);
      assert.equal(value(two, 'vllm:generation_tokens_total'), 6);
      const ttft = family(two, 'vllm:time_to_first_token_seconds')!.metrics[0]!;
      assert.equal(Number(ttft.buckets!['+Inf']), 2, 'two first tokens observed');
    } finally {
      await w.close();
    }
  });

  test('DCGM: framebuffer used + free is the GPU, with vLLM holding its 90% whatever the load', async () => {
    const w = await startFakeWorker({ ...FAST, dcgm: true, gpuMemoryMib: 81_559, id: 'gpu-host' });
    try {
      const fams = await scrape(w.url);
      const used = value(fams, 'DCGM_FI_DEV_FB_USED')!;
      const free = value(fams, 'DCGM_FI_DEV_FB_FREE')!;
      assert.equal(used + free, 81_559);
      assert.equal(used, Math.round(81_559 * 0.9));
      assert.equal(family(fams, 'DCGM_FI_DEV_FB_USED')!.metrics[0]!.labels!['Hostname'], 'gpu-host');
    } finally {
      await w.close();
    }
  });
});
