/**
 * Worker pools end to end, on the memory store and on a real Redis: a request only ever reaches a
 * worker of the pool that serves its model, whatever its session or prompt did on the other
 * pool; a model nobody serves is a 404; the admin API lists and drains workers per pool.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { EnvoyHarness, LocalOutcome, Outcome } from '../harness/envoy-harness.js';
import { harness } from '../helpers/envoy.js';
import { setWorkerState, startTestGate, type TestGate } from '../helpers/gate.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';
import { LLAMA, LLAMA_CLUSTERS, MISTRAL, MISTRAL_CLUSTERS, chatOn, poolsEnvoy, poolsKvgate } from './helpers.js';

const SHARED_HOST = 'api.llm.example';
const LLAMA_HOST = 'llama.llm.example';
const SYSTEM = 'You are a helpful assistant. '.repeat(40); // ~1.2 KB: several prefix blocks, shared by every request

function cluster(out: Outcome): string {
  assert.equal(out.kind, 'upstream', out.kind === 'local' ? `local ${out.status}: ${out.body.toString()}` : out.kind);
  return out.cluster!;
}

let redis: TestRedis | undefined;
let db = 0;
const backends: Array<{ name: string; store(): Promise<string> }> = [
  { name: 'memory', store: async () => 'memory' },
  {
    name: 'redis',
    store: async () => {
      redis ??= await startRedis();
      return `${redis.url}/${++db}`;
    },
  },
];

for (const backend of backends) {
  describe(`worker pools (${backend.name} store)`, () => {
    const gates: TestGate[] = [];
    const harnesses: EnvoyHarness[] = [];
    after(async () => {
      for (const h of harnesses) h.close();
      for (const g of gates) await g.close(100);
      if (backend.name === 'redis') await redis?.stop();
    });
    async function setup(): Promise<{ g: TestGate; h: EnvoyHarness }> {
      const g = await startTestGate(poolsKvgate(), { store: await backend.store() });
      const h = harness(g.target, { config: poolsEnvoy() });
      gates.push(g);
      harnesses.push(h);
      return { g, h };
    }

    test('requests for one model never reach the other pool’s workers, sessions and prefixes included', async () => {
      const { g, h } = await setup();
      const seen: Record<string, Set<string>> = { [LLAMA]: new Set(), [MISTRAL]: new Set() };
      // Every session is seen first on one model, then on the other, then back; all share a
      // system prompt, so the prefix index knows it on both pools.
      for (let s = 0; s < 12; s++) {
        const first = s % 2 === 0 ? LLAMA : MISTRAL;
        const second = first === LLAMA ? MISTRAL : LLAMA;
        for (const [turn, model] of [first, second, first, second].entries()) {
          const out = await h.request(chatOn(SHARED_HOST, { model, system: SYSTEM, text: `turn ${turn}`, headers: { 'x-session-id': `s${s}` } }));
          const c = cluster(out);
          seen[model]!.add(c);
          assert.ok((model === LLAMA ? LLAMA_CLUSTERS : MISTRAL_CLUSTERS).has(c), `${model} went to ${c}`);
        }
      }
      // Sessionless requests sharing the prompt, too.
      for (let i = 0; i < 8; i++) {
        const model = i % 2 === 0 ? LLAMA : MISTRAL;
        const c = cluster(await h.request(chatOn(SHARED_HOST, { model, system: SYSTEM, text: `q${i}` })));
        assert.ok((model === LLAMA ? LLAMA_CLUSTERS : MISTRAL_CLUSTERS).has(c), "(model === LLAMA ? LLAMA_CLUSTERS : MISTRAL_CLUSTERS).has(c)");
      }
      assert.ok(seen[LLAMA]!.size > 0 && seen[MISTRAL]!.size > 0, "seen[LLAMA]!.size > 0 && seen[MISTRAL]!.size > 0");
      // Each pool keeps its own affinity: a session returning to a model finds the worker it had there.
      for (const r of g.results) assert.equal(r.kind, 'route');
      const repeats = g.results.filter((r) => r.kind === 'route' && r.outcome === 'affinity_hit');
      assert.ok(repeats.length >= 24, `turns 3 and 4 of every session are affinity hits (${repeats.length})`);
    });

    test('a model no pool serves is a 404; a pinned host refuses the other pool’s model; no model goes to the default pool', async () => {
      const { h } = await setup();
      const unknown = (await h.request(chatOn(SHARED_HOST, { model: 'gpt-9' }))) as LocalOutcome;
      assert.equal(unknown.kind, 'local');
      assert.equal(unknown.status, 404);
      const body = JSON.parse(unknown.body.toString()) as { error: { code: string; type: string; message: string } };
      assert.equal(body.error.code, 'model_not_found');
      assert.equal(body.error.type, 'invalid_request_error');
      assert.match(body.error.message, /gpt-9/);

      const pinned = (await h.request(chatOn(LLAMA_HOST, { model: MISTRAL }))) as LocalOutcome;
      assert.equal(pinned.kind, 'local');
      assert.equal(pinned.status, 404);
      assert.match(pinned.body.toString(), /llama-70b/);

      assert.ok(LLAMA_CLUSTERS.has(cluster(await h.request(chatOn(SHARED_HOST, {})))), 'no model: default_pool');
      assert.ok(LLAMA_CLUSTERS.has(cluster(await h.request({ method: 'GET', path: '/v1/models', headers: { host: SHARED_HOST } }))));
    });

    test('the admin API lists workers with their pool and drains within the right pool', async () => {
      const { g, h } = await setup();
      const list = (await (await fetch(`${g.admin}/workers`)).json()) as { workers: Array<{ id: string; pool: string; max_inflight: number }> };
      assert.deepEqual(
        list.workers.map((w) => [w.id, w.pool, w.max_inflight]),
        [['llama_1', 'llama-70b', 16], ['llama_2', 'llama-70b', 16], ['mistral_1', 'mistral-7b', 32], ['mistral_2', 'mistral-7b', 32]],
      );
      await setWorkerState(g.admin, 'mistral_1', 'draining');
      for (let i = 0; i < 4; i++) assert.equal(cluster(await h.request(chatOn(SHARED_HOST, { model: MISTRAL, text: `d${i}` }))), 'mistral_2');
      const llama = new Set<string>();
      for (let i = 0; i < 6; i++) llama.add(cluster(await h.request(chatOn(SHARED_HOST, { model: LLAMA, text: `l${i}` }))));
      assert.ok([...llama].every((c) => LLAMA_CLUSTERS.has(c)), "[...llama].every((c) => LLAMA_CLUSTERS.has(c))");
    });
  });
}
