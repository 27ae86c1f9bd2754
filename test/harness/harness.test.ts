/**
 * Tests of the Envoy harness itself, against small ext_proc servers scripted here with grpc-js.
 * Each test's server answers exactly as the scenario needs; the assertions are what Envoy's
 * ext_proc filter does in that case (source/extensions/filters/http/ext_proc/ext_proc.cc and
 * processor_state.cc in envoyproxy/envoy, as the harness's rules cite them).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { extProcServiceDefinition } from '../../src/extproc/proto.js';
import type {
  CommonResponse,
  HeaderValueOption,
  ProcessingResponse,
  ReceivedProcessingRequest as ProcessingRequest,
} from '../../src/extproc/messages.js';
import { toPbStruct } from './dynamic-metadata.js';
import { loadEnvoyConfig, parseDurationMs, parseEnvoyConfig, withExtProc, type ParsedEnvoyConfig } from './envoy-config.js';
import {
  EnvoyHarness,
  type EnvoyHarnessOptions,
  HeaderList,
  type LocalOutcome,
  type Outcome,
  type UpstreamOutcome,
  isClosed,
  isTimedOut,
} from './envoy-harness.js';

const ENVOY_YAML = fileURLToPath(new URL('../../envoy/envoy.yaml', import.meta.url));
const envoy = loadEnvoyConfig(ENVOY_YAML);

// ---- scripted servers ------------------------------------------------------------------------

type ServerCall = grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>;
type Script = (msg: ProcessingRequest, call: ServerCall, seen: ProcessingRequest[]) => void;

interface ScriptedServer {
  target: string;
  /** Every message received, over all calls. */
  received: ProcessingRequest[];
  /** 'open', 'half-close', 'cancelled' per call, in order. */
  events: string[];
  metadata: grpc.Metadata[];
  /** The :authority of each call. */
  hosts: string[];
  close(): void;
}

