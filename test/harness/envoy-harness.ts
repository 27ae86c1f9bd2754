/**
 * EnvoyHarness plays Envoy's side of ext_proc over real gRPC: for each HTTP request it runs the
 * configured filter chain (header_mutation, ext_proc, router), opens one `Process` stream,
 * sends the messages Envoy would send in Envoy's order, holds each reply to Envoy's rules
 * (spurious replies, timeouts, mutation rules, route cache) and reports what Envoy would have
 * done: which cluster the request reached, or which local reply the client got.
 *
 * It imitates Envoy's ext_proc filter as of about Envoy 1.35+ (Envoy's external_processor.proto
 * and the filter's source in envoyproxy/envoy). Each rule names the Envoy source it
 * follows where it is implemented; read from envoyproxy/envoy, not run. The routing rules:
 *  - HCM ConnectionManagerImpl::ActiveStream::decodeHeaders (source/common/http/conn_manager_impl.cc):
 *    early header mutations (HttpConnectionManager.early_header_mutation_extensions; the
 *    header_mutation extension, source/extensions/http/early_header_mutation/header_mutation)
 *    run first, then refreshCachedRoute() picks and caches the route, then the HTTP filters run
 *    (request-run.ts, RequestRun constructor). A cluster_header route reads its header then
 *    (routing.ts, HeaderClusterSpecifierPlugin::route in header_cluster_specifier.cc);
 *  - the route is picked again only after a filter clears the cache: ext_proc's
 *    DecodingProcessorState::clearRouteCache (processor_state.cc), needing a header_mutation in the
 *    same reply, per route_cache_action; the header_mutation HTTP filter never clears it
 *    (HeaderMutation::decodeHeaders, source/extensions/filters/http/header_mutation/header_mutation.cc);
 *  - ORIGINAL_DST host: OriginalDstCluster::LoadBalancer::chooseHost
 *    (source/extensions/clusters/original_dst/original_dst_cluster.cc): metadata_key, then the
 *    use_http_header header, each parsed as ip:port; none → the router's 503 no_healthy_upstream;
 *  - header mutations from ext_proc: Checker::isAllowed (source/extensions/filters/common/
 *    mutation_rules/mutation_rules.cc) and MutationUtils (ext_proc/mutation_utils.cc), mutations.ts;
 *  - the stream is closed right after the last reply Envoy needs: Filter::
 *    closeGrpcStreamIfLastRespReceived (ext_proc/ext_proc.cc), ext-proc-session.ts.
 * Deliberate simplifications:
 *  - the request path finishes before the response path starts (Envoy may interleave them);
 *  - the message timer runs per message from its send (Envoy keeps one timer per direction);
 *  - body modes NONE, BUFFERED, STREAMED and FULL_DUPLEX_STREAMED (request-run.ts `duplex`,
 *    after processor_state.cc); no BUFFERED_PARTIAL; FULL_DUPLEX_STREAMED with header mode SKIP
 *    is refused;
 *  - protocol_config on the first message as Envoy 1.35+ sends it (`sendsProtocolConfig: false`
 *    plays an older Envoy); no attributes;
 *  - FULL_DUPLEX_STREAMED waits are bounded by the HCM stream idle timeout (5 min, not read from
 *    the config);
 *  - dynamic metadata (dynamic-metadata.ts): what a request brings (`HarnessRequest.metadata`),
 *    set_metadata filters (untyped, static values) and an upstream's (`UpstreamResponse.metadata`)
 *    are forwarded in metadata_context for the untyped forwarding namespaces (the filter's, or a
 *    per-route override's); a reply's dynamic_metadata is applied for the filter's untyped
 *    receiving namespaces; no connection metadata fallback;
 *  - ORIGINAL_DST clusters: no filter-state override and no fallback to the downstream
 *    connection's restored destination (no original_dst listener filter is imitated); the host is
 *    reported as its ip:port, not connected to;
 *  - early header mutations: the header_mutation extension only, literal values (no
 *    substitution formatters), and no other HCM request-header sanitising (internal_only_headers,
 *    x-envoy-* stripping of external requests);
 *  - stream close: closed at once, not gracefully (ext_proc_graceful_grpc_close); a BUFFERED body
 *    reply never closes (as in Envoy); the extra close at encodeHeaders when the response path
 *    sends nothing is covered by the close at the end of the request;
 *  - ExtProcPerRoute on virtual hosts and routes: `disabled`, `grpc_initial_metadata` and
 *    `metadata_options` only (other overrides are config errors in the harness), merged once
 *    on the route matched when ext_proc starts, as Envoy does; an ext_proc filter disabled by
 *    default (HttpFilter.disabled) exists only for requests whose first route or virtual host
 *    names it (request-run.ts); any other filter disabled by default is a config error;
 *  - no header count/size limits, no grpc_status on immediate responses, no HCM response
 *    header_mutation;
 *  - a stream the server refuses (REFUSED_STREAM, or above its final GOAWAY's last stream id) is
 *    retried once, grpc-js's transparent retry, unless `retryRefused: false`. Envoy retries an
 *    ext_proc stream only under a GrpcService `retry_policy` (Grpc::AsyncStreamImpl,
 *    source/common/grpc/async_client_impl.cc; without one RetryStateImpl::create builds no retry
 *    state, source/common/router/retry_state_impl.cc), and its pool moves no stream it has sent
 *    (MultiplexedActiveClientBase::onGoAway, source/common/http/conn_pool_base.cc). The retry stays
 *    on by default because grpc-js, unlike Envoy, can refuse a stream itself: one it was asked for
 *    in the same turn of its event loop as it read a GOAWAY, before writing it (nghttp2 starts no
 *    stream after a GOAWAY; Envoy writes a stream's HEADERS as it opens it:
 *    ConnectionImpl::StreamImpl::encodeHeadersBase, source/common/http/http2/codec_impl.cc).
 *    Tests of what kvgate refuses turn it off (test/faults/extproc-faults.test.ts, the burst
 *    across a retirement).
 */
