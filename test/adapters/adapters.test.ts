/**
 * LoRA adapter affinity: vLLM's `vllm:lora_requests_info` parsed into signals, the filter and the
 * scorer in the policy, the pool an adapter belongs to, and the fake worker's metric read back by
 * the real parser.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { startFakeWorker } from '../../src/fake-worker/server.js';
import { Gate } from '../../src/gate/gate.js';
import type { RequestInfo } from '../../src/request/request.js';
import { adapterFit, excludedForAdapter } from '../../src/routing/filters/adapter.js';
import { decide } from '../../src/routing/policy.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';
import type { LoraSignals } from '../../src/routing/health.js';
import { parseSignals } from '../../src/signals/parse.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { decisionInput } from '../helpers/decisions.js';
import { waitFor } from '../helpers/envoy.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

const LORA = 'vllm:lora_requests_info';

describe('vllm:lora_requests_info → signals', () => {
  test('the latest series (by its timestamp value) gives the running and waiting adapters and max_lora', () => {
    const text = [
      `# HELP ${LORA} Running stats on lora requests.`,
      `# TYPE ${LORA} gauge`,
      `${LORA}{max_lora="2",running_lora_adapters="old-one",waiting_lora_adapters=""} 1700000000.5`,
      `${LORA}{max_lora="2",running_lora_adapters="sql-lora, chat-lora",waiting_lora_adapters="legal-lora"} 1700000009.25`,
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running 3',
      '',
    ].join('\n');
    const { signals, problems } = parseSignals(text, 'vllm');
    assert.deepEqual(problems, []);
    assert.deepEqual(signals.lora, { running: ['sql-lora', 'chat-lora'], waiting: ['legal-lora'], maxLora: 2 } satisfies LoraSignals);
    assert.equal(signals.running, 3);
  });

  test('a newest series with no adapter at all is passed over for the newest that lists some (as GIE getLatestLoraMetric)', () => {
    // vLLM keeps adapters loaded after its requests drain, and writes that moment as a new, empty series.
    const text = [
      `${LORA}{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1700000005`,
      `${LORA}{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1700000009`,
      `${LORA}{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 1700000001`,
      '',
    ].join('\n');
    assert.deepEqual(parseSignals(text, 'vllm').signals.lora, { running: ['a'], waiting: [], maxLora: 2 } satisfies LoraSignals);
    const waitingOnly = text.replace('running_lora_adapters="",waiting_lora_adapters=""', 'running_lora_adapters="",waiting_lora_adapters="b"');
    assert.deepEqual(parseSignals(waitingOnly, 'vllm').signals.lora, { running: [], waiting: ['b'], maxLora: 2 } satisfies LoraSignals);
    // Every series empty: the newest, with its max_lora.
    const empty = `${LORA}{max_lora="3",running_lora_adapters="",waiting_lora_adapters=""} 2\n${LORA}{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1\n`;
    assert.deepEqual(parseSignals(empty, 'vllm').signals.lora, { running: [], waiting: [], maxLora: 3 } satisfies LoraSignals);
  });

  test('no metric: no adapters; a broken max_lora is refused with a reason; other engines never read it', () => {
    assert.equal(parseSignals('vllm:num_requests_running 1\n', 'vllm').signals.lora, undefined);
    const bad = parseSignals(`${LORA}{max_lora="many",running_lora_adapters="a",waiting_lora_adapters=""} 1\n`, 'vllm');
    assert.equal(bad.signals.lora, undefined);
    assert.match(bad.problems.join(';'), /max_lora/);
    const nan = parseSignals(`${LORA}{max_lora="1",running_lora_adapters="a",waiting_lora_adapters=""} NaN\n`, 'vllm');
    assert.equal(nan.signals.lora, undefined);
    assert.equal(parseSignals(`${LORA}{max_lora="1",running_lora_adapters="a",waiting_lora_adapters=""} 1\n`, 'sglang').signals.lora, undefined);
    // A flood of names is bounded.
    const many = Array.from({ length: 5000 }, (_, i) => `a${i}`).join(',');
    const flood = parseSignals(`${LORA}{max_lora="4",running_lora_adapters="${many}",waiting_lora_adapters=""} 1\n`, 'vllm');
    assert.equal(flood.signals.lora?.running.length, 256);
  });
});

function w(id: string, inflight: number, adapters?: { names: string[]; max: number }, maxInflight = 8): WorkerView {
  return { id, state: 'healthy', inflight, maxInflight, prefixBlocks: 0, ...(adapters ? { adapters } : {}) };
}

function input(workers: WorkerView[], p: Partial<DecisionInput> = {}): DecisionInput {
  return decisionInput(workers, { session: false, weights: { prefix: 1, load: 1, kv: 0.5, balance: 1, adapter: 0.5 }, balanceFloor: 1, adapter: { name: 'sql-lora' }, ...p });
}

const routedTo = (d: ReturnType<typeof decide>) => (d.kind === 'route' ? d.worker : `shed:${d.reason}`);

describe('adapter filter and scorer in the policy', () => {
  test('has it, then a free slot; a worker whose slots are full of other adapters is never chosen while another can serve', () => {
    const has = w('has', 2, { names: ['sql-lora'], max: 1 });
    const slot = w('slot', 1, { names: ['chat-lora'], max: 2 });
    const full = w('full', 0, { names: ['chat-lora', 'legal-lora'], max: 2 });
    assert.deepEqual([adapterFit(has, 'sql-lora'), adapterFit(slot, 'sql-lora'), adapterFit(full, 'sql-lora'), adapterFit(w('x', 0), 'sql-lora')], ['has', 'slot', 'full', 'unknown']);
    // The idle full worker loses to both; the one with the adapter wins at one request busier.
    assert.equal(routedTo(decide(input([full, slot, has]))), 'has');
    // Without the adapter term, load alone would pick the idle full worker: the filter is what keeps it off.
    assert.equal(routedTo(decide(input([full, slot, has], { adapter: undefined }))), 'full');
    // The adapter's worker busy well past half a limit more: the free slot wins.
    assert.equal(routedTo(decide(input([full, slot, w('has', 7, { names: ['sql-lora'], max: 1 })]))), 'slot');
    // Both full of requests: the full-of-adapters worker serves rather than shed the request.
    assert.equal(routedTo(decide(input([full, w('slot', 8, { names: [], max: 2 }), w('has', 8, { names: ['sql-lora'], max: 1 })]))), 'full');
  });

  test('scoring.adapter_filter: false keeps full workers as candidates; with weight 0 the adapter no longer counts', () => {
    const has = w('has', 2, { names: ['sql-lora'], max: 1 });
    const slot = w('slot', 1, { names: ['chat-lora'], max: 2 });
    const full = w('full', 0, { names: ['chat-lora', 'legal-lora'], max: 2 });
    assert.equal(routedTo(decide(input([full, slot, has], { adapter: { name: 'sql-lora', filter: false } }))), 'has', 'the score term alone');
    assert.equal(routedTo(decide(input([full, slot, has], { adapter: { name: 'sql-lora', filter: false }, weights: { prefix: 1, load: 1, kv: 0.5, balance: 1, adapter: 0 } }))), 'full', 'load alone');
    assert.equal(parseConfig({ workers: [{ id: 'w1', cluster: 'w1' }] }).scoring.adapter_filter, true);
    assert.equal(parseConfig({ workers: [{ id: 'w1', cluster: 'w1' }], scoring: { adapter_filter: false } }).scoring.adapter_filter, false);
  });

  test('a worker that reports no adapters is not excluded; a session on a full worker moves; the explanation says why', () => {
    const full = w('full', 0, { names: ['a', 'b'], max: 2 });
    assert.equal(excludedForAdapter([full, w('quiet', 3)], 'sql-lora', () => true).has('full'), true);
    assert.equal(excludedForAdapter([full, w('other-full', 0, { names: ['c'], max: 1 })], 'sql-lora', () => true).size, 0, 'nothing else fits: nobody excluded');
    const d = decide(input([full, w('quiet', 3)], { session: true, affinity: 'full' }));
    assert.equal(d.kind === 'route' && d.worker, 'quiet');
    assert.equal(d.kind === 'route' && d.outcome, 'migrated');
    assert.deepEqual(d.explanation.candidates.map((c) => c.adapter), ['full', 'unknown']);
    // The prefix bound covers the workers the decision weighed: a deeper match on an excluded one cannot make it stale.
    const p = decide(input([{ ...full, prefixBlocks: 9 }, w('quiet', 3)], { totalBlocks: 10 }));
    assert.deepEqual(p.kind === 'route' && p.preconditions.prefix, { atMost: 0, over: ['quiet'] });
  });
});

describe('adapters through the gate', () => {
  function chat(model: string): RequestInfo {
    const text = 'SELECT the rows that matter from a long schema description. '.repeat(30);
    return chatRequest(text, { model });
  }
  const config = () =>
    parseConfig(
      {
        pools: [
          { name: 'llama', models: ['llama-8b'], adapters: ['sql-lora', 'chat-lora', 'legal-lora'], workers: [1, 2, 3].map((i) => ({ id: `l${i}`, cluster: `llama_${i}`, metrics_url: `http://l${i}.invalid/metrics` })) },
          { name: 'mistral', models: ['mistral-7b'], workers: [{ id: 'm1', cluster: 'mistral_1' }] },
        ],
      },
      'test',
    );

  test("an adapter routes in its base model's pool, to the worker that has it loaded, never to one whose slots are full", async () => {
    const gate = new Gate(config(), new MemoryStore(), silentLogger());
    const lora = (running: string[], max: number) => ({ signals: { running: 0, waiting: 0, kvUsage: 0, lora: { running, waiting: [], maxLora: max } }, ageMs: 0, failures: 0 });
    gate.setSignals(new Map([
      ['l1', lora(['chat-lora'], 1)],
      ['l2', lora(['sql-lora'], 1)],
      ['l3', lora(['legal-lora'], 1)],
    ]));
    for (let i = 0; i < 3; i++) {
      const r = await gate.route(chat('sql-lora'));
      assert.equal(r.kind === 'route' && r.pool, 'llama');
      assert.equal(r.kind === 'route' && r.cluster, 'llama_2');
    }
    // chat-lora's worker is l1; sql-lora's l2 has load 3 now; chat-lora still goes to l1.
    const c = await gate.route(chat('chat-lora'));
    assert.equal(c.kind === 'route' && c.cluster, 'llama_1');
    const legal = await gate.route(chat('legal-lora'));
    assert.equal(legal.kind === 'route' && legal.cluster, 'llama_3');
    // An adapter none has loaded, with every slot taken (max 1 each): served anyway, not shed.
    gate.setSignals(new Map([
      ['l1', lora(['chat-lora'], 1)],
      ['l2', lora(['sql-lora'], 1)],
      ['l3', lora(['legal-lora'], 1)],
    ]));
    const base = await gate.route(chat('llama-8b'));
    assert.equal(base.kind, 'route', 'the base model is no adapter: no adapter rule');
    const none = await gate.route(chat('brand-new-lora'));
    assert.equal(none.kind, 'reject', 'an adapter no pool declares is a model no pool serves (404)');
    assert.equal(none.kind === 'reject' && none.error.code, 'model_not_found');
  });

  test('in a single pool that serves every model, an adapter a worker reports is matched without being declared', async () => {
    const gate = new Gate(parseConfig({ workers: [1, 2].map((i) => ({ id: `w${i}`, cluster: `gpu_${i}`, metrics_url: `http://w${i}.invalid/metrics` })) }), new MemoryStore(), silentLogger());
    const sig = (running: string[]) => ({ signals: { running: 2, waiting: 0, kvUsage: 0, lora: { running, waiting: [], maxLora: 4 } }, ageMs: 0, failures: 0 });
    gate.setSignals(new Map([['w1', sig([])], ['w2', sig(['finance-lora'])]]));
    for (let i = 0; i < 3; i++) {
      const r = await gate.route(chat('finance-lora'));
      assert.equal(r.kind === 'route' && r.cluster, 'gpu_2');
      assert.equal(r.kind === 'route' && r.explanation.candidates.find((c) => c.worker === 'w2')?.adapter, 'has');
    }
  });

  test('the config keeps an adapter in one pool and apart from every model', () => {
    assert.throws(
      () => parseConfig({ pools: [{ name: 'a', models: ['x'], adapters: ['y'], workers: [{ id: 'a1', cluster: 'a1' }] }, { name: 'b', models: ['y'], workers: [{ id: 'b1', cluster: 'b1' }] }] }),
      /adapter "y" is already a model or adapter of pool "b"/,
    );
    assert.throws(() => parseConfig({ adapters: ['y'], pools: [{ name: 'a', workers: [{ id: 'a1', cluster: 'a1' }] }] }), /each pool lists its own `adapters`/);
    const single = parseConfig({ workers: [{ id: 'w1', cluster: 'w1' }], adapters: ['sql-lora'] });
    assert.deepEqual(single.pools[0]!.adapters, ['sql-lora']);
  });
});

describe('the fake worker serves adapters and reports them as vLLM does', () => {
  test('a request naming an adapter shows in running_lora_adapters while it runs, read back by the real parser', async () => {
    const fw = await startFakeWorker({ decodeMsPerToken: 20, prefillOverheadMs: 0, prefillTokensPerS: 1e9, loraModules: ['sql-lora'], maxLoras: 2 });
    const stop = new AbortController();
    try {
      const idle = parseSignals(await (await fetch(`${fw.url}/metrics`)).text(), 'vllm');
      assert.deepEqual(idle.signals.lora, { running: [], waiting: [], maxLora: 2 });
      const pending = fetch(`${fw.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'sql-lora', prompt: 'x '.repeat(50), max_tokens: 200 }), signal: stop.signal }).catch(() => undefined);
      await waitFor(() => fw.engine.requestsRunning === 1, 3000, 'the adapter request running');
      const busy = parseSignals(await (await fetch(`${fw.url}/metrics`)).text(), 'vllm');
      assert.deepEqual(busy.signals.lora, { running: ['sql-lora'], waiting: [], maxLora: 2 });
      stop.abort();
      await pending;
      await waitFor(() => fw.engine.requestsRunning === 0, 3000, 'idle again');
      assert.deepEqual(parseSignals(await (await fetch(`${fw.url}/metrics`)).text(), 'vllm').signals.lora?.running, []);
    } finally {
      stop.abort();
      await fw.close();
    }
  });

  test('without adapters there is no LoRA metric, as vLLM without --enable-lora', async () => {
    const fw = await startFakeWorker({});
    try {
      assert.doesNotMatch(await (await fetch(`${fw.url}/metrics`)).text(), /lora_requests_info/);
    } finally {
      await fw.close();
    }
  });
});
