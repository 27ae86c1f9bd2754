/**
 * The fake worker's test hooks (`POST /control`, and the same fields at start): forced signal
 * values, every way `/metrics` and `/health` can fail, a slow engine, reset, and refusal of bad
 * control bodies.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startFakeWorker, type FakeWorker } from '../../src/fake-worker/server.js';
import { waitFor } from '../helpers/envoy.js';
import { family, parsePrometheus, scrape, value } from './prometheus.js';

const FAST = { decodeMsPerToken: 0, prefillOverheadMs: 0, prefillTokensPerS: 1e9 };

async function control(url: string, body: unknown): Promise<Response> {
  return fetch(`${url}/control`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

async function metricsText(url: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}/metrics`);
  return { status: res.status, text: await res.text() };
}

describe('fake worker test hooks', () => {
  let w: FakeWorker;
  before(async () => {
    w = await startFakeWorker({ ...FAST });
  });
  after(() => w.close());

  test('GET /control shows the hooks; forced KV usage shows on both names until cleared with null', async () => {
    const state = (await (await fetch(`${w.url}/control`)).json()) as Record<string, unknown>;
    assert.equal(state['metrics'], 'ok');
    assert.equal(state['kv_usage'], null);
    const res = await control(w.url, { kv_usage: 0.9 });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { kv_usage: number }).kv_usage, 0.9);
    const forced = await scrape(w.url);
    assert.equal(value(forced, 'vllm:kv_cache_usage_perc'), 0.9);
    assert.equal(value(forced, 'vllm:gpu_cache_usage_perc'), 0.9);
    await control(w.url, { kv_usage: null });
    assert.equal(value(await scrape(w.url), 'vllm:kv_cache_usage_perc'), 0);
  });

  test('forced queue, running count, temperature and GPU memory; DCGM switched on at run time', async () => {
    await control(w.url, { requests_waiting: 40, requests_running: 7, dcgm: true, gpu_temp_c: 91, gpu_memory_used_frac: 0.97 });
    const f = await scrape(w.url);
    assert.equal(value(f, 'vllm:num_requests_waiting'), 40);
    assert.equal(value(f, 'vllm:num_requests_running'), 7);
    assert.equal(value(f, 'DCGM_FI_DEV_GPU_TEMP'), 91);
    const used = value(f, 'DCGM_FI_DEV_FB_USED')!;
    assert.equal(used, Math.round(81_559 * 0.97));
    await control(w.url, { reset: true });
    const back = await scrape(w.url);
    assert.equal(value(back, 'vllm:num_requests_waiting'), 0);
    assert.equal(family(back, 'DCGM_FI_DEV_GPU_TEMP'), undefined, 'reset returns to the state at start');
  });

  test('metric names: current only, legacy only', async () => {
    await control(w.url, { metric_names: 'current' });
    let f = await scrape(w.url);
    assert.ok(family(f, 'vllm:kv_cache_usage_perc'));
    assert.equal(family(f, 'vllm:gpu_cache_usage_perc'), undefined);
    await control(w.url, { metric_names: 'legacy' });
    f = await scrape(w.url);
    assert.equal(family(f, 'vllm:kv_cache_usage_perc'), undefined);
    assert.ok(family(f, 'vllm:gpu_cache_usage_perc'));
    await control(w.url, { reset: true });
  });

  test('metrics error: 500', async () => {
    await control(w.url, { metrics: 'error' });
    assert.equal((await metricsText(w.url)).status, 500);
    await control(w.url, { reset: true });
  });

  test('metrics timeout: no answer; a scraper gives up; the worker still serves', async () => {
    await control(w.url, { metrics: 'timeout' });
    await assert.rejects(fetch(`${w.url}/metrics`, { signal: AbortSignal.timeout(150) }), { name: 'TimeoutError' });
    assert.equal((await fetch(`${w.url}/health`)).status, 200);
    await control(w.url, { reset: true });
    assert.equal((await metricsText(w.url)).status, 200);
  });

  test('metrics delay: a slow exporter still answers', async () => {
    await control(w.url, { metrics_delay_ms: 120 });
    const t = performance.now();
    assert.equal((await metricsText(w.url)).status, 200);
    assert.ok(performance.now() - t >= 115, "performance.now() - t >= 115");
    await control(w.url, { reset: true });
  });

  test('metrics garbage: 200 with text a Prometheus parser rejects', async () => {
    await control(w.url, { metrics: 'garbage' });
    const { status, text } = await metricsText(w.url);
    assert.equal(status, 200);
    assert.throws(() => parsePrometheus(text));
    await control(w.url, { reset: true });
  });

  test('metrics partial: cut off mid-line, so later families are missing', async () => {
    await control(w.url, { metrics: 'partial' });
    const { status, text } = await metricsText(w.url);
    assert.equal(status, 200);
    assert.ok(!text.endsWith('\n'), "!text.endsWith('\\n')");
    const full = (await w.metrics.text()).length;
    assert.ok(text.length < full, "text.length < full");
    await control(w.url, { reset: true });
  });

  test('metrics empty: 200 and no metric at all', async () => {
    await control(w.url, { metrics: 'empty' });
    const { status, text } = await metricsText(w.url);
    assert.equal(status, 200);
    assert.deepEqual(parsePrometheus(text), []);
    await control(w.url, { reset: true });
  });

  test('metrics nan and negative: every gauge bent', async () => {
    await control(w.url, { metrics: 'nan' });
    let f = await scrape(w.url);
    assert.ok(Number.isNaN(value(f, 'vllm:kv_cache_usage_perc')));
    assert.ok(Number.isNaN(value(f, 'vllm:num_requests_waiting')));
    await control(w.url, { metrics: 'negative' });
    f = await scrape(w.url);
    assert.ok(value(f, 'vllm:kv_cache_usage_perc')! < 0);
    assert.ok(value(f, 'vllm:num_requests_running')! < 0);
    await control(w.url, { reset: true });
  });

  test('metrics stale: values frozen when set, stamped with that time, while the worker moves on', async () => {
    await control(w.url, { kv_usage: 0.5 });
    const before = Date.now();
    await control(w.url, { metrics: 'stale' });
    await control(w.url, { kv_usage: 0.99 });
    await (await fetch(`${w.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'z'.repeat(640), max_tokens: 2 }) })).json();
    const f = await scrape(w.url);
    const kv = family(f, 'vllm:kv_cache_usage_perc')!.metrics[0]!;
    assert.equal(Number(kv.value), 0.5, 'the frozen value, not the newly forced one');
    const stamp = Number(kv.timestamp_ms);
    assert.ok(stamp >= before - 1 && stamp <= Date.now(), 'stamped with the time it froze');
    assert.equal(value(f, 'vllm:prefix_cache_queries_total'), 0, 'counters frozen too');
    await control(w.url, { metrics: 'ok' });
    assert.equal(value(await scrape(w.url), 'vllm:kv_cache_usage_perc'), 0.99, 'fresh again');
    await control(w.url, { reset: true });
  });

  test('health error and timeout', async () => {
    await control(w.url, { health: 'error' });
    assert.equal((await fetch(`${w.url}/health`)).status, 503);
    await control(w.url, { health: 'timeout' });
    await assert.rejects(fetch(`${w.url}/health`, { signal: AbortSignal.timeout(150) }), { name: 'TimeoutError' });
    await control(w.url, { reset: true });
    assert.equal((await fetch(`${w.url}/health`)).status, 200);
  });

  test('slow factor stretches time to first token', async () => {
    const slow = await startFakeWorker({ ...FAST, prefillOverheadMs: 20 });
    try {
      await control(slow.url, { slow_factor: 10 });
      const t = performance.now();
      await (await fetch(`${slow.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'q', max_tokens: 1 }) })).json();
      assert.ok(performance.now() - t >= 195, '20 ms × 10');
    } finally {
      await slow.close();
    }
  });

  const bad: Array<[string, unknown, RegExp]> = [
    ['not JSON', '{kv_usage', /JSON object/],
    ['an unknown field', { kv_usage: 0.5, temperature: 3 }, /temperature|unrecognized/i],
    ['a KV usage that is text', { kv_usage: 'high' }, /kv_usage/],
    ['an unknown metrics mode', { metrics: 'sometimes' }, /metrics/],
    ['a negative queue', { requests_waiting: -1 }, /requests_waiting/],
    ['a zero slow factor', { slow_factor: 0 }, /slow_factor/],
    ['an array', [1], /body|expected object/i],
  ];
  for (const [name, body, message] of bad) {
    test(`a control body with ${name}: 400, nothing changed`, async () => {
      const before = await (await fetch(`${w.url}/control`)).text();
      const res = await control(w.url, body);
      assert.equal(res.status, 400);
      assert.match(await res.text(), message);
      assert.equal(await (await fetch(`${w.url}/control`)).text(), before);
    });
  }
});

describe('fake worker hooks at start', () => {
  test('hooks given at start are in force, and reset returns to them', async () => {
    const w = await startFakeWorker({ ...FAST, controls: { kv_usage: 0.95, gpu_temp_c: 88, dcgm: true } });
    try {
      let f = await scrape(w.url);
      assert.equal(value(f, 'vllm:kv_cache_usage_perc'), 0.95);
      assert.equal(value(f, 'DCGM_FI_DEV_GPU_TEMP'), 88);
      await control(w.url, { kv_usage: 0.1 });
      await control(w.url, { reset: true });
      f = await scrape(w.url);
      assert.equal(value(f, 'vllm:kv_cache_usage_perc'), 0.95);
    } finally {
      await w.close();
    }
  });

  test('close() ends held connections', async () => {
    const w = await startFakeWorker({ ...FAST, controls: { metrics: 'timeout' } });
    const held = fetch(`${w.url}/metrics`).then(
      () => 'answered',
      () => 'dropped',
    );
    await waitFor(async () => (await fetch(`${w.url}/health`)).status === 200, 1000, 'the worker serving');
    await w.close();
    assert.equal(await held, 'dropped');
  });
});
