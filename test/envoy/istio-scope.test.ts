/**
 * The Istio recipe's scope: its EnvoyFilter patches the shared ingress gateway's connection
 * manager, so ext_proc is inserted disabled and turned on for the LLM route alone. Another app
 * behind the same gateway is neither buffered nor sent to kvgate; the LLM route still is. Run on
 * the modelled gateway (test/helpers/deployments.ts) through the harness, which follows Envoy's
 * rules for a filter disabled by default (test/harness/request-run.ts).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseEnvoyBootstrap } from '../harness/envoy-config.js';
import { chat, harness } from '../helpers/envoy.js';
import { ISTIO_WORKERS, istioGateway } from '../helpers/deployments.js';
import { startTestGate } from '../helpers/gate.js';

type Obj = Record<string, unknown>;

/** The gateway as istiod renders it with the recipe applied, plus another app's VirtualService. */
function gatewayWithAnotherApp(): Obj {
  const doc = istioGateway();
  const listeners = ((doc.static_resources as Obj).listeners as Obj[])[0]!;
  const hcm = ((((listeners.filter_chains as Obj[])[0]!.filters as Obj[])[0]!.typed_config) as Obj);
  const vhosts = (hcm.route_config as Obj).virtual_hosts as Obj[];
  vhosts.push({ name: 'shop.example.com:80', domains: ['shop.example.com'], routes: [{ name: 'shop', match: { prefix: '/' }, route: { cluster: 'outbound|8000||vllm.llm.svc.cluster.local' } }] });
  return doc;
}

describe('Istio recipe: ext_proc only on the LLM route', () => {
  test('another app behind the gateway never reaches kvgate; the LLM route does', async () => {
    const g = await startTestGate({ workers: ISTIO_WORKERS });
    const h = harness(g.target, { config: parseEnvoyBootstrap(gatewayWithAnotherApp()), extProcOverride: { messageTimeoutMs: 5000, grpcAuthority: 'kvgate.kvgate.svc.cluster.local' } });
    try {
      const shop = await h.request(chat({ session: 'cart', headers: { host: 'shop.example.com' } }));
      assert.equal(shop.kind, 'upstream');
      assert.equal(g.results.length, 0, 'no decision for the other app');
      const llm = await h.request(chat({ session: 'chat', headers: { host: 'llm.example.com' } }));
      assert.equal(llm.kind, 'upstream');
      assert.equal(g.results.length, 1, 'the LLM route is decided by kvgate');
      assert.ok(ISTIO_WORKERS.some((w) => llm.kind === 'upstream' && llm.cluster === w.cluster), `routed to a worker's cluster (${llm.kind === 'upstream' ? llm.cluster : ''})`);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});
