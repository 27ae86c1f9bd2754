/**
 * A client never chooses its worker, even when kvgate does not answer as it should. Each shipped
 * Envoy config (the four bootstraps, and the Istio and Envoy Gateway recipes applied to the
 * gateway they patch) gets a request carrying a spoofed routing header that names a real worker
 * (x-kvgate-cluster for cluster_header, x-gateway-destination-endpoint for the endpoint picker),
 * while the real kvgate behind it is:
 *  - down (nothing listens; ext_proc fails open),
 *  - slow (every reply held past message_timeout; fail-open),
 *  - slow after its first reply (the request-headers reply arrives, the body reply does not),
 *  - answering a fallback: a bare CONTINUE to every message,
 *  - answering without clear_route_cache (its mutations applied, the route never re-picked).
 * The request must reach the config's fallback (never the named worker, and never an
 * ORIGINAL_DST host the client chose), and the client's header must not reach the upstream.
 *
 * Envoy picks the route before any HTTP filter (HCM decodeHeaders), so this holds only because
 * each config strips the header with an HCM early header mutation, and the picker's ORIGINAL_DST
 * cluster takes its host from kvgate's envoy.lb metadata. The controls run the same requests
 * against each config as it was before that (the header removed by an HTTP filter after routing,
 * ORIGINAL_DST reading the header) and must see the spoof win: the proof that these tests can fail.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DESTINATION_HEADER } from '../../src/extproc/endpoint-picker.js';
import type { ProcessingResponse } from '../../src/extproc/messages.js';
import { EnvoyHarness, type HarnessRequest, type Outcome } from '../harness/envoy-harness.js';
import { loadEnvoyConfig, parseEnvoyBootstrap, type ParsedEnvoyConfig } from '../harness/envoy-config.js';
import { chat } from '../helpers/envoy.js';
import { EG_ROUTE_CLUSTER, ISTIO_WORKERS, envoyGateway, istioGateway } from '../helpers/deployments.js';
import { startExtProcProxy, type ExtProcProxy, type ReplyPolicy } from '../helpers/ext-proc-proxy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { refusedPort, type RefusedPort } from '../helpers/refused-port.js';

const ENVOY_DIR = path.resolve(import.meta.dirname, '../../envoy');
const PICKER_WORKERS = [
  { id: 'worker_1', address: '127.0.0.1:8001' },
  { id: 'worker_2', address: '127.0.0.1:8002' },
  { id: 'worker_3', address: '127.0.0.1:8003' },
];

interface Shipped {
  name: string;
  envoy: () => ParsedEnvoyConfig;
  /** The kvgate config it is shipped with (raw, as parseConfig takes it). */
  kvgate: () => unknown;
  header: string;
  /** A real worker: its cluster (cluster_header) or its ip:port (endpoint picker). */
  spoof: string;
  request: (headers: Record<string, string>) => HarnessRequest;
  /** Where a request goes when kvgate's answer is not applied. */
  fallback: (out: Outcome) => boolean;
  /** The config before client copies were stripped ahead of routing (see beforeEarlyStrip). */
  old: (c: ParsedEnvoyConfig) => ParsedEnvoyConfig;
  /** In the old config the spoof reached its worker (else the fallback was lost: a 503). */
  oldSpoofWins: boolean;
  /**
   * The ext_proc call's :authority, where the cluster name is one grpc-js will not send
   * (Istio's outbound|port||host); Envoy sends the cluster name.
   */
  grpcAuthority?: string;
}

const upstreamTo = (cluster: string) => (out: Outcome): boolean => out.kind === 'upstream' && out.cluster === cluster && out.endpoint === undefined;

/** Many prefix blocks, so a healthy gate would key and route this request for real. */
const LONG = 'You are a careful assistant for the platform team. '.repeat(40);

