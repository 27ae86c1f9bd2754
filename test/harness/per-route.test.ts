/**
 * The harness's imitation of ExtProcPerRoute and forwarded dynamic metadata, against a small
 * ext_proc server that records what it receives: Envoy's merge of per-route gRPC initial metadata
 * (filter, then virtual host, then route, replacing by key), `disabled`, the route that counts
 * (the one matched when ext_proc starts), set_metadata and forwarding namespaces
 * (reference: envoy-ext-proc.md §3.5-§3.7; ext_proc.cc mergePerRouteConfig, addDynamicMetadata).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { parse, stringify } from 'yaml';
import { forwardedNamespace } from '../../src/extproc/knob-source.js';
import type { ProcessingResponse, ReceivedProcessingRequest as ProcessingRequest } from '../../src/extproc/messages.js';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import { eachObject, ENVOY_YAML } from '../helpers/envoy.js';
import { parseEnvoyConfig } from './envoy-config.js';
import { EnvoyHarness, type HarnessRequest } from './envoy-harness.js';
import { mergePerRoute } from './ext-proc-session.js';

const PER_ROUTE = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute';

interface Call {
  metadata: Record<string, string>;
  messages: ProcessingRequest[];
}

/** An ext_proc server that records each call and, on request headers, routes to cluster `b`. */
async function recorder(): Promise<{ target: string; calls: Call[]; close(): void }> {
  const calls: Call[] = [];
  const server = new grpc.Server();
  server.addService(extProcServiceDefinition(), {
    Process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
      const rec: Call = { metadata: {}, messages: [] };
      for (const [k, v] of Object.entries(call.metadata.getMap())) if (typeof v === 'string') rec.metadata[k] = v;
      calls.push(rec);
      call.on('data', (m: ProcessingRequest) => {
        rec.messages.push(m);
        const routeToB = { status: 'CONTINUE' as const, header_mutation: { set_headers: [{ header: { key: 'x-c', raw_value: Buffer.from('b') }, append: { value: false } }] }, clear_route_cache: true };
        call.write(m.request === 'request_headers' ? { request_headers: { response: routeToB } } : { [m.request!]: { response: {} } });
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { target: `127.0.0.1:${port}`, calls, close: () => server.forceShutdown() };
}

function perRoute(overrides: Record<string, unknown> | 'disabled') {
  return { 'envoy.filters.http.ext_proc': overrides === 'disabled' ? { '@type': PER_ROUTE, disabled: true } : { '@type': PER_ROUTE, overrides } };
}

const md = (pairs: Record<string, string>) => Object.entries(pairs).map(([key, value]) => ({ key, value }));

/**
 * A bootstrap with a set_metadata filter, ext_proc forwarding `ns1`, and two virtual hosts:
 * `knobs` (per-route config on the host and its routes) and `off` (ext_proc disabled, except
 * on one route that re-enables it).
 */
function bootstrap(extProcDisabledByDefault = false): string {
  const routeOnHeader = { match: { prefix: '/', headers: [{ name: 'x-c', present_match: true }] }, route: { cluster_header: 'x-c' } };
  return stringify({
    static_resources: {
      listeners: [{
        name: 'l',
        filter_chains: [{ filters: [{
          name: 'envoy.filters.network.http_connection_manager',
          typed_config: {
            '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
            stat_prefix: 'l',
            route_config: {
              virtual_hosts: [
                {
                  name: 'knobs',
                  domains: ['knobs'],
                  typed_per_filter_config: perRoute({ grpc_initial_metadata: md({ 'x-a': 'vhost', 'x-b': 'vhost', 'x-f': 'vhost' }) }),
                  routes: [
                    // After the server sets x-c this route matches; its per-route config must not count.
                    { ...routeOnHeader, typed_per_filter_config: perRoute({ grpc_initial_metadata: md({ 'x-a': 'header-route' }) }) },
                    {
                      match: { path: '/special' },
                      route: { cluster: 'a' },
                      typed_per_filter_config: perRoute({
                        grpc_initial_metadata: md({ 'x-a': 'route', 'x-r': 'route' }),
                        metadata_options: { forwarding_namespaces: { untyped: ['ns2'] } },
                      }),
                    },
                    { match: { prefix: '/' }, route: { cluster: 'a' } },
                  ],
                },
                {
                  name: 'off',
                  domains: ['off'],
                  typed_per_filter_config: perRoute('disabled'),
                  routes: [
                    routeOnHeader,
                    { match: { path: '/on' }, route: { cluster: 'a' }, typed_per_filter_config: perRoute({ grpc_initial_metadata: md({ 'x-r': 'on' }) }) },
                    { match: { prefix: '/' }, route: { cluster: 'a' } },
                  ],
                },
                // No per-filter config anywhere: ext_proc runs here unless it is disabled by default.
                { name: 'plain', domains: ['plain'], routes: [{ match: { prefix: '/' }, route: { cluster: 'a' } }] },
              ],
            },
            http_filters: [
              {
                name: 'envoy.filters.http.set_metadata',
                typed_config: {
                  '@type': 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config',
                  metadata: [
                    { metadata_namespace: 'ns1', value: { from: 'set_metadata', n: 1 } },
                    { metadata_namespace: 'ns2', value: { from: 'set_metadata' }, allow_overwrite: true },
                  ],
                },
              },
              {
                name: 'envoy.filters.http.ext_proc',
                ...(extProcDisabledByDefault ? { disabled: true } : {}),
                typed_config: {
                  '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
                  grpc_service: { envoy_grpc: { cluster_name: 'ext' }, initial_metadata: md({ 'x-f': 'filter', 'x-a': 'filter' }) },
                  processing_mode: { request_header_mode: 'SEND', response_header_mode: 'SKIP' },
                  metadata_options: { forwarding_namespaces: { untyped: ['ns1'] } },
                },
              },
              { name: 'envoy.filters.http.router', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' } },
            ],
          },
        }] }],
      }],
      clusters: [{ name: 'a' }, { name: 'b' }, { name: 'ext' }],
    },
  });
}

const get = (host: string, path = '/', extra: Partial<HarnessRequest> = {}): HarnessRequest => ({ method: 'GET', path, headers: { host }, ...extra });

describe('harness: per-route ext_proc config and forwarded metadata', () => {
  let srv: Awaited<ReturnType<typeof recorder>>;
  let h: EnvoyHarness;
  before(async () => {
    srv = await recorder();
    h = new EnvoyHarness({ config: parseEnvoyConfig(bootstrap()), target: srv.target });
  });
  after(() => {
    h.close();
    srv.close();
  });
  const lastCall = () => srv.calls.at(-1)!;

  test('gRPC metadata: the filter’s, then the virtual host’s, then the route’s, replacing by key', async () => {
    const out = await h.request(get('knobs', '/special'));
    assert.equal(out.kind === 'upstream' && out.cluster, 'b', 'the server routed, the route cache was cleared');
    const m = lastCall().metadata;
    assert.equal(m['x-f'], 'vhost');
    assert.equal(m['x-b'], 'vhost');
    assert.equal(m['x-a'], 'route');
    assert.equal(m['x-r'], 'route');

    await h.request(get('knobs', '/plain'));
    assert.equal(lastCall().metadata['x-a'], 'vhost', 'a route without its own config: the virtual host’s');
    assert.equal(lastCall().metadata['x-r'], undefined);
  });

  test('disabled on a virtual host opens no stream; a route’s overrides re-enable it', async () => {
    const before = srv.calls.length;
    const out = await h.request(get('off', '/anything'));
    assert.equal(out.kind === 'upstream' && out.cluster, 'a');
    assert.equal(srv.calls.length, before, 'no ext_proc stream');
    await h.request(get('off', '/on'));
    assert.equal(srv.calls.length, before + 1);
    assert.equal(lastCall().metadata['x-r'], 'on');
    assert.equal(lastCall().metadata['x-f'], 'filter', 'disabled carries no metadata to merge');
  });

  test('a filter disabled by default (HttpFilter.disabled) runs only where a route or its virtual host names it', async () => {
    const h2 = new EnvoyHarness({ config: parseEnvoyConfig(bootstrap(true)), target: srv.target });
    try {
      let before = srv.calls.length;
      await h.request(get('plain', '/x'));
      assert.equal(srv.calls.length, before + 1, 'enabled by default: a stream on a route with no per-filter config');
      before = srv.calls.length;
      const out = await h2.request(get('plain', '/x'));
      assert.equal(out.kind === 'upstream' && out.cluster, 'a');
      assert.equal(srv.calls.length, before, 'disabled by default: no stream where nothing enables it');
      await h2.request(get('knobs', '/plain'));
      assert.equal(srv.calls.length, before + 1, 'the virtual host’s per-filter config enables it');
      await h2.request(get('off', '/on'));
      assert.equal(srv.calls.length, before + 2, 'the route’s does too');
      await h2.request(get('off', '/anything'));
      assert.equal(srv.calls.length, before + 2, 'ExtProcPerRoute disabled: created, and the filter itself opens no stream');
    } finally {
      h2.close();
    }
  });

  test('metadata_context: forwarded namespaces only, set_metadata keeps or merges what the request had', async () => {
    await h.request(get('knobs', '/plain', { metadata: { ns1: { from: 'earlier' }, other: { x: 1 } } }));
    let msg = lastCall().messages[0]!;
    assert.deepEqual(forwardedNamespace(msg.metadata_context, 'ns1'), { from: 'earlier' }, 'no allow_overwrite: the earlier value stays');
    assert.equal(forwardedNamespace(msg.metadata_context, 'other'), undefined, 'not a forwarding namespace');
    assert.equal(forwardedNamespace(msg.metadata_context, 'ns2'), undefined);

    await h.request(get('knobs', '/plain'));
    assert.deepEqual(forwardedNamespace(lastCall().messages[0]!.metadata_context, 'ns1'), { from: 'set_metadata', n: 1 });

    // The route replaces the forwarding namespaces with ns2, which set_metadata merges into.
    await h.request(get('knobs', '/special', { metadata: { ns2: { kept: true, from: 'earlier' } } }));
    msg = lastCall().messages[0]!;
    assert.equal(forwardedNamespace(msg.metadata_context, 'ns1'), undefined);
    assert.deepEqual(forwardedNamespace(msg.metadata_context, 'ns2'), { kept: true, from: 'set_metadata' });
  });

  test('per-route settings the harness cannot imitate are config errors', () => {
    const withOverride = (overrides: unknown) =>
      parseEnvoyConfig(
        stringify({
          static_resources: {
            listeners: [{ filter_chains: [{ filters: [{
              name: 'envoy.filters.network.http_connection_manager',
              typed_config: {
                '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
                route_config: { virtual_hosts: [{ name: 'v', domains: ['*'], routes: [{ match: { prefix: '/' }, route: { cluster: 'a' }, typed_per_filter_config: overrides }] }] },
                http_filters: [{ name: 'envoy.filters.http.ext_proc', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor', grpc_service: { envoy_grpc: { cluster_name: 'a' } } } }],
              },
            }] }] }],
          },
        }),
      );
    assert.throws(() => withOverride(perRoute({ grpc_service: { envoy_grpc: { cluster_name: 'a' } } })), /grpc_service not supported/);
    const mode = withOverride(perRoute({ processing_mode: { response_body_mode: 'STREAMED' } })).routeConfig.virtualHosts[0]!.routes[0]!.extProcPerRoute!.processingMode;
    // The override is a whole ProcessingMode: unset fields take the message's defaults, not the filter's.
    assert.deepEqual(mode, { request_header_mode: 'SEND', response_header_mode: 'SEND', request_body_mode: 'NONE', response_body_mode: 'STREAMED', request_trailer_mode: 'SKIP', response_trailer_mode: 'SKIP' });
    assert.throws(() => withOverride(perRoute({ processing_mode: { response_body_mode: 'SOMETIMES' } })), /response_body_mode/);
    assert.throws(() => withOverride({ 'envoy.filters.http.cors': { '@type': 'x' } }), /per-route config for envoy.filters.http.cors/);
    assert.throws(() => withOverride({ 'envoy.filters.http.ext_proc': { '@type': PER_ROUTE, disabled: false } }), /disabled must be true/);
    assert.throws(() => withOverride(perRoute({ grpc_initial_metadata: md({ 'x-kvgate-pool': '%REQ(x-pool)%' }) })), /format commands/);
    assert.ok(withOverride(perRoute({ grpc_initial_metadata: md({ k: 'v' }) })), "withOverride(perRoute({ grpc_initial_metadata: md({ k: 'v' }) }))");
    // A filter disabled by default (HttpFilter.disabled): modelled for ext_proc, refused for any other.
    const withFilters = (filters: unknown[]) =>
      stringify({
        static_resources: {
          listeners: [{ filter_chains: [{ filters: [{
            name: 'envoy.filters.network.http_connection_manager',
            typed_config: {
              '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
              route_config: { virtual_hosts: [{ name: 'v', domains: ['*'], routes: [{ match: { prefix: '/' }, route: { cluster: 'a' } }] }] },
              http_filters: filters,
            },
          }] }] }],
        },
      });
    const extProcFilter = { name: 'envoy.filters.http.ext_proc', disabled: true, typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor', grpc_service: { envoy_grpc: { cluster_name: 'a' } } } };
    assert.equal(parseEnvoyConfig(withFilters([extProcFilter])).extProc?.disabledByDefault, true);
    const setMetadata = { name: 'envoy.filters.http.set_metadata', disabled: true, typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config' } };
    assert.throws(() => parseEnvoyConfig(withFilters([setMetadata, { ...extProcFilter, disabled: false }])), /disabled filters other than ext_proc are not supported/);
  });
});

describe('ExtProcPerRoute processing_mode (mergeProcessingMode in ext_proc.cc)', () => {
  const mode = (response_body_mode: 'NONE' | 'STREAMED') => ({
    request_header_mode: 'SEND' as const,
    response_header_mode: 'SEND' as const,
    request_body_mode: 'BUFFERED' as const,
    response_body_mode,
    request_trailer_mode: 'SKIP' as const,
    response_trailer_mode: 'SKIP' as const,
  });
  test('the more specific mode wins whole; a route without one keeps the virtual host’s; disabled has none', () => {
    const vhost = { disabled: false, grpcInitialMetadata: [], processingMode: mode('NONE') };
    const route = { disabled: false, grpcInitialMetadata: [], processingMode: mode('STREAMED') };
    assert.equal(mergePerRoute([vhost, route])?.processingMode?.response_body_mode, 'STREAMED');
    assert.equal(mergePerRoute([vhost, { disabled: false, grpcInitialMetadata: [] }])?.processingMode?.response_body_mode, 'NONE');
    assert.equal(mergePerRoute([route, { disabled: true, grpcInitialMetadata: [] }])?.processingMode, undefined);
  });
});

describe('ExtProcPerRoute failure_mode_allow (FilterConfigPerRoute merge, Filter::mergePerRouteConfig)', () => {
  test('the more specific value wins; a route without one keeps the virtual host’s', () => {
    const vhost = { disabled: false, grpcInitialMetadata: [], failureModeAllow: true };
    assert.equal(mergePerRoute([vhost, { disabled: false, grpcInitialMetadata: [], failureModeAllow: false }])?.failureModeAllow, false);
    assert.equal(mergePerRoute([vhost, { disabled: false, grpcInitialMetadata: [] }])?.failureModeAllow, true);
  });

  // Istio writes this override on each InferencePool route, from the pool's failureMode.
  test("a route's override opens a fail-closed filter for that route only", async () => {
    const doc = parse(readFileSync(ENVOY_YAML, 'utf8')) as Record<string, unknown>;
    let filters = 0;
    let routes = 0;
    eachObject(doc, (o) => {
      if (o['@type'] === 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor') {
        o.failure_mode_allow = false;
        filters++;
      }
      if (o.name === 'batch') {
        const pf = (o.typed_per_filter_config as Record<string, { overrides: Record<string, unknown> }>)['envoy.filters.http.ext_proc']!;
        pf.overrides.failure_mode_allow = true;
        routes++;
      }
    });
    assert.deepEqual([filters, routes], [1, 1]);
    const server = new grpc.Server();
    server.addService(extProcServiceDefinition(), {
      Process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
        call.on('data', () => call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'down' }));
        call.on('error', () => {});
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const h = new EnvoyHarness({ config: parseEnvoyConfig(stringify(doc)), target: `127.0.0.1:${port}` });
    try {
      const batch = await h.request({ method: 'GET', path: '/v1/batch/jobs' }, { status: 200 });
      assert.equal(batch.kind, 'upstream');
      const other = await h.request({ method: 'GET', path: '/v1/models' }, { status: 200 });
      assert.equal(other.kind, 'local');
      assert.equal(other.kind === 'local' ? other.status : 0, 500);
    } finally {
      h.close();
      server.forceShutdown();
    }
  });
});
