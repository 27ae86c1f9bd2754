/**
 * Endpoint-picker mode (Gateway API Inference Extension protocol) through the Envoy harness,
 * running envoy/endpoint-picker/envoy.yaml: the destination header and `envoy.lb` dynamic
 * metadata carry the same endpoint; 503 when no endpoint is eligible; 429 when shedding; the
 * subset hint restricts the choice; the served-endpoint report is read and moves affinity.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import type { EnvoyHarness, Outcome } from '../harness/envoy-harness.js';
import { parseConfig } from '../../src/config/load.js';
import { loadEnvoyConfig } from '../harness/envoy-config.js';
import { chat, harness, holdRequest, routedCluster } from '../helpers/envoy.js';
import { setWorkerState, startTestGate, type TestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';
import { scrape } from '../telemetry/prometheus.js';

const EPP_ENVOY = path.resolve(import.meta.dirname, '../../envoy/endpoint-picker/envoy.yaml');
const HEADER = 'x-gateway-destination-endpoint';
const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';
const C = '10.0.0.3:8000';

const config = (maxInflight = 8) => ({
  routing: { protocol: 'endpoint_picker' },
  workers: [
    { id: 'a', address: A, max_inflight: maxInflight },
    { id: 'b', address: B, max_inflight: maxInflight },
    { id: 'c', address: C, max_inflight: maxInflight },
  ],
});

const subset = (...endpoints: string[]) => ({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': endpoints } });
const served = (endpoint: string) => ({ status: 200, metadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': endpoint } } });

function endpointOf(out: Outcome): string | undefined {
  return out.kind === 'upstream' ? out.endpoint : undefined;
}

describe('endpoint-picker mode', () => {
  const open: Array<{ h: EnvoyHarness; g: TestGate }> = [];
  after(async () => {
    for (const { h, g } of open) {
      h.close();
      await g.close(100);
    }
  });
  async function setup(maxInflight?: number, logger?: ReturnType<typeof recordingLogger>['logger']) {
    const g = await startTestGate(config(maxInflight), logger ? { logger } : {});
    const h = harness(g.target, { config: loadEnvoyConfig(EPP_ENVOY) });
    open.push({ h, g });
    return { g, h };
  }

  test('the header and envoy.lb metadata carry the same endpoint; ORIGINAL_DST connects to it', async () => {
    const { h } = await setup();
    const out = await h.request(chat({ session: 'same' }));
    assert.equal(out.kind, 'upstream');
    assert.equal(out.cluster, 'original_destination_cluster');
    const endpoint = endpointOf(out);
    assert.ok(endpoint && [A, B, C].includes(endpoint), `endpoint ${endpoint}`);
    assert.deepEqual(out.requestHeaders.getAll(HEADER), [endpoint], 'one header value, the picked endpoint');
    assert.deepEqual(out.dynamicMetadata['envoy.lb'], { [HEADER]: endpoint }, 'the same value in envoy.lb');
    assert.equal(out.routeCleared, true, 'the route is re-picked on the new header');
    // Affinity holds in this mode too.
    assert.equal(endpointOf(await h.request(chat({ session: 'same' }))), endpoint);
  });

  test('a reload that removes the chosen worker while its decision waits on the store: the request still goes to the decided endpoint', async () => {
    // A slow store round trip: the config file changes and is reloaded while the commit is on its way.
    const { logger, lines } = recordingLogger('info');
    const { g, h } = await setup(undefined, logger);
    const store = g.gate.store as { commit: (...args: unknown[]) => Promise<unknown> };
    const commit = store.commit.bind(store);
    let decided: string | undefined;
    let once = true;
    store.commit = async (...args: unknown[]) => {
      if (once) {
        once = false;
        await new Promise((r) => setTimeout(r, 20));
        // Every worker replaced: whichever the decision picks is gone from the running config.
        g.gate.reconfigure(parseConfig({ routing: { protocol: 'endpoint_picker' }, workers: [{ id: 'd', address: '10.0.0.4:8000' }] }));
      }
      const res = await commit(...args);
      decided = (res as { ok?: boolean; worker?: string }).worker;
      return res;
    };
    const out = await h.request(chat({ session: 'raced' }));
    const result = g.results.at(-1);
    assert.equal(result?.kind, 'route');
    assert.equal(endpointOf(out), result?.kind === 'route' ? result.endpoint : 'none', `sent to the decided worker's address (${decided})`);
    assert.ok(!lines.some((l) => /has no address/.test(String(l['msg']))), 'no fallback without a destination');
  });

  test('a client-sent destination never survives (stripped before routing; kvgate overwrites it)', async () => {
    const { h, g } = await setup();
    const honest = endpointOf(await h.request(chat({ session: 'spoof' })));
    const liar = [A, B, C].find((e) => e !== honest)!;
    const out = await h.request(chat({ session: 'spoof', headers: { [HEADER]: liar } }));
    assert.equal(endpointOf(out), honest);
    // Even without Envoy's early strip in front, kvgate's answer overwrites it, and the
    // ORIGINAL_DST cluster connects to kvgate's metadata, not to the client's header.
    const cfg = loadEnvoyConfig(EPP_ENVOY);
    const bare = harness(g.target, { config: { ...cfg, earlyHeaderMutations: [] } });
    try {
      const raw = await bare.request(chat({ session: 'spoof', headers: { [HEADER]: liar } }));
      assert.deepEqual(raw.requestHeaders.getAll(HEADER), [honest]);
      assert.equal(endpointOf(raw), honest);
    } finally {
      bare.close();
    }
  });

  test('503 when no endpoint is eligible: a subset of unknown endpoints, or of down workers', async () => {
    const { h, g } = await setup();
    const unknown = await h.request({ ...chat({ session: 'x' }), metadata: subset('192.0.2.1:8000') });
    assert.equal(unknown.kind, 'local');
    assert.equal(unknown.kind === 'local' && unknown.status, 503);
    assert.match(unknown.kind === 'local' ? unknown.body.toString() : '', /endpoint subset/);
    assert.equal(unknown.requestHeaders.get(HEADER), undefined);
    await setWorkerState(g.admin, 'b', 'down');
    const down = await h.request({ ...chat({ session: 'y' }), metadata: subset(B) });
    assert.equal(down.kind === 'local' && down.status, 503);
    // Everyone down, no hint: 503 too.
    await setWorkerState(g.admin, 'a', 'down');
    await setWorkerState(g.admin, 'c', 'down');
    const none = await h.request(chat({ session: 'z' }));
    assert.equal(none.kind === 'local' && none.status, 503);
  });

  test('429 with retry-after when every eligible endpoint is full', async () => {
    const { h } = await setup(1);
    for (const s of ['f1', 'f2', 'f3']) await holdRequest(h, s);
    const out = await h.request(chat({ session: 'one-too-many' }));
    assert.equal(out.kind, 'local');
    assert.equal(out.kind === 'local' && out.status, 429);
    assert.equal(out.kind === 'local' && out.headers.get('retry-after'), '1');
    // Full within the subset is a 429 as well, even when endpoints outside it have room.
    const { h: h2 } = await setup(1);
    const held = routedCluster((await holdRequest(h2, 'held')).reply, HEADER);
    assert.ok(held, "held");
    const hinted = await h2.request({ ...chat({ session: 'probe' }), metadata: subset(held) });
    assert.equal(hinted.kind === 'local' && hinted.status, 429);
  });

  test('a subset that excludes the endpoint holding a deeper prefix is still served, not shed', async () => {
    const { h } = await setup();
    const system = 'You are the ACME support assistant. Follow the refund policy below exactly. '.repeat(40);
    // The first request teaches the prefix index that A holds this long system prompt.
    assert.equal(endpointOf(await h.request({ ...chat({ system, text: 'first' }), metadata: subset(A) })), A);
    // B and C hold nothing and are idle: the request must go to one of them, not be shed because
    // the store saw a deeper match on A, which this request may not use.
    for (let i = 0; i < 3; i++) {
      const out = await h.request({ ...chat({ system, text: `next ${i}` }), metadata: subset(B, C) });
      assert.equal(out.kind, 'upstream', out.kind === 'local' ? `${out.status} ${out.body.toString()}` : '');
      assert.ok([B, C].includes(endpointOf(out)!));
    }
  });

  test('the subset hint is honoured: only its endpoints, and an affinity outside it moves into it', async () => {
    const { h, g } = await setup();
    for (let i = 0; i < 6; i++) {
      assert.equal(endpointOf(await h.request({ ...chat({ session: `hinted-${i}` }), metadata: subset(B) })), B);
    }
    // A session living on A, hinted to {B, C}: moves to one of them (a migration).
    const home = endpointOf(await h.request({ ...chat({ session: 'mover' }), metadata: subset(A) }));
    assert.equal(home, A);
    const moved = endpointOf(await h.request({ ...chat({ session: 'mover' }), metadata: subset(B, C) }));
    assert.ok(moved === B || moved === C, `moved to ${moved}`);
    const last = g.results.at(-1)!;
    assert.equal(last.kind === 'route' && last.outcome, 'migrated');
    // The comma-separated form is read too.
    assert.equal(endpointOf(await h.request({ ...chat({ session: 'comma' }), metadata: { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': `${C}, 192.0.2.9:1` } } })), C);
  });

  test('served-endpoint feedback is read: counted, logged, and the key follows the serving worker', async () => {
    const { logger, lines } = recordingLogger('info');
    const { h, g } = await setup(8, logger);
    const chosen = endpointOf(await h.request(chat({ session: 'retry-me' }), served('unused')));
    assert.ok(chosen, "chosen");
    // The proxy retried elsewhere (or fell back): it reports another endpoint as having served.
    const other = [A, B, C].find((e) => e !== chosen)!;
    const first = await h.request(chat({ session: 'retry-me' }), served(other));
    assert.equal(endpointOf(first), chosen, 'kvgate still picked the affine endpoint');
    // Now the KV cache is on `other`: the next request of the session goes there.
    assert.equal(endpointOf(await h.request(chat({ session: 'retry-me' }), served(other))), other);
    const m = await scrape(g.admin);
    assert.equal(m.value('kvgate_served_endpoint_reports_total', { match: 'other' }), 1);
    assert.equal(m.value('kvgate_served_endpoint_reports_total', { match: 'unknown' }), 1, 'the "unused" report');
    assert.equal(m.value('kvgate_served_endpoint_reports_total', { match: 'chosen' }), 1);
    const line = lines.find((l) => l['msg'] === 'request served by another endpoint than chosen');
    assert.ok(line, 'logged');
    assert.equal(line['served'], other);
    assert.equal(line['chosen'], chosen);
    assert.ok(!JSON.stringify(lines).includes('retry-me'), 'the session id only as a hash');
  });
});