async function startServer(script: Script): Promise<ScriptedServer> {
  const server = new grpc.Server();
  const s: Omit<ScriptedServer, 'target' | 'close'> = { received: [], events: [], metadata: [], hosts: [] };
  server.addService(extProcServiceDefinition(), {
    Process: (call: ServerCall) => {
      s.events.push('open');
      s.metadata.push(call.metadata);
      s.hosts.push(call.getHost());
      const seen: ProcessingRequest[] = [];
      call.on('data', (m: ProcessingRequest) => {
        seen.push(m);
        s.received.push(m);
        script(m, call, seen);
      });
      // The server rule: on the client's half-close, finish with OK.
      call.on('end', () => {
        s.events.push('half-close');
        call.end();
      });
      call.on('cancelled', () => s.events.push('cancelled'));
      call.on('error', () => {});
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { ...s, target: `127.0.0.1:${port}`, close: () => server.forceShutdown() };
}

/** Runs `fn` with a scripted server and a harness on it; both are always shut down. */
async function withHarness(
  script: Script,
  fn: (h: EnvoyHarness, srv: ScriptedServer) => Promise<void>,
  opts: Partial<EnvoyHarnessOptions> = {},
): Promise<void> {
  const srv = await startServer(script);
  const h = new EnvoyHarness({ config: envoy, ...opts, target: srv.target });
  try {
    await fn(h, srv);
  } finally {
    h.close();
    srv.close();
  }
}

/** A header to set the way Envoy reads it: bytes in raw_value, append explicit. */
function set(key: string, value: string, append = false): HeaderValueOption {
  return { header: { key, raw_value: Buffer.from(value) }, append: { value: append } };
}

/** The reply of the right type for `m`, carrying `common` (or the trailers mutation). */
function replyTo(m: ProcessingRequest, common: CommonResponse = {}): ProcessingResponse {
  switch (m.request) {
    case 'request_trailers':
      return { request_trailers: common.header_mutation ? { header_mutation: common.header_mutation } : {} };
    case 'response_trailers':
      return { response_trailers: common.header_mutation ? { header_mutation: common.header_mutation } : {} };
    case undefined:
      throw new Error('message without a request case');
    default:
      return { [m.request]: { response: common } };
  }
}

/** Answers everything unchanged. */
const passThrough: Script = (m, call) => call.write(replyTo(m));

const kinds = (msgs: ProcessingRequest[]): string[] => msgs.map((m) => m.request ?? '?');

function header(m: ProcessingRequest | undefined, name: string): string | undefined {
  const hs = m?.request_headers?.headers?.headers ?? m?.response_headers?.headers?.headers ?? [];
  const h = hs.find((x) => x.key === name);
  return h ? Buffer.from(h.raw_value ?? Buffer.alloc(0)).toString('utf8') : undefined;
}

function asUpstream(o: Outcome): UpstreamOutcome {
  assert.equal(o.kind, 'upstream', `expected upstream, got ${JSON.stringify({ ...o, requestHeaders: undefined })}`);
  return o as UpstreamOutcome;
}

function asLocal(o: Outcome): LocalOutcome {
  assert.equal(o.kind, 'local', `expected a local reply, got ${o.kind}`);
  return o as LocalOutcome;
}

async function eventually(pred: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

const GET = { method: 'GET', path: '/v1/models', headers: { host: 'gw.local' } };
const POST = {
  method: 'POST',
  path: '/v1/chat/completions',
  headers: { host: 'gw.local', 'content-type': 'application/json' },
  body: '{"model":"m","messages":[{"role":"user","content":"hi"}]}',
};
const failClosed = { extProcOverride: { failureModeAllow: false } };

// ---- config parsing --------------------------------------------------------------------------

describe('envoy-config', () => {
  test('reads envoy/envoy.yaml: chain, ext_proc settings, routes, clusters, buffer limit', () => {
    assert.deepEqual(
      envoy.httpFilters.map((f) => f.kind),
      ['ext_proc', 'router'],
    );
    assert.deepEqual(envoy.earlyHeaderMutations, [{ kind: 'remove', name: 'x-kvgate-cluster' }]);
    const ep = envoy.extProc;
    assert.ok(ep, "ep");
    assert.equal(ep.failureModeAllow, true);
    assert.equal(ep.messageTimeoutMs, 500);
    assert.equal(ep.grpcCluster, 'kvgate_ext_proc');
    assert.equal(ep.routeCacheAction, 'DEFAULT');
    assert.deepEqual(ep.processingMode, {
      request_header_mode: 'SEND',
      response_header_mode: 'SEND',
      request_body_mode: 'BUFFERED',
      response_body_mode: 'NONE',
      request_trailer_mode: 'SKIP',
      response_trailer_mode: 'SKIP',
    });
    assert.equal(envoy.bufferLimitBytes, 8 * 1024 * 1024);
    const routes = envoy.routeConfig.virtualHosts[0]?.routes ?? [];
    assert.deepEqual(
      routes.map((r) => r.action),
      [
        { kind: 'cluster_header', header: 'x-kvgate-cluster', clusterNotFoundStatus: 503 },
        { kind: 'cluster', cluster: 'kvgate_fallback', clusterNotFoundStatus: 503 },
        { kind: 'cluster', cluster: 'kvgate_fallback', clusterNotFoundStatus: 503 },
        { kind: 'cluster', cluster: 'kvgate_fallback', clusterNotFoundStatus: 503 },
      ],
    );
    // The Responses route's fallback sends response bodies (the ids kvgate learns); the rest do not.
    assert.equal(routes[1]?.match.path, '/v1/responses');
    assert.equal(routes[1]?.extProcPerRoute?.processingMode?.response_body_mode, 'STREAMED');
    assert.equal(routes[1]?.extProcPerRoute?.processingMode?.request_body_mode, 'BUFFERED');
    // The batch route only sets the class knob; its body modes are the filter's.
    assert.equal(routes[2]?.match.prefix, '/v1/batch');
    assert.equal(routes[2]?.extProcPerRoute?.processingMode, undefined);
    assert.equal(routes[3]?.extProcPerRoute, undefined);
    for (const c of ['worker_1', 'worker_2', 'worker_3', 'kvgate_fallback', 'kvgate_ext_proc']) {
      assert.ok(envoy.clusters.has(c), c);
    }
  });

  test("fills Envoy's defaults and parses durations", () => {
    const cfg = parseEnvoyConfig(`
static_resources:
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          route_config:
            virtual_hosts:
            - name: v
              domains: ["*"]
              routes:
              - match: { path: "/x" }
                route: { cluster_header: x-c, cluster_not_found_response_code: NOT_FOUND }
          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service: { envoy_grpc: { cluster_name: p } }
              processing_mode: { request_header_mode: DEFAULT, request_trailer_mode: DEFAULT }
              disable_clear_route_cache: true
              mutation_rules: { allow_envoy: true, disallow_is_error: { value: true } }
          - name: envoy.filters.http.router
  clusters:
  - name: p
`);
    const ep = cfg.extProc;
    assert.ok(ep, "ep");
    assert.deepEqual(ep.processingMode, {
      request_header_mode: 'SEND',
      response_header_mode: 'SEND',
      request_body_mode: 'NONE',
      response_body_mode: 'NONE',
      request_trailer_mode: 'SKIP',
      response_trailer_mode: 'SKIP',
    });
    assert.equal(ep.messageTimeoutMs, 200);
    assert.equal(ep.failureModeAllow, false);
    assert.equal(ep.routeCacheAction, 'RETAIN');
    assert.equal(ep.mutationRules.allowEnvoy, true);
    assert.equal(ep.mutationRules.disallowIsError, true);
    assert.equal(ep.mutationRules.allowAllRouting, false);
    assert.equal(cfg.bufferLimitBytes, 1024 * 1024);
    assert.deepEqual(cfg.routeConfig.virtualHosts[0]?.routes[0]?.action, {
      kind: 'cluster_header',
      header: 'x-c',
      clusterNotFoundStatus: 404,
    });
    assert.equal(parseDurationMs('0.5s'), 500);
    assert.equal(parseDurationMs('1.000340012s'), 1000.340012);
    assert.equal(parseDurationMs({ seconds: 2, nanos: 500_000_000 }), 2500);
    assert.throws(() => parseDurationMs('500ms'));
  });

  test('refuses config the harness cannot imitate', () => {
    const withMode = (mode: string): string =>
      readFileSync(ENVOY_YAML, 'utf8').replaceAll('request_body_mode: BUFFERED', `request_body_mode: ${mode}`);
    assert.throws(() => parseEnvoyConfig(withMode('BUFFERED_PARTIAL')), /not supported/);
    // Envoy itself refuses FULL_DUPLEX_STREAMED without trailer mode SEND.
    assert.throws(() => parseEnvoyConfig(withMode('FULL_DUPLEX_STREAMED')), /requires request_trailer_mode: SEND/);
    assert.doesNotThrow(() => parseEnvoyConfig(withMode('STREAMED')));
  });
});

// ---- routing through clear_route_cache -------------------------------------------------------

describe('routing (cluster_header + clear_route_cache)', () => {
  test('x-kvgate-cluster with clear_route_cache re-resolves the route to that worker', async () => {
    await withHarness(
      (m, call) =>
        call.write(
          m.request === 'request_headers'
            ? replyTo(m, { header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_2')] }, clear_route_cache: true })
            : replyTo(m, { header_mutation: { set_headers: [set('x-served-by', 'kvgate')] } }),
        ),
      async (h, srv) => {
        const o = asUpstream(await h.request(GET, { status: 200, headers: { 'content-type': 'text/plain' } }));
        assert.equal(o.cluster, 'worker_2');
        assert.equal(o.routeCleared, true);
        assert.equal(o.requestHeaders.get('x-kvgate-cluster'), 'worker_2');
        assert.equal(o.responseHeaders.get('x-served-by'), 'kvgate');
        assert.deepEqual(kinds(srv.received), ['request_headers', 'response_headers']);
        assert.equal(header(srv.received[1], ':status'), '200');
        assert.deepEqual(
          o.messages.map((x) => [x.sent, x.reply]),
          [
            ['request_headers', 'request_headers'],
            ['response_headers', 'response_headers'],
          ],
        );
      },
    );
  });

  test('the same header without clear_route_cache keeps the route chosen before ext_proc (fallback)', async () => {
    await withHarness(
      (m, call) => call.write(replyTo(m, m.request === 'request_headers' ? { header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_2')] } } : {})),
      async (h) => {
        const o = asUpstream(await h.request(GET));
        assert.equal(o.cluster, 'kvgate_fallback');
        assert.equal(o.routeCleared, false);
        // The header is there; it just was never read by a route lookup.
        assert.equal(o.requestHeaders.get('x-kvgate-cluster'), 'worker_2');
      },
    );
  });

  test('BUFFERED: a header set in the body reply still routes (headers are held until then)', async () => {
    await withHarness(
      (m, call) =>
        call.write(
          m.request === 'request_body'
            ? replyTo(m, { header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_3')] }, clear_route_cache: true })
            : replyTo(m),
        ),
      async (h, srv) => {
        const o = asUpstream(await h.request(POST));
        assert.equal(o.cluster, 'worker_3');
        assert.equal(o.requestBody.toString(), POST.body);
        assert.deepEqual(kinds(srv.received), ['request_headers', 'request_body', 'response_headers']);
        assert.equal(srv.received[0]?.request_headers?.end_of_stream, false);
        assert.equal(srv.received[1]?.request_body?.end_of_stream, true);
        assert.equal(srv.received[1]?.request_body?.body.toString(), POST.body);
      },
    );
  });

  test('route_cache_action: CLEAR needs no flag, RETAIN ignores it; no header_mutation = no clear', async () => {
    const routeTo = (flag: boolean): Script => (m, call) =>
      call.write(
        replyTo(m, m.request === 'request_headers' ? { header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_1')] }, clear_route_cache: flag } : {}),
      );
    await withHarness(routeTo(false), async (h) => {
      assert.equal(asUpstream(await h.request(GET)).cluster, 'worker_1');
    }, { extProcOverride: { routeCacheAction: 'CLEAR' } });
    await withHarness(routeTo(true), async (h) => {
      const o = asUpstream(await h.request(GET));
      assert.equal(o.cluster, 'kvgate_fallback');
      assert.equal(o.stats?.clearRouteCacheDisabled, 1);
    }, { extProcOverride: { routeCacheAction: 'RETAIN' } });
    await withHarness((m, call) => call.write(replyTo(m, { clear_route_cache: true })), async (h) => {
      const o = asUpstream(await h.request(GET));
      assert.equal(o.routeCleared, false);
      assert.equal(o.stats?.clearRouteCacheIgnored, 1);
    });
  });

  test('a client-sent x-kvgate-cluster is stripped by the early header mutation before the route is picked', async () => {
    await withHarness(passThrough, async (h, srv) => {
      const o = asUpstream(await h.request({ ...GET, headers: { ...GET.headers, 'x-kvgate-cluster': 'worker_3' } }));
      assert.equal(header(srv.received[0], 'x-kvgate-cluster'), undefined);
      assert.equal(o.cluster, 'kvgate_fallback');
      assert.equal(o.requestHeaders.has('x-kvgate-cluster'), false);
    });
  });

  // conn_manager_impl.cc ActiveStream::decodeHeaders: refreshCachedRoute() before the filter chain;
  // header_mutation.cc HeaderMutation::decodeHeaders never clears the route cache.
  test('an HTTP header_mutation filter does not change the route already picked on the client header', async () => {
    const filterStrip: ParsedEnvoyConfig = {
      ...envoy,
      earlyHeaderMutations: [],
      httpFilters: [{ kind: 'header_mutation', name: 'strip', requestMutations: [{ kind: 'remove', name: 'x-kvgate-cluster' }] }, ...envoy.httpFilters],
    };
    await withHarness(passThrough, async (h, srv) => {
      const o = asUpstream(await h.request({ ...GET, headers: { ...GET.headers, 'x-kvgate-cluster': 'worker_3' } }));
      assert.equal(header(srv.received[0], 'x-kvgate-cluster'), undefined, 'the filter removed the header before ext_proc');
      assert.equal(o.cluster, 'worker_3', 'but the route was picked on it, before any HTTP filter');
      assert.equal(o.requestHeaders.has('x-kvgate-cluster'), false);
    }, { config: filterStrip });
    // A reply that removes it and clears the cache re-picks the route without it.
    const strip: Script = (m, call) =>
      call.write(replyTo(m, m.request === 'request_headers' ? { header_mutation: { remove_headers: ['x-kvgate-cluster'] }, clear_route_cache: true } : {}));
    await withHarness(strip, async (h) => {
      const o = asUpstream(await h.request({ ...GET, headers: { ...GET.headers, 'x-kvgate-cluster': 'worker_3' } }));
      assert.equal(o.cluster, 'kvgate_fallback');
      assert.equal(o.routeCleared, true);
    }, { config: { ...envoy, earlyHeaderMutations: [] } });
  });

  test('an unknown cluster name is a 503 local reply, which ext_proc is not sent (Envoy 1.34+)', async () => {
    await withHarness(
      (m, call) =>
        call.write(
          replyTo(m, m.request === 'request_headers' ? { header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_99')] }, clear_route_cache: true } : {}),
        ),
      async (h, srv) => {
        const o = asLocal(await h.request(GET));
        assert.equal(o.status, 503);
        assert.equal(o.details, 'cluster_not_found');
        assert.deepEqual(kinds(srv.received), ['request_headers']);
      },
    );
  });
});

// ---- header mutation rules -------------------------------------------------------------------

describe('header mutations', () => {
  test('a value-only header arrives empty: Envoy reads raw_value only', async () => {
    await withHarness(
      (m, call) =>
        call.write(
          replyTo(
            m,
            m.request === 'request_headers'
              ? {
                  header_mutation: {
                    set_headers: [
                      { header: { key: 'x-hint', value: 'abc' }, append: { value: false } },
                      { header: { key: 'x-kvgate-cluster', value: 'worker_1' } },
                    ],
                  },
                  clear_route_cache: true,
                }
              : {},
          ),
        ),
      async (h) => {
        const o = asLocal(await h.request(GET));
        // The routing header exists but is empty: the cluster_header route matches, '' is no cluster.
        assert.equal(o.status, 503);
        assert.equal(o.requestHeaders.get('x-hint'), '');
        assert.equal(o.requestHeaders.get('x-kvgate-cluster'), '');
      },
    );
  });

  test('both value and raw_value is a 500, even with failure_mode_allow', async () => {
    await withHarness(
      (m, call) =>
        call.write(
          replyTo(m, {
            header_mutation: { set_headers: [{ header: { key: 'x-a', value: 'v', raw_value: Buffer.from('v') } }] },
          }),
        ),
      async (h) => {
        const o = asLocal(await h.request(GET));
        assert.equal(o.status, 500);
        assert.equal(o.details, 'Only_one_of_value_or_raw_value_in_the_HeaderValue_message_should_be_set.');
      },
    );
  });

  // mutation_utils.cc headerMutationResultCheck: the request header map keeps the HCM's limits
  // (max_headers_count 100, max_request_headers_kb 60 by default), and a mutation that takes it
  // past them is an error (HeaderMutationResultSizeFailWithRequestTrailer and its header twins).
  test('a mutation that takes the request headers past the HCM count or size limit is a 500, even with failure_mode_allow', async () => {
    // 4 pseudo-headers + x-forwarded-proto and x-request-id added by the HCM + 94 of the client's: 100.
    const atLimit = (extra: number) => {
      const headers: Record<string, string> = { host: 'gw.local' };
      for (let i = 0; i < extra; i++) headers[`x-h${i}`] = 'v';
      return { method: 'GET', path: '/v1/models', headers };
    };
    const adding = { header_mutation: { set_headers: [set('x-new', '1')] } };
    await withHarness(
      (m, call) => call.write(replyTo(m, m.request === 'request_headers' ? adding : {})),
      async (h) => {
        const full = asLocal(await h.request(atLimit(94)));
        assert.equal(full.status, 500);
        assert.match(full.details ?? '', /^Header_mutation_causes_end_result_header_count_101/);
        assert.equal(full.stats?.rejectedHeaderMutations, 1);
        // One header under the limit, the same mutation fits.
        const room = asUpstream(await h.request(atLimit(93)));
        assert.equal(room.requestHeaders.get('x-new'), '1');
      },
    );
    // Overwriting a header the request has adds none: no error at the limit.
    await withHarness(
      (m, call) => call.write(replyTo(m, m.request === 'request_headers' ? { header_mutation: { set_headers: [set('x-h0', 'w')] } } : {})),
      async (h) => {
        const o = asUpstream(await h.request(atLimit(94)));
        assert.equal(o.requestHeaders.get('x-h0'), 'w');
      },
    );
    // The size limit: a value that takes the map past max_request_headers_kb.
    await withHarness(
      (m, call) => call.write(replyTo(m, m.request === 'request_headers' ? { header_mutation: { set_headers: [set('x-big', 'x'.repeat(61 * 1024))] } } : {})),
      async (h) => {
        const o = asLocal(await h.request(GET));
        assert.equal(o.status, 500);
        assert.match(o.details ?? '', /exceeding_the_count_limit_100_or_the_size_limit_60_kilobytes$/);
      },
    );
  });

  test('BUFFERED body_mutation must match content-length unless the same reply fixes it', async () => {
    const rewrite = (fixLength: boolean): Script => (m, call) => {
      const body = Buffer.from('{"model":"m2"}');
      call.write(
        replyTo(
          m,
          m.request === 'request_body'
            ? { body_mutation: { body }, ...(fixLength ? { header_mutation: { set_headers: [set('content-length', String(body.length))] } } : {}) }
            : {},
        ),
      );
    };
    await withHarness(rewrite(false), async (h) => {
      const o = asLocal(await h.request(POST));
      assert.equal(o.status, 500);
      assert.equal(o.details, 'mismatch_between_content_length_and_the_length_of_the_mutated_body');
    });
    await withHarness(rewrite(true), async (h) => {
      const o = asUpstream(await h.request(POST));
      assert.equal(o.requestBody.toString(), '{"model":"m2"}');
      assert.equal(o.requestHeaders.get('content-length'), '14');
    });
  });

  test('append true adds a value, false overwrites the first; raw non-UTF-8 bytes pass both ways', async () => {
    const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9]); // "caf\xe9", not UTF-8
    let seenRaw: Uint8Array | undefined;
    await withHarness(
      (m, call) => {
        if (m.request !== 'request_headers') {
          call.write(replyTo(m));
          return;
        }
        seenRaw = m.request_headers?.headers?.headers.find((x) => x.key === 'x-raw')?.raw_value;
        call.write(
          replyTo(m, {
            header_mutation: {
              set_headers: [set('x-multi', 'b', true), set('x-one', 'new'), { header: { key: 'x-bytes', raw_value: latin1 } }],
            },
          }),
        );
      },
      async (h) => {
        const o = asUpstream(
          await h.request({ ...GET, headers: { ...GET.headers, 'x-multi': 'a', 'x-one': ['old1', 'old2'], 'x-raw': latin1 } }),
        );
        assert.deepEqual(o.requestHeaders.getAll('x-multi'), ['a', 'b']);
        // append false replaces every copy (HeaderMapImpl::setCopy removes them all).
        assert.deepEqual(o.requestHeaders.getAll('x-one'), ['new']);
        assert.deepEqual(o.requestHeaders.getRaw('x-bytes')[0], latin1);
        assert.deepEqual(seenRaw, latin1);
      },
    );
  });

  test('disallowed mutations are skipped and counted, or a 500 with disallow_is_error', async () => {
    const script: Script = (m, call) =>
      call.write(
        replyTo(
          m,
          m.request === 'request_headers'
            ? {
                header_mutation: {
                  set_headers: [set('host', 'evil.example'), set('x-envoy-original-path', '/x'), set(':path', '/v2'), set(':path', '/v3', true)],
                  remove_headers: [':method', 'host'],
                },
              }
            : {},
        ),
      );
    await withHarness(script, async (h) => {
      const o = asUpstream(await h.request(GET));
      // host (routing), x-envoy-*, appending to ':path', removing ':method' and 'host': 5 rejected.
      assert.equal(o.rejectedMutations, 5);
      assert.equal(o.requestHeaders.get(':authority'), 'gw.local');
      assert.equal(o.requestHeaders.get(':path'), '/v2'); // :path is settable by default
      assert.equal(o.requestHeaders.get(':method'), 'GET');
      assert.equal(o.requestHeaders.has('x-envoy-original-path'), false);
    });
    const strict = withExtProc(envoy, {
      mutationRules: { ...(envoy.extProc?.mutationRules ?? ({} as never)), disallowIsError: true },
    });
    await withHarness(
      script,
      async (h) => {
        const o = asLocal(await h.request(GET));
        assert.equal(o.status, 500);
        assert.equal(o.details, 'Invalid_attempt_to_remove_:method');
      },
      { config: strict },
    );
  });
});

// ---- failures: spurious replies, timeouts, closes, errors ------------------------------------

describe('failure handling', () => {
  const wrongType: Script = (m, call) =>
    call.write(m.request === 'request_headers' ? { request_body: { response: {} } } : replyTo(m));

  test('a reply of the wrong type is spurious: fail-open continues untouched and stops consulting', async () => {
    await withHarness(wrongType, async (h, srv) => {
      const o = asUpstream(await h.request(POST));
      assert.equal(o.spurious, true);
      assert.equal(o.cluster, 'kvgate_fallback');
      assert.equal(o.requestBody.toString(), POST.body);
      assert.deepEqual(o.messages, [{ sent: 'request_headers', reply: 'request_body', endOfStream: false }]);
      assert.deepEqual(kinds(srv.received), ['request_headers']);
    });
  });

  test('a reply of the wrong type with failure_mode_allow: false is a 500', async () => {
    await withHarness(
      wrongType,
      async (h) => {
        const o = asLocal(await h.request(POST));
        assert.equal(o.status, 500);
        assert.equal(o.spurious, true);
        assert.equal(o.details, 'spurious_message');
      },
      failClosed,
    );
  });

  test('an extra reply that arrives while Envoy waits on the upstream is spurious', async () => {
    await withHarness(
      (m, call) => {
        call.write(replyTo(m));
        if (m.request === 'request_headers') call.write(replyTo(m)); // one reply too many
      },
      async (h, srv) => {
        const o = asUpstream(await h.request(GET, { status: 200, latencyMs: 50 }));
        assert.equal(o.spurious, true);
        assert.deepEqual(o.messages.at(-1), { sent: 'idle', reply: 'request_headers' });
        assert.deepEqual(kinds(srv.received), ['request_headers']); // no response_headers after that
      },
    );
  });

  test('immediate_response 429 is a local reply with its status, headers, body and details', async () => {
    await withHarness(
      (_m, call) =>
        call.write({
          immediate_response: {
            status: { code: 429 },
            headers: { set_headers: [set('retry-after', '1')] },
            body: Buffer.from('busy'),
            details: 'kvgate shed load',
          },
        }),
      async (h, srv) => {
        const o = asLocal(await h.request(POST));
        assert.equal(o.status, 429);
        assert.equal(o.headers.get('retry-after'), '1');
        assert.equal(o.body.toString(), 'busy');
        assert.equal(o.details, 'kvgate_shed_load');
        assert.deepEqual(kinds(srv.received), ['request_headers']); // processing is over
      },
    );
  });

  test('immediate_response without a status (or below 200) answers 200', async () => {
    await withHarness(
      (_m, call) => call.write({ immediate_response: { status: { code: 100 } } }),
      async (h) => {
        assert.equal(asLocal(await h.request(GET)).status, 200);
      },
    );
  });

  const silent: Script = () => {};

  test('a server that never answers: fail-open continues after message_timeout', async () => {
    await withHarness(
      silent,
      async (h) => {
        const t0 = Date.now();
        const o = asUpstream(await h.request(POST));
        assert.ok(Date.now() - t0 >= 95, 'waited for the message timer');
        assert.equal(o.cluster, 'kvgate_fallback');
        assert.deepEqual(
          o.messages.map((x) => x.reply),
          ['timeout'],
        );
        assert.equal(o.stats?.messageTimeouts, 1);
      },
      { extProcOverride: { messageTimeoutMs: 100 } },
    );
  });

  test('a server that never answers: fail-closed is a 504 with the per-message timeout details', async () => {
    await withHarness(
      silent,
      async (h) => {
        const o = asLocal(await h.request(GET));
        assert.equal(o.status, 504);
        assert.equal(o.details, 'ext_proc_error_per-message_timeout_exceeded');
      },
      { extProcOverride: { messageTimeoutMs: 100, failureModeAllow: false } },
    );
  });

  test('a late reply after a fail-open timeout is ignored', async () => {
    await withHarness(
      (m, call) => {
        setTimeout(() => call.write(replyTo(m, { header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_1')] }, clear_route_cache: true })), 80);
      },
      async (h) => {
        const o = asUpstream(await h.request(GET));
        assert.equal(o.cluster, 'kvgate_fallback');
        assert.equal(o.requestHeaders.has('x-kvgate-cluster'), false);
      },
      { extProcOverride: { messageTimeoutMs: 40 } },
    );
  });

  test('a clean close (OK) after the headers reply: the request continues unmodified', async () => {
    await withHarness(
      (m, call) => {
        call.write(replyTo(m));
        call.end();
      },
      async (h, srv) => {
        const o = asUpstream(await h.request(POST));
        assert.equal(o.cluster, 'kvgate_fallback');
        assert.equal(o.requestBody.toString(), POST.body);
        assert.equal(o.messages[0]?.reply, 'request_headers');
        assert.ok(o.messages.slice(1).every((x) => x.reply === 'closed'), "o.messages.slice(1).every((x) => x.reply === 'closed')");
        assert.ok(!kinds(srv.received).includes('response_headers'), "!kinds(srv.received).includes('response_headers')");
      },
      failClosed, // a clean close is not a failure, even fail-closed
    );
  });

  test('a gRPC error status: fail-open continues, fail-closed answers 500 with the status in details', async () => {
    const boom: Script = (_m, call) => call.emit('error', { code: grpc.status.INTERNAL, details: 'boom' });
    await withHarness(boom, async (h) => {
      assert.equal(asUpstream(await h.request(GET)).cluster, 'kvgate_fallback');
    });
    await withHarness(
      boom,
      async (h) => {
        const o = asLocal(await h.request(GET));
        assert.equal(o.status, 500);
        assert.equal(o.details, 'ext_proc_error_gRPC_error_13{boom}');
      },
      failClosed,
    );
  });
});

// ---- message order per processing mode -------------------------------------------------------

describe('message order', () => {
  test('GET without a body: request_headers end_of_stream=true and no body message, even BUFFERED', async () => {
    await withHarness(passThrough, async (h, srv) => {
      asUpstream(await h.request(GET));
      assert.deepEqual(kinds(srv.received), ['request_headers', 'response_headers']);
      assert.equal(srv.received[0]?.request_headers?.end_of_stream, true);
      assert.equal(srv.received[1]?.response_headers?.end_of_stream, true);
      for (const p of [':method', ':path', ':scheme', ':authority']) assert.ok(header(srv.received[0], p), p);
      assert.equal(header(srv.received[0], ':authority'), 'gw.local');
    });
  });

  test('POST with an empty body: headers end_of_stream=false, then one empty body with end_of_stream=true', async () => {
    await withHarness(passThrough, async (h, srv) => {
      asUpstream(await h.request({ ...POST, body: '' }));
      assert.deepEqual(kinds(srv.received), ['request_headers', 'request_body', 'response_headers']);
      assert.equal(srv.received[0]?.request_headers?.end_of_stream, false);
      assert.equal(srv.received[1]?.request_body?.body.length, 0);
      assert.equal(srv.received[1]?.request_body?.end_of_stream, true);
    });
  });

  test('BUFFERED body over the listener buffer limit: 413 without the server seeing the body', async () => {
    const small: ParsedEnvoyConfig = { ...envoy, bufferLimitBytes: 16 };
    await withHarness(
      passThrough,
      async (h, srv) => {
        const o = asLocal(await h.request(POST));
        assert.equal(o.status, 413);
        assert.ok(!kinds(srv.received).includes('request_body'), "!kinds(srv.received).includes('request_body')");
      },
      { config: small },
    );
  });

  test('STREAMED (override): chunks are pipelined after the headers reply, replies in order', async () => {
    const chunks = ['{"a":', '1,"b"', ':2}'].map((c) => Buffer.from(c));
    let bodiesBeforeFirstReply = 0;
    await withHarness(
      (m, call, seen) => {
        if (m.request !== 'request_body') {
          call.write(replyTo(m));
          return;
        }
        // Hold every body reply until all chunks are in: only works if Envoy pipelines.
        const bodies = seen.filter((x) => x.request === 'request_body');
        if (!bodies.at(-1)?.request_body?.end_of_stream) return;
        bodiesBeforeFirstReply = bodies.length;
        for (const b of bodies) {
          call.write(
            replyTo(b, {
              body_mutation: { body: Buffer.from(b.request_body?.body.toString().toUpperCase() ?? '') },
              // Too late to route: the headers went upstream after the headers reply.
              header_mutation: { set_headers: [set('x-kvgate-cluster', 'worker_1')] },
              clear_route_cache: true,
            }),
          );
        }
      },
      async (h, srv) => {
        const o = asUpstream(await h.request({ ...POST, body: undefined, chunks }));
        assert.equal(bodiesBeforeFirstReply, 3);
        assert.deepEqual(
          srv.received.filter((m) => m.request === 'request_body').map((m) => m.request_body?.end_of_stream),
          [false, false, true],
        );
        assert.equal(o.requestBody.toString(), '{"A":1,"B":2}');
        assert.equal(o.cluster, 'kvgate_fallback');
        assert.equal(o.requestHeaders.has('x-kvgate-cluster'), false);
      },
      { processingModeOverride: { request_body_mode: 'STREAMED' } },
    );
  });

  test('STREAMED: a streamed_response reply is spurious (fail-closed: status_on_error; fail-open: the body goes on unchanged)', async () => {
    const chunks = ['{"a":', '1}'].map((c) => Buffer.from(c));
    const script: Script = (m, call) =>
      call.write(
        m.request === 'request_body'
          ? replyTo(m, { body_mutation: { streamed_response: { body: Buffer.from('x'), end_of_stream: m.request_body?.end_of_stream === true } } })
          : replyTo(m),
      );
    await withHarness(script, async (h) => {
      const o = asLocal(await h.request({ ...POST, body: undefined, chunks }));
      assert.equal(o.status, 500);
    }, { processingModeOverride: { request_body_mode: 'STREAMED' }, extProcOverride: { failureModeAllow: false } });
    await withHarness(script, async (h) => {
      const o = asUpstream(await h.request({ ...POST, body: undefined, chunks }));
      assert.equal(o.requestBody.toString(), '{"a":1}');
    }, { processingModeOverride: { request_body_mode: 'STREAMED' }, extProcOverride: { failureModeAllow: true } });
  });

  test('trailers are sent only with trailer mode SEND and when the request has trailers', async () => {
    await withHarness(
      (m, call) => call.write(replyTo(m, m.request === 'request_trailers' ? { header_mutation: { set_headers: [set('x-t', '2')] } } : {})),
      async (h, srv) => {
        const o = asUpstream(await h.request({ ...POST, trailers: { 'x-t': '1' } }));
        assert.deepEqual(kinds(srv.received), ['request_headers', 'request_body', 'request_trailers', 'response_headers']);
        assert.equal(srv.received[1]?.request_body?.end_of_stream, false); // trailers follow
        assert.equal(o.requestTrailers?.get('x-t'), '2');
        srv.received.length = 0;
        await h.request(POST);
        assert.deepEqual(kinds(srv.received), ['request_headers', 'request_body', 'response_headers']);
      },
      { processingModeOverride: { request_trailer_mode: 'SEND' } },
    );
  });
});

// ---- ORIGINAL_DST host selection -------------------------------------------------------------

/** A listener whose one route goes to ORIGINAL_DST cluster `od`, configured by `lb`. */
function originalDstConfig(lb: string): ParsedEnvoyConfig {
  return parseEnvoyConfig(`
static_resources:
  listeners:
  - name: l
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          route_config:
            virtual_hosts:
            - { name: v, domains: ["*"], routes: [ { match: { prefix: "/" }, route: { cluster: od } } ] }
          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service: { envoy_grpc: { cluster_name: gate } }
              message_timeout: 2s
              processing_mode: { response_header_mode: SKIP }
              metadata_options: { receiving_namespaces: { untyped: [envoy.lb] } }
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
  - { name: gate, type: STATIC }
  - name: od
    type: ORIGINAL_DST
    lb_policy: CLUSTER_PROVIDED
    original_dst_lb_config: ${lb}
`);
}

/** Answers the request headers with `metadata` in envoy.lb (when given). */
const writeLb = (value: unknown): Script => (m, call) =>
  call.write({ ...replyTo(m), ...(value === undefined ? {} : { dynamic_metadata: toPbStruct({ 'envoy.lb': { dst: value } }) }) });

// OriginalDstCluster::LoadBalancer::chooseHost (original_dst_cluster.cc): filter state, then
// metadata_key, then the use_http_header header, then the connection; none → no host → 503.
describe('ORIGINAL_DST host selection', () => {
  const both = originalDstConfig('{ metadata_key: { key: envoy.lb, path: [ { key: dst } ] }, use_http_header: true, http_header_name: x-dst }');
  const metadataOnly = originalDstConfig('{ metadata_key: { key: envoy.lb, path: [ { key: dst } ] } }');
  const withDst = { ...GET, headers: { ...GET.headers, 'x-dst': '10.0.0.9:8000' } };

  test('metadata first, then the header; a list gives its first element; an invalid value is skipped', async () => {
    await withHarness(writeLb('10.0.0.1:8000'), async (h) => {
      assert.equal(asUpstream(await h.request(withDst)).endpoint, '10.0.0.1:8000');
    }, { config: both });
    await withHarness(writeLb(['[::1]:9000', '10.0.0.2:8000']), async (h) => {
      assert.equal(asUpstream(await h.request(withDst)).endpoint, '[::1]:9000');
    }, { config: both });
    await withHarness(writeLb('worker-1:8000'), async (h) => {
      assert.equal(asUpstream(await h.request(withDst)).endpoint, '10.0.0.9:8000', 'not ip:port: the header is next');
    }, { config: both });
    await withHarness(writeLb(undefined), async (h) => {
      assert.equal(asUpstream(await h.request(withDst)).endpoint, '10.0.0.9:8000');
    }, { config: both });
  });

  test('metadata_key alone: no metadata is no host (503 no_healthy_upstream), whatever the headers say', async () => {
    await withHarness(writeLb(undefined), async (h) => {
      const o = asLocal(await h.request(withDst));
      assert.equal(o.status, 503);
      assert.equal(o.details, 'no_healthy_upstream');
    }, { config: metadataOnly });
    await withHarness(writeLb('10.0.0.1:8000'), async (h) => {
      assert.equal(asUpstream(await h.request(withDst)).endpoint, '10.0.0.1:8000');
    }, { config: metadataOnly });
  });

  test('upstream_port_override replaces the port', async () => {
    const cfg = originalDstConfig('{ metadata_key: { key: envoy.lb, path: [ { key: dst } ] }, upstream_port_override: 7000 }');
    await withHarness(writeLb('10.0.0.1:8000'), async (h) => {
      assert.equal(asUpstream(await h.request(GET)).endpoint, '10.0.0.1:7000');
    }, { config: cfg });
  });

  test('http_header_name without use_http_header is a config error, as in Envoy', () => {
    assert.throws(() => originalDstConfig('{ http_header_name: x-dst }'), /use_http_header is false/);
  });
});

// ---- the stream itself -----------------------------------------------------------------------

describe('stream lifecycle', () => {
  // ext_proc.cc Filter::closeGrpcStreamIfLastRespReceived (ext_proc_stream_close_optimization).
  test('Envoy closes the stream right after the last reply it needs, before the upstream answers', async () => {
    const requestOnly = { processingModeOverride: { response_header_mode: 'SKIP' as const } };
    // Headers only (GET, no body): closed after the request-headers reply.
    await withHarness(passThrough, async (h, srv) => {
      let closedBeforeUpstream = false;
      asUpstream(await h.request(GET, async () => {
        await eventually(() => srv.events.includes('half-close'), 1000).then(() => (closedBeforeUpstream = true), () => {});
        return { status: 200 };
      }));
      assert.equal(closedBeforeUpstream, true);
    }, requestOnly);
    // STREAMED: closed after the reply to the chunk that carried end_of_stream.
    await withHarness(passThrough, async (h, srv) => {
      let closedBeforeUpstream = false;
      asUpstream(await h.request({ ...POST, chunks: [Buffer.from('{"a":'), Buffer.from('1}')] }, async () => {
        await eventually(() => srv.events.includes('half-close'), 1000).then(() => (closedBeforeUpstream = true), () => {});
        return { status: 200 };
      }));
      assert.equal(closedBeforeUpstream, true);
    }, { processingModeOverride: { response_header_mode: 'SKIP', request_body_mode: 'STREAMED' } });
    // BUFFERED: never after the body reply (isLastBodyResponse: not for BUFFERED); at the end.
    await withHarness(passThrough, async (h, srv) => {
      let closedBeforeUpstream = true;
      asUpstream(await h.request(POST, async () => {
        await new Promise((r) => setTimeout(r, 100));
        closedBeforeUpstream = srv.events.includes('half-close');
        return { status: 200 };
      }));
      assert.equal(closedBeforeUpstream, false);
      await eventually(() => srv.events.includes('half-close'));
    }, { processingModeOverride: { response_header_mode: 'SKIP', request_body_mode: 'BUFFERED' } });
    // Response headers sent, no response body or trailers (envoy.yaml): after that reply, and a
    // server message after it is never read (the stream is gone, not a spurious reply).
    await withHarness((m, call) => {
      call.write(replyTo(m));
      if (m.request === 'response_headers') call.write(replyTo(m));
    }, async (h, srv) => {
      const o = asUpstream(await h.request(GET, { status: 200, body: 'tokens' }));
      assert.deepEqual(kinds(srv.received), ['request_headers', 'response_headers']);
      assert.equal(o.spurious, false);
      await eventually(() => srv.events.includes('half-close'));
    });
  });

  test('after processing Envoy half-closes, then cancels; metadata and authority are sent', async () => {
    await withHarness(
      passThrough,
      async (h, srv) => {
        asUpstream(await h.request(GET));
        await eventually(() => srv.events.includes('half-close'));
        assert.equal(srv.events[0], 'open');
        // The reset follows the half-close; the server may already have finished by then.
        const cancelled = srv.events.indexOf('cancelled');
        assert.ok(cancelled === -1 || cancelled > srv.events.indexOf('half-close'), "cancelled === -1 || cancelled > srv.events.indexOf('half-close')");
        assert.deepEqual(srv.metadata[0]?.get('x-test'), ['yes']);
        assert.equal(srv.hosts[0], 'kvgate_ext_proc'); // Envoy's :authority: the ext_proc cluster name
      },
      { grpcMetadata: { 'x-test': 'yes' } },
    );
  });

  test('openRawStream: scripted writes, next(), half-close, timeout', async () => {
    await withHarness(passThrough, async (h) => {
      const s = h.openRawStream();
      s.write({ request_headers: { headers: new HeaderList().toProto(), end_of_stream: true } });
      const r = await s.next(1000);
      assert.ok(!isClosed(r) && !isTimedOut(r), "!isClosed(r) && !isTimedOut(r)");
      assert.equal((r as ProcessingResponse).response, 'request_headers');
      assert.ok(isTimedOut(await s.next(20)), "isTimedOut(await s.next(20))");
      s.end();
      const c = await s.next(1000);
      assert.ok(isClosed(c), "isClosed(c)");
      assert.equal(c.status.code, grpc.status.OK);
      s.cancel();
    });
  });
});