const SHIPPED: Shipped[] = [
  {
    name: 'envoy/envoy.yaml',
    envoy: () => loadEnvoyConfig(path.join(ENVOY_DIR, 'envoy.yaml')),
    kvgate: () => ({ workers: [{ id: 'worker_1', cluster: 'worker_1' }, { id: 'worker_2', cluster: 'worker_2' }, { id: 'worker_3', cluster: 'worker_3' }] }),
    header: 'x-kvgate-cluster',
    spoof: 'worker_2',
    request: (headers) => chat({ session: 's1', system: LONG, headers }),
    fallback: upstreamTo('kvgate_fallback'),
    old: (c) => stripAfterRouting(c, 'x-kvgate-cluster'),
    oldSpoofWins: true,
  },
  {
    name: 'envoy/pools/envoy.yaml',
    envoy: () => loadEnvoyConfig(path.join(ENVOY_DIR, 'pools', 'envoy.yaml')),
    kvgate: () => ({ routing: { header: 'x-kvgate-cluster' }, pools: [
      { name: 'llama-70b', models: ['meta-llama/Llama-3.1-70B-Instruct'], workers: [{ id: 'llama_1', cluster: 'llama_1' }, { id: 'llama_2', cluster: 'llama_2' }] },
      { name: 'mistral-7b', models: ['mistralai/Mistral-7B-Instruct-v0.3'], workers: [{ id: 'mistral_1', cluster: 'mistral_1' }, { id: 'mistral_2', cluster: 'mistral_2' }] },
    ] }),
    header: 'x-kvgate-cluster',
    spoof: 'llama_2',
    request: (headers) => chat({ session: 's1', system: LONG, model: 'meta-llama/Llama-3.1-70B-Instruct', headers: { host: 'llama.llm.example', ...headers } }),
    fallback: upstreamTo('llama_fallback'),
    old: (c) => stripAfterRouting(c, 'x-kvgate-cluster'),
    oldSpoofWins: true,
  },
  {
    name: 'envoy/demo/envoy.yaml',
    envoy: () => loadEnvoyConfig(path.join(ENVOY_DIR, 'demo', 'envoy.yaml')),
    kvgate: () => ({ workers: [{ id: 'worker_1', cluster: 'worker_1' }, { id: 'worker_2', cluster: 'worker_2' }, { id: 'worker_3', cluster: 'worker_3' }] }),
    header: 'x-kvgate-cluster',
    spoof: 'worker_3',
    request: (headers) => chat({ session: 's1', system: LONG, headers }),
    fallback: upstreamTo('kvgate_fallback'),
    old: (c) => stripAfterRouting(c, 'x-kvgate-cluster'),
    oldSpoofWins: true,
  },
  {
    name: 'envoy/endpoint-picker/envoy.yaml',
    envoy: () => loadEnvoyConfig(path.join(ENVOY_DIR, 'endpoint-picker', 'envoy.yaml')),
    kvgate: () => ({ routing: { protocol: 'endpoint_picker' }, workers: PICKER_WORKERS }),
    header: DESTINATION_HEADER,
    spoof: '127.0.0.1:8002',
    request: (headers) => chat({ session: 's1', system: LONG, headers }),
    fallback: upstreamTo('kvgate_fallback'),
    // The HTTP filter removed the header after the ORIGINAL_DST route was picked on it, and the
    // cluster then read the (removed) header: no host, a 503 instead of the fallback.
    old: (c) => originalDstFromHeader(stripAfterRouting(c, DESTINATION_HEADER), DESTINATION_HEADER),
    oldSpoofWins: false,
  },
  {
    name: 'envoy/istio (EnvoyFilter applied to the ingress gateway)',
    envoy: () => parseEnvoyBootstrap(istioGateway()),
    kvgate: () => ({ workers: ISTIO_WORKERS }),
    header: 'x-kvgate-cluster',
    spoof: ISTIO_WORKERS[1]!.cluster,
    request: (headers) => chat({ session: 's1', system: LONG, headers: { host: 'llm.example.com', ...headers } }),
    fallback: upstreamTo('outbound|8000||vllm.llm.svc.cluster.local'),
    old: (c) => stripAfterRouting(c, 'x-kvgate-cluster'),
    oldSpoofWins: true,
    grpcAuthority: 'kvgate.kvgate.svc.cluster.local',
  },
  {
    name: 'envoy/envoy-gateway (policies applied to the gateway)',
    envoy: () => parseEnvoyBootstrap(envoyGateway(PICKER_WORKERS.map((w) => w.address))),
    kvgate: () => ({ routing: { protocol: 'endpoint_picker' }, workers: PICKER_WORKERS }),
    header: DESTINATION_HEADER,
    spoof: '127.0.0.1:8002',
    request: (headers) => chat({ session: 's1', system: LONG, headers }),
    fallback: upstreamTo(EG_ROUTE_CLUSTER),
    // The old recipe stripped nothing, pointed the HTTPRoute's own route at ORIGINAL_DST and let
    // the cluster read the header.
    old: (c) => {
      const vh = c.routeConfig.virtualHosts[0]!;
      const own = vh.routes[1]!;
      const routeConfig = { ...c.routeConfig, virtualHosts: [{ ...vh, routes: [{ ...own, action: { kind: 'cluster' as const, cluster: 'original_destination_cluster', clusterNotFoundStatus: 503 } }] }] };
      return originalDstFromHeader({ ...c, earlyHeaderMutations: [], routeConfig }, DESTINATION_HEADER);
    },
    oldSpoofWins: true,
  },
];

