/**
 * Past its in-flight limit a worker takes work only while its last scrape says it has the memory
 * for it (src/routing/overflow.ts). A page without a memory figure says nothing about room.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import { parseSignals } from '../../src/signals/parse.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

async function routeTen(page: string, operatorState?: 'pressured'): Promise<string[]> {
  const parsed = parseSignals(page, 'triton', {});
  const config = parseConfig({ limits: { max_inflight: 2 }, workers: [{ id: 'w1', cluster: 'c1', engine: 'triton', metrics_url: 'http://127.0.0.1:9/metrics' }] }, 'test');
  const gate = new Gate(config, new MemoryStore(), silentLogger());
  gate.setSignals(new Map([['w1', { signals: parsed.signals, ageMs: 0, failures: 0 }]]));
  if (operatorState !== undefined) await gate.store.setWorkerState(gate.pool, 'w1', operatorState);
  const out: string[] = [];
  // Held, not released: each one counts against the limit.
  for (let i = 0; i < 10; i++) {
    const r = await gate.route(chatRequest(`question ${i}`));
    out.push(r.kind === 'route' ? r.explanation.rule : `shed:${r.error.code}`);
  }
  return out;
}

test('a Triton page with running and waiting counts but no KV figure: the limit stays hard', async () => {
  const out = await routeTen('nv_trt_llm_request_metrics{request_type="scheduled"} 16\nnv_trt_llm_request_metrics{request_type="waiting"} 0\n');
  assert.deepEqual(out, ['scored', 'scored', ...Array(8).fill('shed:overloaded')]);
});

test('the same page with its KV figure: past the limit the worker keeps taking work, up to the overflow bound', async () => {
  const out = await routeTen(
    'nv_trt_llm_request_metrics{request_type="scheduled"} 16\nnv_trt_llm_request_metrics{request_type="waiting"} 0\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.3\n',
  );
  assert.deepEqual(out, ['scored', 'scored', ...Array(6).fill('overflow'), 'shed:overloaded', 'shed:overloaded']);
});

test('an operator setting the worker pressured while its engine reports room: no overflow past the limit', async () => {
  const out = await routeTen(
    'nv_trt_llm_request_metrics{request_type="scheduled"} 16\nnv_trt_llm_request_metrics{request_type="waiting"} 0\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.3\n',
    'pressured',
  );
  assert.ok(!out.includes('overflow'), out.join(','));
  assert.ok(out.filter((x) => !x.startsWith('shed:')).length <= 2, out.join(','));
  assert.deepEqual(out.slice(2), Array(8).fill('shed:overloaded'));
});
