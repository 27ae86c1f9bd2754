/**
 * Per-route knobs end to end: the Envoy harness plays envoy/pools/envoy.yaml (per-route and
 * per-virtual-host ExtProcPerRoute, the set_metadata filter, forwarded metadata_context) against
 * one kvgate running envoy/pools/kvgate.yaml. Two routes of one host get different behaviour
 * from the same gate; the listener's defaults apply where no route sets a knob; bad knobs fall
 * back with a log line.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { GateResult } from '../../src/gate/gate.js';
import type { EnvoyHarness, LocalOutcome, Outcome } from '../harness/envoy-harness.js';
import { harness } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';
import { HeldRequests, LLAMA, LLAMA_CLUSTERS, MISTRAL, MISTRAL_CLUSTERS, chatOn, completionOn, poolsEnvoy, poolsKvgate } from './helpers.js';

const LLAMA_HOST = 'llama.llm.example';
const SHARED_HOST = 'api.llm.example';

function routed(out: Outcome): string {
  assert.equal(out.kind, 'upstream', `routed upstream, got ${JSON.stringify(out.kind === 'local' ? { status: out.status, body: out.body.toString() } : out.kind)}`);
  return out.cluster!;
}

function local(out: Outcome): LocalOutcome {
  assert.equal(out.kind, 'local');
  return out as LocalOutcome;
}

function lastResult(g: TestGate): GateResult {
  const r = g.results.at(-1);
  assert.ok(r, 'the gate decided');
  return r;
}

describe('per-route knobs through envoy/pools/envoy.yaml', () => {
  const gates: TestGate[] = [];
  const harnesses: EnvoyHarness[] = [];
  after(async () => {
    for (const h of harnesses) h.close();
    for (const g of gates) await g.close(100);
  });
  async function setup(config: unknown = poolsKvgate(), logger?: ReturnType<typeof recordingLogger>['logger'], grpcMetadata?: Record<string, string>) {
    const g = await startTestGate(config, logger ? { logger } : {});
    const h = harness(g.target, { config: poolsEnvoy(), ...(grpcMetadata ? { grpcMetadata } : {}) });
    gates.push(g);
    harnesses.push(h);
    return { g, h };
  }

  test('chat and batch routes of one host: sticky on the route’s session header versus least loaded', async () => {
    const { g, h } = await setup();
    // The chat route keeps a conversation on one GPU, by the header its knob names.
    const conv = { 'x-conversation-id': 'conv-A' };
    const home = routed(await h.request(chatOn(LLAMA_HOST, { model: LLAMA, headers: conv })));
    assert.ok(LLAMA_CLUSTERS.has(home), 'the virtual host pins pool llama-70b');
    for (let i = 0; i < 4; i++) assert.equal(routed(await h.request(chatOn(LLAMA_HOST, { model: LLAMA, text: `turn ${i}`, headers: conv }))), home);
    const r = lastResult(g);
    assert.equal(r.kind === 'route' && r.outcome, 'affinity_hit');
    assert.equal(r.kind === 'route' && r.explanation.mode, 'both');
    // The default header means nothing on that route: not a session there.
    await h.request(chatOn(LLAMA_HOST, { model: LLAMA, headers: { 'x-session-id': 'conv-A' } }));
    assert.equal(lastResult(g).key?.kind, 'prefix');

    // Load the conversation's worker by one request, held in flight.
    const held = new HeldRequests(h, g);
    await held.hold([chatOn(LLAMA_HOST, { model: LLAMA, headers: conv })]);
    assert.equal(routed(await h.request(chatOn(LLAMA_HOST, { model: LLAMA, headers: conv }))), home, 'chat stays sticky under load');
    // The batch route ignores sessions: least loaded, so the other GPU, even for a known session.
    const other = [...LLAMA_CLUSTERS].find((c) => c !== home)!;
    for (let i = 0; i < 3; i++) {
      assert.equal(routed(await h.request(completionOn(LLAMA_HOST, { headers: { 'x-session-id': 'conv-A' } }))), other);
      const b = lastResult(g);
      assert.equal(b.kind === 'route' && b.explanation.mode, 'least_loaded');
    }
    for (const o of await held.release()) assert.equal(routed(o), home);
  });

  test('thresholds and shed answers differ per route: chat sheds 429 at 8 per GPU, batch 503 at the pool’s 16', async () => {
    const { g, h } = await setup();
    const held = new HeldRequests(h, g);
    await held.hold(Array.from({ length: 16 }, (_, i) => chatOn(LLAMA_HOST, { model: LLAMA, headers: { 'x-conversation-id': `c${i}` } })));
    assert.ok(g.results.every((r) => r.kind === 'route'), '16 chats fit: 8 on each GPU');

    const chatShed = local(await h.request(chatOn(LLAMA_HOST, { model: LLAMA, headers: { 'x-conversation-id': 'one-too-many' } })));
    assert.equal(chatShed.status, 429);
    assert.equal(chatShed.headers.get('retry-after'), '2');
    assert.equal((JSON.parse(chatShed.body.toString()) as { error: { code: string } }).error.code, 'overloaded');

    // Same GPUs, same moment: the batch route's threshold is the pool's 16, so it still fits.
    assert.ok(LLAMA_CLUSTERS.has(routed(await h.request(completionOn(LLAMA_HOST)))), "LLAMA_CLUSTERS.has(routed(await h.request(completionOn(LLAMA_HOST))))");
    await held.hold(Array.from({ length: 16 }, (_, i) => completionOn(LLAMA_HOST, { prompt: `job ${i}` })));
    const batchShed = local(await h.request(completionOn(LLAMA_HOST)));
    assert.equal(batchShed.status, 503);
    assert.equal(batchShed.headers.get('retry-after'), '30');
    // The rest of the host has only the pool knob: the listener's retry-after (5 s) and the config's 429.
    const otherShed = local(await h.request({ method: 'GET', path: '/v1/models', headers: { host: LLAMA_HOST } }));
    assert.equal(otherShed.status, 429);
    assert.equal(otherShed.headers.get('retry-after'), '5');

    const outcomes = await held.release();
    assert.equal(outcomes.length, 32);
    for (const o of outcomes) assert.ok(LLAMA_CLUSTERS.has(routed(o)), "LLAMA_CLUSTERS.has(routed(o))");
  });

  test('the shared host picks the pool from the model and takes the listener’s defaults', async () => {
    const cfg = poolsKvgate();
    cfg.pools[1]!['max_inflight'] = 1; // mistral-7b: one request per GPU, so it fills in two
    const { g, h } = await setup(cfg);
    const held = new HeldRequests(h, g);
    await held.hold([chatOn(SHARED_HOST, { model: MISTRAL, text: 'a' }), chatOn(SHARED_HOST, { model: MISTRAL, text: 'b' })]);
    const shed = local(await h.request(chatOn(SHARED_HOST, { model: MISTRAL })));
    assert.equal(shed.status, 429, 'config default shed status');
    assert.equal(shed.headers.get('retry-after'), '5', 'the listener-wide retry_after_s from set_metadata');
    // The other pool is untouched by mistral's load.
    assert.ok(LLAMA_CLUSTERS.has(routed(await h.request(chatOn(SHARED_HOST, { model: LLAMA })))));
    for (const o of await held.release()) assert.ok(MISTRAL_CLUSTERS.has(routed(o)), "MISTRAL_CLUSTERS.has(routed(o))");
  });

  test('unknown and invalid knobs are ignored with one log line each; the next layer applies', async () => {
    const { logger, lines } = recordingLogger('info');
    // What a misconfigured Envoy would send: filter-level metadata (kept by the shared host, which
    // overrides nothing) and a dynamic-metadata namespace some earlier filter filled badly.
    const { g, h } = await setup(poolsKvgate(), logger, {
      'x-kvgate-max-inflight': 'lots',
      'x-kvgate-colour': 'blue',
      'x-kvgate-pool': 'gpt-9',
    });
    const bad = { kvgate: { policy: 'fastest', block_chars: 3, retry_after_s: 7 } };
    for (let i = 0; i < 3; i++) {
      const out = await h.request({ ...chatOn(SHARED_HOST, { model: MISTRAL, text: `try ${i}` }), metadata: bad });
      assert.ok(MISTRAL_CLUSTERS.has(routed(out)), 'routed by the model: the unknown pool knob was ignored');
      const r = lastResult(g);
      assert.ok(r.kind === 'route', "r.kind === 'route'");
      assert.equal(r.explanation.mode, 'both', 'the config default policy');
      assert.ok(r.explanation.candidates.every((c) => c.maxInflight === 32), 'the pool’s own limit');
    }
    const warned = lines.filter((l) => l['level'] === 40);
    const about = (key: string) => warned.filter((l) => l['key'] === key || (key === 'pool' && l['knob'] === 'pool'));
    for (const key of ['x-kvgate-max-inflight', 'x-kvgate-colour', 'policy', 'block_chars', 'pool']) {
      assert.equal(about(key).length, 1, `one warning for ${key} over three requests`);
    }
    assert.match(String(about('x-kvgate-colour')[0]!['reason']), /unknown knob/);
    assert.equal(about('x-kvgate-max-inflight')[0]!['value'], 'lots');
    assert.equal(about('x-kvgate-max-inflight')[0]!['knob_layer'], 'route');
    assert.equal(about('policy')[0]!['knob_layer'], 'host');
    assert.match(String(about('pool')[0]!['msg']), /no such pool/);
    // The valid host-layer value in the same namespace still applies (retry_after_s: 7).
    assert.equal(warned.some((l) => l['key'] === 'retry_after_s'), false);
  });
});