import * as grpc from '@grpc/grpc-js';
import { extProcClientConstructor } from '../../src/extproc/proto.js';
import type { ExtProcConfig, ParsedEnvoyConfig, ProcessingMode } from './envoy-config.js';
import { type ExtProcStats, ExtProcSession, type MessageRecord } from './ext-proc-session.js';
import type { HeaderInput, HeaderList } from './header-list.js';
import type { Namespaces } from './dynamic-metadata.js';
import { type ProcessCall, RawStream } from './raw-stream.js';
import { RequestRun } from './request-run.js';

export type { MessageRecord, ExtProcStats } from './ext-proc-session.js';
export { HeaderList } from './header-list.js';
export { RawStream, isClosed, isTimedOut } from './raw-stream.js';
export type { StreamClosed, StreamTimedOut, StreamEvent } from './raw-stream.js';

export interface EnvoyHarnessOptions {
  /** host:port of the ext_proc server. */
  target: string;
  config: ParsedEnvoyConfig;
  /** Replaces parts of the ext_proc processing_mode (e.g. STREAMED request bodies). */
  processingModeOverride?: Partial<ProcessingMode>;
  /** Replaces other ext_proc settings (e.g. failureModeAllow: false, a shorter messageTimeoutMs). */
  extProcOverride?: Partial<Omit<ExtProcConfig, 'processingMode'>>;
  /** Extra gRPC initial metadata on every Process call (on top of grpc_service.initial_metadata). */
  grpcMetadata?: Record<string, string>;
  /** TLS / mTLS to the ext_proc server, as Envoy's transport_socket on the gate's cluster (default plaintext). */
  channelCredentials?: grpc.ChannelCredentials;
  /**
   * With TLS: the server name Envoy sends (UpstreamTlsContext.sni on the gate's cluster;
   * envoy/kvgate-ext-proc-mtls-cluster.yaml sets `kvgate`), not the address it connects to.
   */
  sni?: string;
  /**
   * false: no stream is retried, as behind Envoy (see the file's comment); a stream kvgate refuses
   * fails. Default true: grpc-js's one transparent retry of a refused stream.
   */
  retryRefused?: boolean;
}

