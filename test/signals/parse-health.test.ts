import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { assessHealth, effectiveState, type HealthThresholds } from '../../src/routing/health.js';
import { planMigration } from '../../src/routing/migration.js';
import type { WorkerView } from '../../src/routing/types.js';
import { MAX_REFUSED_LINES, MAX_WANTED_LINES, parseSignals } from '../../src/signals/parse.js';
import { vllmText } from '../helpers/metrics-server.js';

const T: HealthThresholds = { kvPressure: 0.85, memoryPressure: 0.85, maxQueue: 32, maxTempC: 85, staleAfterMs: 2000, failuresDown: 3 };

describe('metrics parsing', () => {
  test('vLLM: running, waiting, KV use and cache config', () => {
    const { signals, problems } = parseSignals(vllmText({ running: 3, waiting: 2, kv: 0.42 }), 'vllm');
    assert.deepEqual(signals, { running: 3, waiting: 2, kvUsage: 0.42, blockSize: 16, numGpuBlocks: 25000 });
    assert.deepEqual(problems, []);
  });

  test('a metric renamed between vLLM versions is found under the old name', () => {
    const old = 'vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.7\n';
    assert.equal(parseSignals(old, 'vllm').signals.kvUsage, 0.7);
  });

  test('SGLang, TensorRT-LLM, Triton and DCGM names', () => {
    assert.deepEqual(parseSignals('sglang:num_running_reqs 4\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n', 'sglang').signals, { running: 4, waiting: 1, kvUsage: 0.5 });
    assert.deepEqual(parseSignals('trtllm_num_requests_running 2\ntrtllm_num_requests_waiting 0\ntrtllm_kv_cache_utilization 0.3\n', 'trtllm').signals, { running: 2, waiting: 0, kvUsage: 0.3 });
    const triton = 'nv_trt_llm_request_metrics{request_type="scheduled"} 5\nnv_trt_llm_request_metrics{request_type="waiting"} 2\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.9\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"} 4000\n';
    assert.deepEqual(parseSignals(triton, 'triton').signals, { running: 5, waiting: 2, kvUsage: 0.9 });
    const dcgm = 'DCGM_FI_DEV_FB_USED{gpu="0"} 70000\nDCGM_FI_DEV_FB_FREE{gpu="0"} 10000\nDCGM_FI_DEV_GPU_TEMP{gpu="0"} 71\n';
    assert.deepEqual(parseSignals(dcgm, 'vllm').signals, { fbUsedMiB: 70000, fbFreeMiB: 10000, gpuTempC: 71 });
  });

  test('several series: counts add up, ratios take the worst', () => {
    const text = 'vllm:num_requests_running{model_name="a"} 2\nvllm:num_requests_running{model_name="b"} 3\nvllm:kv_cache_usage_perc{model_name="a"} 0.2\nvllm:kv_cache_usage_perc{model_name="b"} 0.6\n';
    const s = parseSignals(text, 'vllm').signals;
    assert.equal(s.running, 5);
    assert.equal(s.kvUsage, 0.6);
  });

  test('SGLang priority scheduling: the priority="" total is read, not added to its own breakdown', () => {
    // _log_gauge_queue_count writes the total under priority="" and each priority under priority="<n>".
    const text = [
      'sglang:num_running_reqs{model_name="m",priority=""} 5',
      'sglang:num_running_reqs{model_name="m",priority="0"} 5',
      'sglang:num_queue_reqs{model_name="m",priority=""} 20',
      'sglang:num_queue_reqs{model_name="m",priority="0"} 12',
      'sglang:num_queue_reqs{model_name="m",priority="1"} 8',
      'sglang:token_usage{model_name="m",priority=""} 0.4',
      '',
    ].join('\n');
    assert.deepEqual(parseSignals(text, 'sglang').signals, { running: 5, waiting: 20, kvUsage: 0.4 });
    // Without a total, the priorities are parts: they add up. Per data-parallel group.
    const parts = 'sglang:num_queue_reqs{dp_rank="0",priority="0"} 3\nsglang:num_queue_reqs{dp_rank="0",priority="1"} 4\nsglang:num_queue_reqs{dp_rank="1",priority=""} 6\nsglang:num_queue_reqs{dp_rank="1",priority="2"} 6\n';
    assert.equal(parseSignals(parts, 'sglang').signals.waiting, 13);
  });

  test('SGLang ranks of one data-parallel group count once; data-parallel groups and vLLM engines add up', () => {
    // --enable-metrics-for-all-schedulers: every TP rank reports its group's batch under its own tp_rank.
    const ranks = (name: string, v: number) => [0, 1, 2, 3].map((r) => `${name}{model_name="m",tp_rank="${r}",dp_rank="0",pp_rank="0"} ${v}`);
    const page = [...ranks('sglang:num_running_reqs', 10), ...ranks('sglang:num_queue_reqs', 9)];
    assert.deepEqual(parseSignals(page.join('\n') + '\n', 'sglang').signals, { running: 10, waiting: 9 });
    // Two DP groups of two TP ranks: 10 + 6; a rank lagging its group's copy (7) counts as the larger.
    const dp = ['sglang:num_running_reqs{tp_rank="0",dp_rank="0"} 10', 'sglang:num_running_reqs{tp_rank="1",dp_rank="0"} 7', 'sglang:num_running_reqs{tp_rank="2",dp_rank="1"} 6', 'sglang:num_running_reqs{tp_rank="3",dp_rank="1"} 6'];
    assert.equal(parseSignals(dp.join('\n') + '\n', 'sglang').signals.running, 16);
    const vllm = 'vllm:num_requests_running{engine="0",model_name="m"} 2\nvllm:num_requests_running{engine="1",model_name="m"} 3\n';
    assert.equal(parseSignals(vllm, 'vllm').signals.running, 5);
    // Expert parallelism (--tp 4 --ep 4): each rank also carries its own moe_ep_rank.
    const ep = (name: string, v: number) => [0, 1, 2, 3].map((r) => `${name}{model_name="m",tp_rank="${r}",pp_rank="0",moe_ep_rank="${r}"} ${v}`);
    assert.deepEqual(parseSignals([...ep('sglang:num_running_reqs', 10), ...ep('sglang:num_queue_reqs', 3)].join('\n') + '\n', 'sglang').signals, { running: 10, waiting: 3 });
  });

  test('a page of refused lines costs a bounded number of retries, and a page of too many series is refused whole', () => {
    // Each refused line is retried alone (so one bad line costs only itself); a hostile page of
    // thousands of them would make thousands of exceptions on the thread that answers Envoy.
    const bad = Array.from({ length: 5000 }, (_, i) => `vllm:num_requests_running{engine="${i}" 1`).join('\n');
    const r = parseSignals(`${bad}\nvllm:num_requests_waiting 2\n`, 'vllm');
    assert.equal(r.signals.running, undefined);
    assert.match(r.problems.join(' | '), new RegExp(`gave up after ${MAX_REFUSED_LINES} refused`));
    // More series of the metrics kvgate reads than any engine writes: refused, said, nothing read.
    const many = Array.from({ length: MAX_WANTED_LINES + 1 }, (_, i) => `vllm:num_requests_running{engine="${i}"} 1`).join('\n');
    const m = parseSignals(`${many}\n`, 'vllm');
    assert.deepEqual(m.signals, {});
    assert.match(m.problems.join(' | '), /series/);
  });

  test('a line the strict parser refuses costs only itself: empty HELP text, a TYPE line with an extra word, a bad sample line', () => {
    const page = vllmText({ running: 3, waiting: 2, kv: 0.42 });
    // Python's prometheus_client writes `# HELP <name> ` (trailing space, no text) for a metric documented with "".
    const emptyHelp = `# HELP vllm:some_new_gauge \n# TYPE vllm:some_new_gauge gauge\nvllm:some_new_gauge 1\n${page}`;
    assert.deepEqual(parseSignals(emptyHelp, 'vllm').signals, parseSignals(page, 'vllm').signals);
    assert.equal(parseSignals(emptyHelp, 'vllm').signals.running, 3);
    const extraType = page.replace('# TYPE vllm:num_requests_waiting gauge', '# TYPE vllm:num_requests_waiting gauge extra');
    assert.equal(parseSignals(extraType, 'vllm').signals.waiting, 2);
    const badLine = page.replace('vllm:kv_cache_usage_perc{model_name="m"} 0.42', 'vllm:kv_cache_usage_perc{model_name="m" 0.42');
    const r = parseSignals(badLine, 'vllm');
    assert.deepEqual([r.signals.running, r.signals.waiting, r.signals.kvUsage], [3, 2, undefined]);
    assert.equal(r.problems.length, 1, 'the bad line is reported');
  });

  test('a page without a final newline keeps its last sample', () => {
    const text = 'vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.7';
    assert.equal(parseSignals(text, 'vllm').signals.kvUsage, 0.7);
  });

  test('a metric whose samples come in separate blocks keeps all of them', () => {
    const text = [
      'vllm:num_requests_running{engine="0"} 2',
      'vllm:num_requests_waiting{engine="0"} 1',
      'vllm:num_requests_running{engine="1"} 3',
      'vllm:num_requests_waiting{engine="1"} 4',
      'vllm:kv_cache_usage_perc{engine="0"} 0.9',
      'vllm:num_requests_running{engine="2"} 5',
      'vllm:kv_cache_usage_perc{engine="1"} 0.1',
      '',
    ].join('\n');
    assert.deepEqual(parseSignals(text, 'vllm').signals, { running: 10, waiting: 5, kvUsage: 0.9 });
  });

  test('a bare name or a name without a value is no count of 0', () => {
    for (const text of ['vllm:num_requests_running\n', 'vllm:num_requests_running{ 3\n']) assert.equal(parseSignals(text, 'vllm').signals.running, undefined, text);
  });

  test('one series with an impossible value is refused alone: the other series still count', () => {
    const text = [
      'vllm:num_requests_running{engine="0"} NaN',
      'vllm:num_requests_running{engine="1"} 3',
      'vllm:num_requests_waiting{engine="0"} +Inf',
      'vllm:num_requests_waiting{engine="1"} 2',
      'vllm:kv_cache_usage_perc{engine="0"} 0.5',
      'vllm:kv_cache_usage_perc{engine="1"} -1',
      '',
    ].join('\n');
    const r = parseSignals(text, 'vllm');
    assert.deepEqual(r.signals, { running: 3, waiting: 2, kvUsage: 0.5 });
    assert.equal(r.problems.length, 3, 'each refused series is reported');
    const dcgm = 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} NaN\nDCGM_FI_DEV_GPU_TEMP{gpu="1"} 71\n';
    assert.equal(parseSignals(dcgm, 'vllm').signals.gpuTempC, 71);
  });

  test('the largest of as many series as a page may carry is read without throwing (Math.max over spread arguments would past ~100k); 200k are refused', () => {
    const lines: string[] = [];
    for (let i = 0; i < MAX_WANTED_LINES; i++) lines.push(`vllm:kv_cache_usage_perc{engine="${i}"} ${i === 1234 ? 0.9 : 0.1}`);
    let r: ReturnType<typeof parseSignals> | undefined;
    assert.doesNotThrow(() => (r = parseSignals(lines.join('\n') + '\n', 'vllm')));
    assert.equal(r?.signals.kvUsage, 0.9);
    for (let i = MAX_WANTED_LINES; i < 200_000; i++) lines.push(`vllm:kv_cache_usage_perc{engine="${i}"} 0.1`);
    assert.doesNotThrow(() => (r = parseSignals(lines.join('\n') + '\n', 'vllm')));
    assert.equal(r?.signals.kvUsage, undefined);
  });

  test('DCGM framebuffer: used and free are paired per GPU, and the fullest GPU is read', () => {
    const text = [
      'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 70000',
      'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b"} 10000',
      'DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a"} 10000',
      'DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-b"} 70000',
      '',
    ].join('\n');
    const s = parseSignals(text, 'vllm').signals;
    assert.ok(s.fbUsedMiB !== undefined && s.fbFreeMiB !== undefined, "s.fbUsedMiB !== undefined && s.fbFreeMiB !== undefined");
    assert.ok(s.fbUsedMiB / (s.fbUsedMiB + s.fbFreeMiB) >= 0.875, `${s.fbUsedMiB} used, ${s.fbFreeMiB} free`);
    assert.deepEqual(assessHealth({ signals: s, ageMs: 10, failures: 0 }, T, true).codes, ['memory_pressure']);
  });

  test('garbage, partial, NaN, negative and out-of-range values never throw and are refused', () => {
    for (const text of ['', '\u0000\u0001 {{{ garbage', 'vllm:num_requests_running', 'vllm:num_requests_running{ 3\n', '# only a comment\n']) {
      assert.doesNotThrow(() => parseSignals(text, 'vllm'));
    }
    const bad = parseSignals('vllm:num_requests_running NaN\nvllm:num_requests_waiting -4\nvllm:kv_cache_usage_perc 85\n', 'vllm');
    assert.deepEqual(bad.signals, {});
    assert.equal(bad.problems.length, 3);
  });
});