/** The gate's reply with its mutation dropped: a CONTINUE and nothing else, of the same kind. */
const bareContinue: ReplyPolicy = (r) => {
  if (r.request_headers) return { request_headers: { response: { status: 'CONTINUE' } } };
  if (r.request_body) return { request_body: { response: { status: 'CONTINUE' } } };
  return r;
};

/** The gate's reply applied as is, except that it never clears the route cache. */
const noRouteClear: ReplyPolicy = (r) => {
  const out: ProcessingResponse = structuredClone(r);
  for (const c of [out.request_headers?.response, out.request_body?.response]) if (c) delete c.clear_route_cache;
  return out;
};

interface Mode {
  name: string;
  /** undefined: kvgate is down (nothing listens where Envoy sends). */
  policy?: ReplyPolicy;
}

const MODES: Mode[] = [
  { name: 'kvgate down' },
  { name: 'kvgate slow (every reply past message_timeout)', policy: () => 'hold' },
  { name: 'kvgate slow after its first reply', policy: (r, i) => (i === 0 ? r : 'hold') },
  { name: 'a fallback reply (bare CONTINUE)', policy: bareContinue },
  { name: 'replies without clear_route_cache', policy: noRouteClear },
];

/** The spoof reached the worker it names. */
function spoofWon(s: Shipped, out: Outcome): boolean {
  if (out.kind !== 'upstream') return false;
  return s.header === DESTINATION_HEADER ? out.endpoint === s.spoof : out.cluster === s.spoof;
}

/**
 * How the configs stripped the header before: an HTTP header_mutation filter ahead of ext_proc,
 * which runs after the HCM has picked the route (on the client's header).
 */
function stripAfterRouting(c: ParsedEnvoyConfig, header: string): ParsedEnvoyConfig {
  return {
    ...c,
    earlyHeaderMutations: [],
    httpFilters: [{ kind: 'header_mutation', name: 'envoy.filters.http.header_mutation', requestMutations: [{ kind: 'remove', name: header }] }, ...c.httpFilters],
  };
}

/** ORIGINAL_DST with use_http_header on `header`, as the picker configs had it. */
function originalDstFromHeader(c: ParsedEnvoyConfig, header: string): ParsedEnvoyConfig {
  const names = [...c.originalDstClusters.keys()];
  return { ...c, originalDstClusters: new Map(names.map((k) => [k, { header }])), originalDstHeaders: new Map(names.map((k) => [k, header])) };
}

async function run(s: Shipped, config: ParsedEnvoyConfig, target: string, messageTimeoutMs = 150): Promise<Outcome> {
  // A short message timeout keeps the "slow" cases fast; the held replies never come at all.
  // The healthy case passes a long one: on a loaded machine a real decision can take longer
  // than 150 ms, and a timed-out reply would fail open and hide whether kvgate routed.
  const extProcOverride = { messageTimeoutMs, ...(s.grpcAuthority ? { grpcAuthority: s.grpcAuthority } : {}) };
  const h = new EnvoyHarness({ config, target, extProcOverride });
  try {
    return await h.request(s.request({ [s.header]: s.spoof }), { status: 200 });
  } finally {
    h.close();
  }
}