export interface HarnessRequest {
  method: string;
  path: string;
  /** Client headers; `host` becomes `:authority`. Buffer values may hold non-UTF-8 bytes. */
  headers?: HeaderInput;
  /** Present (even empty) = the request has a body; absent = headers only (end_of_stream). */
  body?: Buffer | string;
  trailers?: Record<string, string>;
  /** The body as Envoy receives it, chunk by chunk (one STREAMED message per chunk). */
  chunks?: Buffer[];
  /**
   * The request's dynamic metadata before ext_proc runs (namespace → values), as an earlier filter,
   * the connection or the gateway sets it: e.g. an endpoint-picker subset hint in
   * `envoy.lb.subset_hint`, or host-level knobs in `kvgate`.
   */
  metadata?: Namespaces;
}

/** The request as it reaches the upstream cluster. */
export interface UpstreamRequest {
  cluster: string;
  /** ORIGINAL_DST with use_http_header: the address Envoy connects to (the header's first value). */
  endpoint?: string;
  headers: HeaderList;
  body: Buffer;
  trailers?: HeaderList;
}

/** The simulated worker's response. */
export interface UpstreamResponse {
  status: number;
  headers?: HeaderInput;
  /** Present (even empty) = the response has a body. */
  body?: Buffer | string;
  chunks?: Buffer[];
  trailers?: Record<string, string>;
  /**
   * How long the upstream takes. While it runs Envoy has nothing outstanding on the stream, so
   * anything the server sends then (an extra reply) is seen as spurious.
   */
  latencyMs?: number;
  /**
   * Dynamic metadata the proxy records while this request is served, before the response path:
   * e.g. a gateway reporting the endpoint that served it (`envoy.lb` /
   * `x-gateway-destination-endpoint-served`). Stock Envoy sets no such key by itself.
   */
  metadata?: Namespaces;
}

/** A function may answer later (a Promise), holding the request in flight until it does. */
export type UpstreamSpec = UpstreamResponse | ((req: UpstreamRequest) => UpstreamResponse | Promise<UpstreamResponse>);

export interface OutcomeBase {
  /** Every message Envoy sent and what answered it, in order. */
  messages: MessageRecord[];
  /** Header mutations skipped by mutation_rules (Envoy's rejected_header_mutations). */
  rejectedMutations: number;
  /** ext_proc cleared the route cache before the router read it (the route was re-resolved). */
  routeCleared: boolean;
  /** A reply of the wrong type (or an extra reply) arrived. */
  spurious: boolean;
  /** The request headers as Envoy holds them at the end (after every mutation). */
  requestHeaders: HeaderList;
  /** The cluster the request reached, when it reached one before the outcome was decided. */
  cluster?: string;
  /** ext_proc counters for this request (absent when the chain has no ext_proc filter). */
  stats?: ExtProcStats;
  /** The request's dynamic metadata at the end (namespace → values). */
  dynamicMetadata: Namespaces;
}

export interface UpstreamOutcome extends OutcomeBase {
  kind: 'upstream';
  cluster: string;
  /** ORIGINAL_DST clusters: the address the request went to. */
  endpoint?: string;
  requestBody: Buffer;
  requestTrailers?: HeaderList;
  responseStatus: number;
  responseHeaders: HeaderList;
  responseBody: Buffer;
  responseTrailers?: HeaderList;
}

/** Envoy answered the client itself (ext_proc immediate/error reply, router 404/503, 413). */
export interface LocalOutcome extends OutcomeBase {
  kind: 'local';
  status: number;
  headers: HeaderList;
  body: Buffer;
  /** Response code details, e.g. ext_proc_error_per-message_timeout_exceeded, cluster_not_found. */
  details?: string;
}