describe('health from signals', () => {
  const rec = (signals: object, ageMs = 10, failures = 0) => ({ signals, ageMs, failures });

  test('no data, stale data and failing scrapes are down: no worker is healthy on no data', () => {
    assert.equal(assessHealth(undefined, T, false).state, 'down');
    assert.deepEqual(assessHealth(rec({ kvUsage: 0.1 }, Infinity), T, false).codes, ['no_data']);
    assert.deepEqual(assessHealth(rec({ kvUsage: 0.1 }, 2500), T, false).codes, ['stale']);
    assert.deepEqual(assessHealth(rec({ kvUsage: 0.1 }, 10, 3), T, false).codes, ['scrape_failed']);
    assert.equal(assessHealth(rec({ kvUsage: 0.1 }, 10, 2), T, false).state, 'healthy', 'two lost scrapes are not an outage');
  });

  test('KV use at 85%, a long queue or a hot GPU make a worker pressured', () => {
    assert.equal(assessHealth(rec({ kvUsage: 0.84 }), T, false).state, 'healthy');
    assert.deepEqual(assessHealth(rec({ kvUsage: 0.85 }), T, false).codes, ['kv_pressure']);
    assert.deepEqual(assessHealth(rec({ waiting: 33 }), T, false).codes, ['queue']);
    assert.deepEqual(assessHealth(rec({ gpuTempC: 90 }), T, false).codes, ['temperature']);
  });

  test('raw framebuffer use counts only where configured (vLLM preallocates GPU memory)', () => {
    const full = rec({ fbUsedMiB: 76000, fbFreeMiB: 4000, kvUsage: 0.3 });
    assert.equal(assessHealth(full, T, false).state, 'healthy');
    assert.deepEqual(assessHealth(full, T, true).codes, ['memory_pressure']);
  });

  test('each limit itself: queue at max_queue, 85 °C and metrics exactly stale_after old are fine; framebuffer exactly at memory_pressure is not', () => {
    assert.equal(assessHealth(rec({ waiting: 32 }), T, false).state, 'healthy', 'waiting == max_queue is not a long queue');
    assert.equal(assessHealth(rec({ gpuTempC: 85 }), T, false).state, 'healthy', 'exactly max_temp_c is not hot');
    assert.equal(assessHealth(rec({ kvUsage: 0.1 }, 2000), T, false).state, 'healthy', 'ageMs == stale_after_ms is not stale');
    const atLimit = rec({ fbUsedMiB: 85, fbFreeMiB: 15, kvUsage: 0.3 });
    assert.equal(85 / (85 + 15), T.memoryPressure);
    assert.deepEqual(assessHealth(atLimit, T, true).codes, ['memory_pressure'], 'used/total == memory_pressure is pressure');
  });

  test('an operator’s state wins over the signals', () => {
    assert.equal(effectiveState('draining', { state: 'healthy', codes: [], reasons: [] }), 'draining');
    assert.equal(effectiveState(undefined, { state: 'pressured', codes: ['kv_pressure'], reasons: [] }), 'pressured');
    assert.equal(effectiveState('healthy', { state: 'down', codes: ['stale'], reasons: [] }), 'down');
  });
});

describe('migration plan', () => {
  const w = (id: string, inflight: number, state: WorkerView['state'] = 'healthy'): WorkerView => ({ id, state, inflight, maxInflight: 10, prefixBlocks: 0 });
  test('cold sessions spread over the workers that take new work, least loaded first', () => {
    const plan = planMigration(['a', 'b', 'c', 'd'], 'hot', [w('hot', 9, 'pressured'), w('x', 0), w('y', 2), w('z', 0, 'draining')]);
    // x: 0→3 and y: 2→3 in flight-or-assigned: level, and nothing to the pressured or the drained.
    assert.deepEqual(plan.map((p) => p.to), ['x', 'x', 'x', 'y']);
  });
  test('nowhere to go means no moves', () => {
    assert.deepEqual(planMigration(['a'], 'hot', [w('hot', 9, 'pressured'), w('x', 10)]), []);
  });
});