for (const s of SHIPPED) {
  describe(`a spoofed ${s.header} never reaches the worker it names: ${s.name}`, () => {
    let gate: TestGate;
    let proxy: ExtProcProxy;
    let refused: RefusedPort;
    let down: string;
    before(async () => {
      gate = await startTestGate(s.kvgate());
      proxy = await startExtProcProxy(gate.target);
      refused = await refusedPort();
      down = `127.0.0.1:${refused.port}`;
    });
    after(async () => {
      proxy.close();
      await gate.close(100);
      await refused.release();
    });

    for (const mode of MODES) {
      test(mode.name, async () => {
        if (mode.policy) proxy.setPolicy(mode.policy);
        const out = await run(s, s.envoy(), mode.policy ? proxy.target : down);
        assert.ok(s.fallback(out), `served by the fallback: ${JSON.stringify({ kind: out.kind, cluster: out.cluster, endpoint: out.kind === 'upstream' ? out.endpoint : undefined })}`);
        assert.ok(!spoofWon(s, out));
        assert.ok(!out.requestHeaders.getAll(s.header).includes(s.spoof) || mode.policy === noRouteClear, 'the client’s header never reaches the upstream');
      });
    }

    test(`control: the config as it was ${s.oldSpoofWins ? 'lets the spoof win' : 'loses the fallback'}`, async () => {
      const old = s.old(s.envoy());
      proxy.setPolicy(bareContinue);
      for (const target of [down, proxy.target]) {
        const out = await run(s, old, target);
        const seen = JSON.stringify({ kind: out.kind, cluster: out.cluster, status: out.kind === 'local' ? out.status : undefined });
        assert.ok(!s.fallback(out), `not the fallback: ${seen}`);
        if (s.oldSpoofWins) assert.ok(spoofWon(s, out), `the spoof won: ${seen}`);
      }
    });

    test('a healthy kvgate still routes: its answer re-picks the route', async () => {
      proxy.setPolicy((r) => r);
      const seen = gate.results.length;
      const out = await run(s, s.envoy(), proxy.target, 10_000);
      const result = gate.results.slice(seen).find((r) => r.kind === 'route');
      assert.ok(result && result.kind === 'route', 'kvgate routed the request');
      assert.equal(out.kind, 'upstream');
      assert.equal(out.routeCleared, true);
      if (s.header === DESTINATION_HEADER) {
        const worker = PICKER_WORKERS.find((w) => w.id === result.worker);
        assert.equal(out.kind === 'upstream' && out.endpoint, worker?.address, 'ORIGINAL_DST connected to kvgate’s pick, from its metadata');
      } else {
        assert.equal(out.cluster, result.cluster);
      }
    });
  });
}

test('endpoint picker: with no early strip at all, ORIGINAL_DST still never connects where a client says', async () => {
  // Defence in depth: the header may match the ORIGINAL_DST route, but the cluster reads only
  // kvgate's envoy.lb metadata, so without kvgate's answer there is no host (503).
  const refused = await refusedPort();
  try {
    for (const s of SHIPPED.filter((x) => x.header === DESTINATION_HEADER)) {
      const config = { ...s.envoy(), earlyHeaderMutations: [] };
      const out = await run(s, config, `127.0.0.1:${refused.port}`);
      assert.equal(out.kind, 'local', s.name);
      assert.equal(out.kind === 'local' && out.status, 503, s.name);
      assert.equal(out.kind === 'local' && out.details, 'no_healthy_upstream', s.name);
    }
  } finally {
    await refused.release();
  }
});


test('kvgate’s own layer, with no early strip: a reply that removes the spoof clears the route cache', async () => {
  // BUFFERED: kvgate answers the request headers at once (removing the client's header), then is
  // too slow on the body. Envoy picked the route on the spoof; only the headers reply's
  // clear_route_cache takes the request back to the fallback.
  for (const s of SHIPPED.filter((x) => x.name === 'envoy/envoy.yaml' || x.name === 'envoy/endpoint-picker/envoy.yaml')) {
    const gate = await startTestGate(s.kvgate());
    const proxy = await startExtProcProxy(gate.target, (r, i) => (i === 0 ? r : 'hold'));
    try {
      const out = await run(s, { ...s.envoy(), earlyHeaderMutations: [] }, proxy.target);
      assert.ok(s.fallback(out), `${s.name}: served by the fallback: ${JSON.stringify({ kind: out.kind, cluster: out.cluster })}`);
      assert.equal(out.routeCleared, true, s.name);
      assert.deepEqual(out.requestHeaders.getAll(s.header), [], s.name);
    } finally {
      proxy.close();
      await gate.close(100);
    }
  }
});