/** A local reply was needed after the response headers had gone out: Envoy resets the stream. */
export interface ResetOutcome extends OutcomeBase {
  kind: 'reset';
  details: string;
  responseStatus: number;
}

export type Outcome = UpstreamOutcome | LocalOutcome | ResetOutcome;

type ExtProcClient = grpc.Client & { Process(metadata?: grpc.Metadata): ProcessCall };

export class EnvoyHarness {
  readonly config: ParsedEnvoyConfig;
  /** The effective ext_proc settings (config + overrides), if the chain has ext_proc. */
  readonly extProc: ExtProcConfig | undefined;
  private readonly client: ExtProcClient;
  private readonly metadata: Array<[string, string]>;
  private readonly streams = new Set<RawStream>();

  constructor(opts: EnvoyHarnessOptions) {
    this.config = opts.config;
    const base = opts.config.extProc;
    this.extProc = base && {
      ...base,
      ...opts.extProcOverride,
      processingMode: { ...base.processingMode, ...opts.processingModeOverride },
    };
    this.metadata = [...(this.extProc?.initialMetadata ?? []), ...Object.entries(opts.grpcMetadata ?? {})];
    const Client = extProcClientConstructor();
    // 0 is grpc-js's off switch for every retry, its transparent one included.
    const channelOptions: grpc.ChannelOptions = opts.retryRefused === false ? { 'grpc.enable_retries': 0 } : {};
    // Receive windows stay grpc-js's 64 KiB, knowingly not Envoy's 16 MiB stream / 24 MiB
    // connection defaults (Http2ProtocolOptions in envoy/config/core/v3/protocol.proto, filled in
    // by Http2::Utility::initializeAndValidateOptions, source/common/http/utility.cc): Node stops
    // reading while one of its writes is in progress (Http2Session::MaybeStopReading in Node's
    // src/node_http2.cc), so a Node client that large can deadlock against kvgate's open windows
    // on full-duplex bodies, where Envoy keeps reading (src/extproc/receive-window.ts).
    // Envoy's :authority on the ext_proc call is envoy_grpc.authority or the cluster name.
    const authority = this.extProc?.grpcAuthority ?? this.extProc?.grpcCluster;
    if (authority) channelOptions['grpc.default_authority'] = authority;
    // Envoy sends the configured SNI and nothing when none is set, never the upstream's address
    // (ClientContextImpl::newSsl, source/common/tls/client_context_impl.cc: SSL_set_tlsext_host_name
    // only with a non-empty UpstreamTlsContext.sni). grpc-js would send the target's IP, which RFC
    // 6066 forbids as a server name and Node warns about.
    if (opts.sni) channelOptions['grpc.ssl_target_name_override'] = opts.sni;
    this.client = new Client(opts.target, opts.channelCredentials ?? grpc.credentials.createInsecure(), channelOptions) as unknown as ExtProcClient;
  }

  /** Sends one HTTP request through the simulated Envoy; `upstream` answers if it is routed. */
  async request(req: HarnessRequest, upstream?: UpstreamSpec): Promise<Outcome> {
    const session = this.extProc
      ? new ExtProcSession(this.extProc, this.config.envoyHeaderPrefix, (md) => this.openRawStream(md), this.metadata)
      : undefined;
    return new RequestRun(this.config, session, req).run(upstream);
  }

  /**
   * A bare Process stream, for tests that script message orders, half-closes and cancels.
   * `metadata` replaces the call's gRPC metadata (default: the filter's, plus `grpcMetadata`).
   */
  openRawStream(metadata: ReadonlyArray<[string, string]> = this.metadata): RawStream {
    const md = new grpc.Metadata();
    for (const [k, v] of metadata) md.add(k, v);
    const stream: RawStream = new RawStream(this.client.Process(md), () => this.streams.delete(stream));
    this.streams.add(stream);
    return stream;
  }

  /** Resets any stream still open and closes the channel: nothing keeps the process alive. */
  close(): void {
    for (const s of this.streams) s.cancel();
    this.streams.clear();
    this.client.close();
  }
}
