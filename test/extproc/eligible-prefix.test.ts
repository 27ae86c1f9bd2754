/**
 * The prefix path with a changing set of candidate workers, end to end (Envoy harness → gRPC →
 * kvgate), in both protocols, in a non-default pool, across reloads, on both stores.
 *
 * The policy weighs only the workers a request may go to (the endpoint subset hint, the running
 * config); the store's commit check must weigh the same ones. When they disagreed, a prompt whose
 * deepest match sat on a worker outside the set failed every commit and was shed as overloaded.
 * The prompts here are thousands of words: many 256-character blocks, so the prefix index is used.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse } from 'yaml';
import { parseConfig } from '../../src/config/load.js';
import type { GateResult } from '../../src/gate/gate.js';
import { loadEnvoyConfig } from '../harness/envoy-config.js';
import type { EnvoyHarness, Outcome } from '../harness/envoy-harness.js';
import { chat, harness } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';
import { MISTRAL, chatOn, poolsEnvoy, poolsKvgate } from '../knobs/helpers.js';

const EPP_ENVOY = path.resolve(import.meta.dirname, '../../envoy/endpoint-picker/envoy.yaml');
const EPP_KVGATE = path.resolve(import.meta.dirname, '../../envoy/endpoint-picker/kvgate.yaml');
const W1 = '127.0.0.1:8001';
const W2 = '127.0.0.1:8002';
const W3 = '127.0.0.1:8003';

/** A few thousand words: ~70 prefix blocks of 256 characters. */
function longPrompt(seed: string): string {
  const words: string[] = [];
  for (let i = 0; i < 3000; i++) words.push(`${seed}${(i * 7919) % 1000}`);
  return words.join(' ');
}

const subset = (...endpoints: string[]) => ({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': endpoints } });

function routed(out: Outcome): string {
  assert.equal(out.kind, 'upstream', out.kind === 'local' ? `answered ${out.status} at once: ${out.body.toString()}` : out.kind);
  return out.kind === 'upstream' ? (out.endpoint ?? out.cluster!) : '';
}

function lastRoute(g: TestGate): Extract<GateResult, { kind: 'route' }> {
  const r = g.results.at(-1);
  assert.ok(r && r.kind === 'route', `last result: ${r?.kind}`);
  return r;
}

/** The routed worker's prefix match as its decision saw it. */
function matchedBlocks(r: Extract<GateResult, { kind: 'route' }>): number {
  return r.explanation.candidates.find((c) => c.worker === r.worker)?.prefixBlocks ?? 0;
}

let redis: TestRedis;
let db = 0;
before(async () => {
  redis = await startRedis();
});
after(async () => redis.stop());

for (const backend of ['memory', 'redis'] as const) {
  describe(`the prefix path over a changing eligible set (${backend} store)`, () => {
    const open: Array<{ h: EnvoyHarness; g: TestGate }> = [];
    after(async () => {
      for (const { h, g } of open) {
        h.close();
        await g.close(100);
      }
    });
    const store = () => (backend === 'memory' ? 'memory' : `${redis.url}/${++db}`);

    async function eppGate() {
      const g = await startTestGate(parse(readFileSync(EPP_KVGATE, 'utf8')), { store: store() });
      const h = harness(g.target, { config: loadEnvoyConfig(EPP_ENVOY) });
      open.push({ h, g });
      return { g, h };
    }

    for (const session of [undefined, 'conversation']) {
      test(`endpoint picker: a long prompt hinted to ${W1}, then to {${W2}, ${W3}}, is routed, not shed (${session ? 'session' : 'no session'})`, async () => {
        const { g, h } = await eppGate();
        const req = chat({ text: longPrompt('alpha'), ...(session ? { session } : {}) });
        assert.equal(routed(await h.request({ ...req, metadata: subset(W1) })), W1);
        assert.ok(JSON.parse(req.body).messages[0].content.length > 60 * 256, 'the prompt spans many blocks');
        const second = routed(await h.request({ ...req, metadata: subset(W2, W3) }));
        assert.ok(second === W2 || second === W3, `routed to ${second}`);
        assert.equal(lastRoute(g).attempts, 1, 'one commit: the store checked what the policy weighed');
        // The holder outside the hint did not vanish: hinted back to it, the prompt matches there.
        assert.equal(routed(await h.request({ ...req, metadata: subset(W1) })), W1);
        assert.ok(matchedBlocks(lastRoute(g)) >= 60, `matched ${matchedBlocks(lastRoute(g))} blocks on ${W1}`);
      });
    }

    test('endpoint picker: after a reload removes the worker holding a long prompt, the prompt is routed', async () => {
      const { g, h } = await eppGate();
      const req = chat({ text: longPrompt('beta') });
      const first = routed(await h.request({ ...req, metadata: subset(W2) }));
      assert.equal(first, W2);
      const raw = parse(readFileSync(EPP_KVGATE, 'utf8')) as { workers: Array<{ address: string }> };
      g.gate.reconfigure(parseConfig({ ...raw, workers: raw.workers.filter((w) => w.address !== W2) }));
      const second = routed(await h.request(req));
      assert.ok(second === W1 || second === W3, `routed to ${second}`);
      assert.equal(lastRoute(g).attempts, 1);
    });

    test('cluster header, second pool: after a reload removes the worker holding a long prompt, the prompt is routed', async () => {
      const raw = poolsKvgate();
      const g = await startTestGate(raw, { store: store() });
      const h = harness(g.target, { config: poolsEnvoy() });
      open.push({ h, g });
      const req = chatOn('api.llm.example', { model: MISTRAL, system: longPrompt('gamma'), text: 'first question' });
      const holder = routed(await h.request(req));
      assert.ok(holder === 'mistral_1' || holder === 'mistral_2', holder);
      // The same system prompt again matches its holder: the prefix path is taken.
      routed(await h.request(chatOn('api.llm.example', { model: MISTRAL, system: longPrompt('gamma'), text: 'second question' })));
      assert.equal(lastRoute(g).worker, holder);
      assert.ok(matchedBlocks(lastRoute(g)) >= 60, `matched ${matchedBlocks(lastRoute(g))} blocks`);
      const pools = raw.pools.map((p) =>
        p['name'] === 'mistral-7b'
          ? // A new worker takes over the removed holder's Envoy cluster (one worker per cluster).
            { ...p, workers: (p['workers'] as Array<{ id: string }>).filter((w) => w.id !== holder).concat([{ id: 'mistral_3', cluster: holder } as { id: string }]) }
          : p,
      );
      g.gate.reconfigure(parseConfig({ ...raw, pools }));
      const after = routed(await h.request(chatOn('api.llm.example', { model: MISTRAL, system: longPrompt('gamma'), text: 'third question' })));
      assert.notEqual(lastRoute(g).worker, holder);
      assert.ok(after.startsWith('mistral_'), after);
      assert.equal(lastRoute(g).attempts, 1);
    });

    test('cluster header: a long prompt whose holder is drained is routed to another worker at once', async () => {
      const g = await startTestGate({ workers: ['worker_1', 'worker_2', 'worker_3'].map((id) => ({ id, cluster: id })) }, { store: store() });
      const h = harness(g.target);
      open.push({ h, g });
      const req = chat({ text: longPrompt('delta') });
      const holder = routed(await h.request(req));
      await g.gate.store.setWorkerState(g.gate.pool, holder, 'draining');
      const moved = routed(await h.request(req));
      assert.notEqual(moved, holder);
      assert.ok(lastRoute(g).attempts <= 2, `attempts ${lastRoute(g).attempts}`);
    });
  });
}
