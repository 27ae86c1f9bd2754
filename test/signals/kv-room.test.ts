/**
 * Past KV pressure a worker takes no new sessions, but a one-off request that fits in the KV its
 * engine reported free still goes there when no worker takes it otherwise, instead of being shed
 * (src/routing/overflow.ts `fitsOneOff`). The capacity comes from vLLM's `cache_config_info`
 * (blocks × block size), parsed from a real page shape; the fit counts the prefill this gate has
 * sent since the scrape; an engine with a queue, a session, or a page without the capacity gets
 * nothing, as before.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import { kvRoomTokens, type HealthVerdict } from '../../src/routing/health.js';
import { parseSignals } from '../../src/signals/parse.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

/** A vLLM page: `free` tokens of a 40,000-token KV cache unused (16-token blocks), `waiting` queued. */
function vllmPage(opts: { kvUsage: number; waiting?: number; capacity?: boolean }): string {
  return [
    'vllm:num_requests_running{model_name="llama"} 5',
    `vllm:num_requests_waiting{model_name="llama"} ${opts.waiting ?? 0}`,
    `vllm:kv_cache_usage_perc{model_name="llama"} ${opts.kvUsage}`,
    ...(opts.capacity === false ? [] : ['vllm:cache_config_info{block_size="16",num_gpu_blocks="2500",cache_dtype="auto"} 1']),
    '',
  ].join('\n');
}

async function gateOn(page: string, workers = 1, scoring: Record<string, number> = {}): Promise<Gate> {
  const ids = Array.from({ length: workers }, (_, i) => `w${i + 1}`);
  const config = parseConfig({ workers: ids.map((id) => ({ id, cluster: `c_${id}`, metrics_url: `http://127.0.0.1:9/${id}` })), scoring }, 'test');
  const gate = new Gate(config, new MemoryStore(), silentLogger());
  const signals = parseSignals(page, 'vllm', {}).signals;
  gate.setSignals(new Map(ids.map((id) => [id, { signals, ageMs: 0, failures: 0 }])));
  return gate;
}

/** A prompt of about `chars` characters whose leading block differs for each `i` (no worker holds it). */
function prompt(i: number, chars: number): string {
  const head = `request ${i}: ${'unique '.repeat(40)}${i} `;
  return head + 'the same filler text repeated for length. '.repeat(Math.ceil(Math.max(0, chars - head.length) / 43));
}

async function outcome(gate: Gate, text: string, session?: string): Promise<string> {
  const r = await gate.route(chatRequest(text, session === undefined ? {} : { session }));
  return r.kind === 'route' ? `${r.worker}:${r.explanation.rule}` : `shed:${r.error.code}`;
}

describe('a one-off request and a worker past KV pressure', () => {
  test('KV 90% used of 40,000 tokens, no queue: a short one-off runs there; one larger than half the free KV is shed', async () => {
    const gate = await gateOn(vllmPage({ kvUsage: 0.9 }));
    assert.equal(gate.views(gate.store.cachedSnapshot({ pool: gate.pool, key: undefined, workers: ['w1'], blocks: [] }))[0]!.kvRoomTokens, 4000);
    // 1,500 characters: about 400 tokens at 4 characters a token (whole blocks), 1,200 with the margin.
    assert.equal(await outcome(gate, prompt(1, 1500)), 'w1:overflow');
    // /debug/decisions says why: the free KV it fitted in.
    assert.equal(gate.decisions.recent(1)[0]!.explanation.candidates[0]!.kvRoomTokens, 4000);
    // 9,000 characters: about 2,300 tokens, 6,900 with the margin: more than the 4,000 free.
    assert.equal(await outcome(gate, prompt(2, 9000)), 'shed:overloaded');
  });

  test('the same short one-off with a session: no new session on a pressured worker, shed as before', async () => {
    const gate = await gateOn(vllmPage({ kvUsage: 0.9 }));
    assert.equal(await outcome(gate, prompt(3, 1500), 'sess-1'), 'shed:overloaded');
  });

  test('an engine that reports a queue is waiting for memory: nothing more goes there', async () => {
    const gate = await gateOn(vllmPage({ kvUsage: 0.9, waiting: 1 }));
    assert.equal(await outcome(gate, prompt(4, 1500)), 'shed:overloaded');
  });

  test('a page without the cache capacity: free KV is unknown, shed as before', async () => {
    const gate = await gateOn(vllmPage({ kvUsage: 0.9, capacity: false }));
    assert.equal(await outcome(gate, prompt(5, 1500)), 'shed:overloaded');
  });

  for (const backlogWeight of [DEFAULTS.backlogWeight, 0]) {
    test(`what this gate sent since the scrape counts against the free KV: the worker fills, then sheds (backlog_weight ${backlogWeight})`, async () => {
      // At backlog weight 0 the backlog term reads nothing, but the fit still must.
      const gate = await gateOn(vllmPage({ kvUsage: 0.9 }), 1, { backlog_weight: backlogWeight });
      const out: string[] = [];
      // Leases held (no first token yet): each one's prefill is still owed on the worker.
      for (let i = 0; i < 20; i++) out.push(await outcome(gate, prompt(100 + i, 1500)));
      const routed = out.filter((o) => o === 'w1:overflow').length;
      // About 400 tokens each (whole blocks of 64) against 4,000 free, with room for three times
      // the prompt: about eight fit, not twenty.
      assert.ok(routed >= 8 && routed <= 12, out.join(','));
      assert.deepEqual(out.slice(routed), Array(20 - routed).fill('shed:overloaded'));
    });
  }

  test('below pressure nothing changes: a healthy worker takes it by score', async () => {
    const gate = await gateOn(vllmPage({ kvUsage: 0.5 }));
    assert.equal(await outcome(gate, prompt(6, 1500)), 'w1:scored');
  });
});

describe('kvRoomTokens', () => {
  const pressured = (codes: HealthVerdict['codes']): HealthVerdict => ({ state: 'pressured', codes, reasons: [] });
  const page = { kvUsage: 0.9, blockSize: 16, numGpuBlocks: 2500 };

  test('free tokens for a worker pressured by KV alone', () => {
    assert.equal(kvRoomTokens(pressured(['kv_pressure']), page), 4000);
  });

  test('undefined when anything else presses it, when it is not pressured, or when a figure is missing', () => {
    assert.equal(kvRoomTokens(pressured(['kv_pressure', 'temperature']), page), undefined);
    assert.equal(kvRoomTokens(pressured(['memory_pressure']), page), undefined);
    assert.equal(kvRoomTokens(pressured(['kv_pressure', 'queue']), page), undefined);
    assert.equal(kvRoomTokens({ state: 'healthy', codes: [], reasons: [] }, page), undefined);
    assert.equal(kvRoomTokens(pressured(['kv_pressure']), { kvUsage: 0.9, blockSize: 16 }), undefined);
    assert.equal(kvRoomTokens(pressured(['kv_pressure']), { blockSize: 16, numGpuBlocks: 2500 }), undefined);
  });

  test('the defaults the fit uses are the documented ones', () => {
    assert.equal(DEFAULTS.charsPerToken, 4);
    assert.equal(DEFAULTS.oneOffKvMargin, 3);
  });
});
