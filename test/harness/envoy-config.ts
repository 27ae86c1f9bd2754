/**
 * Reads an Envoy bootstrap (YAML) into the few things the test harness needs to behave like that
 * Envoy: the first listener's HTTP filter chain in order, the ext_proc filter's settings with
 * Envoy's defaults filled in, the inline route table (with ext_proc's per-route overrides on
 * virtual hosts and routes) and the set of cluster names.
 *
 * Anything the harness cannot imitate (RDS, weighted clusters, observability mode, ...) is a
 * thrown error rather than a silent skip: a harness that quietly ignored config would pass tests
 * that a real Envoy fails.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';

export type HeaderSendMode = 'SEND' | 'SKIP';
export type BodySendMode = 'NONE' | 'STREAMED' | 'BUFFERED' | 'FULL_DUPLEX_STREAMED';

/**
 * ext_proc.v3.ProcessingMode after Envoy's defaults (field names as in the proto, like the YAML
 * and `mode_override` on the wire). DEFAULT header mode means SEND; DEFAULT trailer mode means
 * SKIP (ProcessorState::setProcessingModeInternal: headers "!= SKIP", trailers "== SEND").
 */
export interface ProcessingMode {
  request_header_mode: HeaderSendMode;
  response_header_mode: HeaderSendMode;
  request_body_mode: BodySendMode;
  response_body_mode: BodySendMode;
  request_trailer_mode: HeaderSendMode;
  response_trailer_mode: HeaderSendMode;
}

/** config.common.mutation_rules.v3.HeaderMutationRules, all BoolValues defaulting to false. */
export interface MutationRules {
  allowAllRouting: boolean;
  allowEnvoy: boolean;
  disallowSystem: boolean;
  disallowAll: boolean;
  disallowIsError: boolean;
  /** RE2 full-match in Envoy; compiled here as an anchored JS RegExp. */
  allowExpression?: RegExp;
  disallowExpression?: RegExp;
}

export type RouteCacheAction = 'DEFAULT' | 'CLEAR' | 'RETAIN';

export interface ExtProcConfig {
  /** The http_filters entry name (also the typed_per_filter_config key). */
  filterName: string;
  /**
   * HttpFilter.disabled: the filter is created only for a request whose route (or virtual host)
   * names it in typed_per_filter_config (see request-run.ts for the Envoy functions).
   */
  disabledByDefault: boolean;
  grpcCluster?: string;
  grpcAuthority?: string;
  /** grpc_service.initial_metadata (literal values only). */
  initialMetadata: Array<[string, string]>;
  processingMode: ProcessingMode;
  /** message_timeout, default 200 ms. */
  messageTimeoutMs: number;
  /** max_message_timeout; 0 (default) means override_message_timeout is never honoured. */
  maxMessageTimeoutMs: number;
  failureModeAllow: boolean;
  mutationRules: MutationRules;
  /** route_cache_action, with the deprecated disable_clear_route_cache folded in as RETAIN. */
  routeCacheAction: RouteCacheAction;
  disableImmediateResponse: boolean;
  allowModeOverride: boolean;
  allowedOverrideModes: ProcessingMode[];
  /** status_on_error (newer Envoy), default 500. Timeouts always answer 504. */
  statusOnError: number;
  /** metadata_options.forwarding_namespaces.untyped: dynamic metadata sent in metadata_context. */
  forwardingNamespaces: string[];
  /** metadata_options.receiving_namespaces.untyped: namespaces a reply's dynamic_metadata may write. */
  receivingNamespaces: string[];
  /**
   * Whether this Envoy sends protocol_config on a stream's first message (Envoy 1.35+,
   * ext_proc.cc Filter::encodeProtocolConfig). Set false to play an older Envoy.
   */
  sendsProtocolConfig: boolean;
  /**
   * The HCM's stream_idle_timeout (default 5 min, conn_manager_impl.cc): in FULL_DUPLEX_STREAMED
   * the only bound on a wait for the server (ServerWaitTooLongBeforeSendRespDuplexStreamed: 504).
   */
  streamIdleTimeoutMs: number;
}

/** One action of envoy.filters.http.header_mutation's request_mutations. */
export type RequestMutation =
  | { kind: 'remove'; name: string }
  | { kind: 'remove_on_match'; matcher: StringMatcher }
  | {
      kind: 'append';
      name: string;
      value: string;
      action: 'APPEND_IF_EXISTS_OR_ADD' | 'ADD_IF_ABSENT' | 'OVERWRITE_IF_EXISTS_OR_ADD' | 'OVERWRITE_IF_EXISTS';
      keepEmptyValue: boolean;
    };

export type HttpFilter =
  | { kind: 'header_mutation'; name: string; requestMutations: RequestMutation[] }
  | { kind: 'ext_proc'; name: string }
  | { kind: 'router'; name: string }
  /** envoy.filters.http.set_metadata: static values into the request's dynamic metadata. */
  | { kind: 'set_metadata'; name: string; entries: SetMetadataEntry[] }
  /** A filter the harness does not imitate; it is passed through. */
  | { kind: 'other'; name: string; typeUrl?: string };

/** One `metadata` entry of the set_metadata filter (untyped values only). */
export interface SetMetadataEntry {
  namespace: string;
  value: Record<string, unknown>;
  allowOverwrite: boolean;
}

/**
 * ExtProcPerRoute (typed_per_filter_config[<ext_proc filter name>] on a virtual host or route),
 * the parts the harness imitates: `disabled`, and from `overrides` the gRPC initial metadata, the
 * forwarding namespaces and the processing mode.
 */
export interface ExtProcPerRoute {
  disabled: boolean;
  grpcInitialMetadata: Array<[string, string]>;
  /**
   * overrides.processing_mode: replaces the filter's whole mode for both directions (unset fields
   * take their defaults, not the filter's: FilterConfigPerRoute keeps the message as written, and
   * mergePerRouteConfig hands it to setProcessingMode of the decoding and encoding states).
   */
  processingMode?: ProcessingMode;
  /** overrides.metadata_options.forwarding_namespaces.untyped; undefined: not overridden. */
  forwardingNamespaces?: string[];
  /**
   * overrides.failure_mode_allow (a BoolValue, Envoy 1.35+); undefined: not overridden.
   * Istio sets it on each InferencePool route from the pool's endpointPickerRef.failureMode.
   */
  failureModeAllow?: boolean;
}

/** type.matcher.v3.StringMatcher (the variants the harness supports). */
export interface StringMatcher {
  kind: 'exact' | 'prefix' | 'suffix' | 'contains' | 'regex';
  value: string;
  ignoreCase: boolean;
  regex?: RegExp;
}

/** route.v3.HeaderMatcher. */
export interface HeaderMatcher {
  name: string;
  /** present_match: true/false; otherwise a string match on the comma-joined values. */
  present?: boolean;
  string?: StringMatcher;
  invert: boolean;
  treatMissingAsEmpty: boolean;
}

export type RouteAction =
  | { kind: 'cluster'; cluster: string; clusterNotFoundStatus: number }
  | { kind: 'cluster_header'; header: string; clusterNotFoundStatus: number }
  | { kind: 'direct_response'; status: number; body: string };

export interface Route {
  name?: string;
  match: {
    prefix?: string;
    path?: string;
    regex?: RegExp;
    caseSensitive: boolean;
    headers: HeaderMatcher[];
  };
  action: RouteAction;
  extProcPerRoute?: ExtProcPerRoute;
}

export interface VirtualHost {
  name: string;
  domains: string[];
  routes: Route[];
  extProcPerRoute?: ExtProcPerRoute;
}

export interface RouteConfig {
  name?: string;
  virtualHosts: VirtualHost[];
}

export interface ParsedEnvoyConfig {
  listenerName: string;
  /** listener per_connection_buffer_limit_bytes (default 1 MiB): the BUFFERED body limit. */
  bufferLimitBytes: number;
  /** bootstrap header_prefix, "x-envoy" by default (the allow_envoy rule). */
  envoyHeaderPrefix: string;
  /** The first listener's HCM http_filters, in order. */
  httpFilters: HttpFilter[];
  /** The (single) ext_proc filter's settings, if the chain has one. */
  extProc: ExtProcConfig | undefined;
  routeConfig: RouteConfig;
  clusters: ReadonlySet<string>;
  /**
   * ORIGINAL_DST clusters with original_dst_lb_config.use_http_header: cluster → the header whose
   * first value names the upstream address (default x-envoy-original-dst-host).
   */
  originalDstHeaders: ReadonlyMap<string, string>;
  /** Every ORIGINAL_DST cluster and where its load balancer looks for the host. */
  originalDstClusters: ReadonlyMap<string, OriginalDstLb>;
  /**
   * HCM early_header_mutation_extensions (header_mutation only), applied to the request headers
   * in ActiveStream::decodeHeaders before the route is picked and before any HTTP filter runs.
   */
  earlyHeaderMutations: RequestMutation[];
  /**
   * The HCM's request header limits (max_request_headers_kb, default 60;
   * common_http_protocol_options.max_headers_count, default 100; the HttpConnectionManagerConfig
   * constructor, source/extensions/filters/network/http_connection_manager/config.cc): the request
   * header map carries them, and ext_proc checks its mutations against them
   * (source/extensions/filters/http/ext_proc/mutation_utils.cc).
   */
  requestHeaderLimits: HeaderLimits;
}

/** A header map's limits, as HeaderMap::maxHeadersKb / maxHeadersCount report them. */
export interface HeaderLimits {
  maxHeadersKb: number;
  maxHeadersCount: number;
}

/**
 * cluster.v3.Cluster.OriginalDstLbConfig as OriginalDstCluster::LoadBalancer::chooseHost uses it
 * (original_dst_cluster.cc): filter state (not imitated), then `metadata_key` in the request's
 * dynamic metadata, then the `use_http_header` header, then the downstream connection's restored
 * local address (never, in the harness: no original_dst listener filter). No host: 503.
 */
export interface OriginalDstLb {
  /** use_http_header: the header (default x-envoy-original-dst-host); absent when off. */
  header?: string;
  /** metadata_key: namespace (`key`) and path into it. */
  metadataKey?: { key: string; path: string[] };
  /** upstream_port_override. */
  portOverride?: number;
}

const HCM_TYPE = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const EXT_PROC_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor';
const HEADER_MUTATION_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation';
const ROUTER_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';
const EARLY_HEADER_MUTATION_TYPE = 'type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation';
const SET_METADATA_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config';
const EXT_PROC_PER_ROUTE_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute';

export const DEFAULT_PROCESSING_MODE: Readonly<ProcessingMode> = Object.freeze({
  request_header_mode: 'SEND',
  response_header_mode: 'SEND',
  request_body_mode: 'NONE',
  response_body_mode: 'NONE',
  request_trailer_mode: 'SKIP',
  response_trailer_mode: 'SKIP',
});

/** route.v3.RouteAction.ClusterNotFoundResponseCode → HTTP status. */
const CLUSTER_NOT_FOUND_CODES: Record<string, number> = {
  SERVICE_UNAVAILABLE: 503,
  NOT_FOUND: 404,
  INTERNAL_SERVER_ERROR: 500,
};

/**
 * ext_proc fields that do not change what the harness must do. Everything else not handled
 * below is rejected so a config feature the harness cannot imitate never passes silently.
 */
const EXT_PROC_IGNORED_FIELDS = new Set(['@type', 'stat_prefix', 'deferred_close_timeout']);

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function obj(v: unknown, where: string): Obj {
  if (v === undefined || v === null) return {};
  if (!isObj(v)) throw new Error(`${where}: expected a mapping`);
  return v;
}

function list(v: unknown, where: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new Error(`${where}: expected a list`);
  return v;
}

function str(v: unknown, where: string): string {
  if (typeof v !== 'string') throw new Error(`${where}: expected a string`);
  return v;
}

/** A google.protobuf.BoolValue / bool as YAML writes it. */
function bool(v: unknown, where: string, dflt = false): boolean {
  if (v === undefined || v === null) return dflt;
  if (typeof v === 'boolean') return v;
  if (isObj(v) && typeof v.value === 'boolean') return v.value;
  throw new Error(`${where}: expected a boolean`);
}

/**
 * google.protobuf.Duration in its JSON/YAML form: "0.5s", "5s", "1.000340012s", or
 * {seconds, nanos}. Returns milliseconds.
 */
export function parseDurationMs(v: unknown, where = 'duration'): number {
  if (typeof v === 'string') {
    const m = /^(-?)(\d+)(?:\.(\d{1,9}))?s$/.exec(v.trim());
    if (!m || m[2] === undefined) throw new Error(`${where}: bad duration ${JSON.stringify(v)} (want e.g. "0.5s")`);
    // Whole seconds and nanos apart, as protobuf does, so "1.000340012s" stays exact.
    const nanos = Number((m[3] ?? '').padEnd(9, '0'));
    return (m[1] === '-' ? -1 : 1) * (Number(m[2]) * 1000 + nanos / 1e6);
  }
  if (isObj(v)) {
    const seconds = Number(v.seconds ?? 0);
    const nanos = Number(v.nanos ?? 0);
    if (!Number.isFinite(seconds) || !Number.isFinite(nanos)) throw new Error(`${where}: bad duration`);
    return seconds * 1000 + nanos / 1e6;
  }
  throw new Error(`${where}: bad duration ${JSON.stringify(v)}`);
}

function headerMode(v: unknown, dflt: HeaderSendMode, where: string): HeaderSendMode {
  if (v === undefined || v === null || v === 'DEFAULT') return dflt;
  if (v === 'SEND' || v === 'SKIP') return v;
  throw new Error(`${where}: unknown header send mode ${String(v)}`);
}

function bodyMode(v: unknown, where: string): BodySendMode {
  if (v === undefined || v === null || v === 'NONE') return 'NONE';
  if (v === 'STREAMED' || v === 'BUFFERED' || v === 'FULL_DUPLEX_STREAMED') return v;
  // BUFFERED_PARTIAL and GRPC have their own message rules; not imitated.
  throw new Error(`${where}: body mode ${String(v)} is not supported by the harness`);
}

/** Fills Envoy's defaults into a processing_mode mapping (or a mode_override). */
export function normalizeProcessingMode(raw: unknown, where = 'processing_mode'): ProcessingMode {
  const m = obj(raw, where);
  return {
    request_header_mode: headerMode(m.request_header_mode, 'SEND', `${where}.request_header_mode`),
    response_header_mode: headerMode(m.response_header_mode, 'SEND', `${where}.response_header_mode`),
    request_body_mode: bodyMode(m.request_body_mode, `${where}.request_body_mode`),
    response_body_mode: bodyMode(m.response_body_mode, `${where}.response_body_mode`),
    request_trailer_mode: headerMode(m.request_trailer_mode, 'SKIP', `${where}.request_trailer_mode`),
    response_trailer_mode: headerMode(m.response_trailer_mode, 'SKIP', `${where}.response_trailer_mode`),
  };
}

/** RE2 patterns used in configs are usually valid JS; Envoy matches the whole string. */
function anchoredRegex(v: unknown, where: string): RegExp {
  const r = obj(v, where);
  return new RegExp(`^(?:${str(r.regex, `${where}.regex`)})$`);
}

export function parseStringMatcher(v: unknown, where: string): StringMatcher {
  const m = obj(v, where);
  const ignoreCase = bool(m.ignore_case, `${where}.ignore_case`);
  for (const kind of ['exact', 'prefix', 'suffix', 'contains'] as const) {
    if (m[kind] !== undefined) return { kind, value: str(m[kind], `${where}.${kind}`), ignoreCase };
  }
  if (m.safe_regex !== undefined) {
    return { kind: 'regex', value: '', ignoreCase, regex: anchoredRegex(m.safe_regex, `${where}.safe_regex`) };
  }
  throw new Error(`${where}: unsupported string matcher ${JSON.stringify(m)}`);
}

function parseMutationRules(v: unknown): MutationRules {
  const r = obj(v, 'mutation_rules');
  const rules: MutationRules = {
    allowAllRouting: bool(r.allow_all_routing, 'mutation_rules.allow_all_routing'),
    allowEnvoy: bool(r.allow_envoy, 'mutation_rules.allow_envoy'),
    disallowSystem: bool(r.disallow_system, 'mutation_rules.disallow_system'),
    disallowAll: bool(r.disallow_all, 'mutation_rules.disallow_all'),
    disallowIsError: bool(r.disallow_is_error, 'mutation_rules.disallow_is_error'),
  };
  if (r.allow_expression !== undefined) rules.allowExpression = anchoredRegex(r.allow_expression, 'allow_expression');
  if (r.disallow_expression !== undefined) {
    rules.disallowExpression = anchoredRegex(r.disallow_expression, 'disallow_expression');
  }
  return rules;
}

/** A google.protobuf.UInt32Value as YAML writes it (plain number or {value}). */
function uint32Value(v: unknown, where: string, dflt: number): number {
  if (v === undefined || v === null) return dflt;
  const n = Number(isObj(v) ? v.value : v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${where}: expected a non-negative integer`);
  return n;
}

/** type.v3.HttpStatus as config writes it: {code: 500}. */
function httpStatusCode(v: unknown, where: string, dflt: number): number {
  if (v === undefined || v === null) return dflt;
  const code = Number(obj(v, where).code);
  if (!Number.isInteger(code)) throw new Error(`${where}: expected {code: <number>}`);
  return code;
}

export function parseExtProc(name: string, raw: unknown, disabledByDefault = false): ExtProcConfig {
  const c = obj(raw, name);
  const known = new Set([
    'grpc_service', 'failure_mode_allow', 'processing_mode', 'message_timeout', 'max_message_timeout',
    'mutation_rules', 'route_cache_action', 'disable_clear_route_cache', 'disable_immediate_response',
    'allow_mode_override', 'allowed_override_modes', 'status_on_error', 'observability_mode',
    'send_body_without_waiting_for_header_response', 'forward_rules', 'request_attributes', 'response_attributes',
    'metadata_options',
  ]);
  const unknown = Object.keys(c).filter((k) => !known.has(k) && !EXT_PROC_IGNORED_FIELDS.has(k));
  if (unknown.length > 0) throw new Error(`${name}: ext_proc field(s) not supported by the harness: ${unknown.join(', ')}`);
  for (const k of ['observability_mode', 'send_body_without_waiting_for_header_response'] as const) {
    if (bool(c[k], k)) throw new Error(`${name}: ${k}: true is not supported by the harness`);
  }
  for (const k of ['forward_rules', 'request_attributes', 'response_attributes'] as const) {
    if (c[k] !== undefined) throw new Error(`${name}: ${k} is not supported by the harness`);
  }

  const grpc = obj(c.grpc_service, 'grpc_service');
  if (grpc.google_grpc !== undefined) throw new Error(`${name}: grpc_service.google_grpc is not supported`);
  const envoyGrpc = obj(grpc.envoy_grpc, 'grpc_service.envoy_grpc');
  const initialMetadata = parseHeaderValues(grpc.initial_metadata, 'grpc_service.initial_metadata');

  // route_cache_action and the deprecated disable_clear_route_cache are mutually exclusive
  // (config error in Envoy when both are non-default).
  const action = (c.route_cache_action ?? 'DEFAULT') as string;
  if (!['DEFAULT', 'CLEAR', 'RETAIN'].includes(action)) throw new Error(`${name}: bad route_cache_action ${action}`);
  const disableClear = bool(c.disable_clear_route_cache, 'disable_clear_route_cache');
  if (disableClear && action !== 'DEFAULT') {
    throw new Error(`${name}: disable_clear_route_cache and a non-default route_cache_action are mutually exclusive`);
  }

  const config: ExtProcConfig = {
    filterName: name,
    disabledByDefault,
    initialMetadata,
    processingMode: normalizeProcessingMode(c.processing_mode),
    messageTimeoutMs: c.message_timeout === undefined ? 200 : parseDurationMs(c.message_timeout, 'message_timeout'),
    maxMessageTimeoutMs:
      c.max_message_timeout === undefined ? 0 : parseDurationMs(c.max_message_timeout, 'max_message_timeout'),
    failureModeAllow: bool(c.failure_mode_allow, 'failure_mode_allow'),
    mutationRules: parseMutationRules(c.mutation_rules),
    routeCacheAction: disableClear ? 'RETAIN' : (action as RouteCacheAction),
    disableImmediateResponse: bool(c.disable_immediate_response, 'disable_immediate_response'),
    allowModeOverride: bool(c.allow_mode_override, 'allow_mode_override'),
    allowedOverrideModes: list(c.allowed_override_modes, 'allowed_override_modes').map((m, i) =>
      normalizeProcessingMode(m, `allowed_override_modes[${i}]`),
    ),
    statusOnError: httpStatusCode(c.status_on_error, 'status_on_error', 500),
    ...parseMetadataOptions(c.metadata_options, name),
    sendsProtocolConfig: true,
    streamIdleTimeoutMs: 300_000,
  };
  // FULL_DUPLEX_STREAMED needs the trailers (they tell the server the body is complete): Envoy
  // rejects the config otherwise (ext_proc config.cc / FilterConfig processing-mode checks).
  const pm = config.processingMode;
  for (const [body, trailers] of [['request_body_mode', 'request_trailer_mode'], ['response_body_mode', 'response_trailer_mode']] as const) {
    if (pm[body] === 'FULL_DUPLEX_STREAMED' && pm[trailers] !== 'SEND') {
      throw new Error(`${name}: processing_mode.${body} FULL_DUPLEX_STREAMED requires ${trailers}: SEND`);
    }
  }
  // Fail-open is accepted with a FULL_DUPLEX_STREAMED body: config.cc `verifyProcessingModeConfig`
  // refused it in 1.35.0 and the check was reverted (on main and in a 1.35 patch release),
  // because Envoy can fail open up to the point where it sent the first body chunk. What limits it is
  // `Filter::failureModeAllow` (ext_proc.cc): false once a FULL_DUPLEX_STREAMED direction has
  // sent body data, since Envoy keeps no copy of a chunk it handed to the server (the session's
  // `failureModeAllow` models it).
  if (typeof envoyGrpc.cluster_name === 'string') config.grpcCluster = envoyGrpc.cluster_name;
  if (typeof envoyGrpc.authority === 'string') config.grpcAuthority = envoyGrpc.authority;
  return config;
}

/** metadata_options: untyped namespaces only (typed ones and cluster metadata are not imitated). */
function parseMetadataOptions(v: unknown, name: string): { forwardingNamespaces: string[]; receivingNamespaces: string[] } {
  const m = obj(v, `${name}.metadata_options`);
  const unknown = Object.keys(m).filter((k) => k !== 'forwarding_namespaces' && k !== 'receiving_namespaces');
  if (unknown.length > 0) throw new Error(`${name}: metadata_options.${unknown.join(', ')} not supported by the harness`);
  const namespaces = (field: string): string[] => {
    const ns = obj(m[field], `metadata_options.${field}`);
    if (ns.typed !== undefined) throw new Error(`${name}: metadata_options.${field}.typed is not supported by the harness`);
    return list(ns.untyped, `metadata_options.${field}.untyped`).map((s, i) => str(s, `metadata_options.${field}.untyped[${i}]`));
  };
  return { forwardingNamespaces: namespaces('forwarding_namespaces'), receivingNamespaces: namespaces('receiving_namespaces') };
}

/**
 * An ExtProcPerRoute override's metadata_options: only its untyped forwarding namespaces are
 * imitated (they replace the filter's); receiving_namespaces there is accepted and has no effect.
 */
function parseForwardingNamespaces(v: unknown, where: string): string[] | undefined {
  if (v === undefined || v === null) return undefined;
  const mo = obj(v, where);
  const unknown = Object.keys(mo).filter((k) => k !== 'forwarding_namespaces' && k !== 'receiving_namespaces');
  if (unknown.length > 0) throw new Error(`${where}: ${unknown.join(', ')} not supported by the harness`);
  if (mo.forwarding_namespaces === undefined) return undefined;
  const fwd = obj(mo.forwarding_namespaces, `${where}.forwarding_namespaces`);
  if (list(fwd.typed, `${where}.forwarding_namespaces.typed`).length > 0) {
    throw new Error(`${where}: typed forwarding namespaces are not supported by the harness`);
  }
  return list(fwd.untyped, `${where}.forwarding_namespaces.untyped`).map((n, i) => str(n, `${where}.forwarding_namespaces.untyped[${i}]`));
}

function parseHeaderValues(v: unknown, where: string): Array<[string, string]> {
  return list(v, where).map((h, i): [string, string] => {
    const hv = obj(h, `${where}[${i}]`);
    if (hv.raw_value !== undefined) throw new Error(`${where}[${i}]: raw_value is not supported by the harness`);
    const value = String(hv.value ?? '');
    // Envoy evaluates these as substitution-format strings; only literals are imitated.
    if (/%[A-Z_]+[(%]/.test(value)) throw new Error(`${where}[${i}]: format commands in values are not supported by the harness`);
    return [str(hv.key, `${where}[${i}].key`).toLowerCase(), value];
  });
}

/** ExtProcPerRoute: `disabled: true`, or `overrides` with grpc_initial_metadata and metadata_options. */
export function parseExtProcPerRoute(v: unknown, where: string): ExtProcPerRoute {
  const c = obj(v, where);
  if (c['@type'] !== EXT_PROC_PER_ROUTE_TYPE) throw new Error(`${where}: expected @type ${EXT_PROC_PER_ROUTE_TYPE}`);
  if (c.disabled !== undefined && c.overrides !== undefined) throw new Error(`${where}: disabled and overrides are one oneof`);
  if (c.disabled !== undefined) {
    if (!bool(c.disabled, `${where}.disabled`)) throw new Error(`${where}: disabled must be true (PGV const)`);
    return { disabled: true, grpcInitialMetadata: [] };
  }
  const o = obj(c.overrides, `${where}.overrides`);
  const supported = ['grpc_initial_metadata', 'metadata_options', 'processing_mode', 'failure_mode_allow'];
  const unsupported = Object.keys(o).filter((k) => !supported.includes(k));
  if (unsupported.length > 0) throw new Error(`${where}.overrides: ${unsupported.join(', ')} not supported by the harness`);
  const out: ExtProcPerRoute = { disabled: false, grpcInitialMetadata: parseHeaderValues(o.grpc_initial_metadata, `${where}.overrides.grpc_initial_metadata`) };
  if (o.processing_mode !== undefined) out.processingMode = normalizeProcessingMode(o.processing_mode, `${where}.overrides.processing_mode`);
  const fwd = parseForwardingNamespaces(o.metadata_options, `${where}.overrides.metadata_options`);
  if (fwd !== undefined) out.forwardingNamespaces = fwd;
  if (o.failure_mode_allow !== undefined) out.failureModeAllow = bool(o.failure_mode_allow, `${where}.overrides.failure_mode_allow`);
  return out;
}

/** typed_per_filter_config: only the ext_proc filter's entry is imitated; any other is an error. */
function parsePerFilterConfig(v: unknown, where: string, extProcName: string | undefined): ExtProcPerRoute | undefined {
  if (v === undefined || v === null) return undefined;
  const m = obj(v, where);
  let out: ExtProcPerRoute | undefined;
  for (const [key, cfg] of Object.entries(m)) {
    if (key !== extProcName) throw new Error(`${where}: per-route config for ${key} is not supported by the harness`);
    out = parseExtProcPerRoute(cfg, `${where}.${key}`);
  }
  return out;
}

function parseSetMetadataFilter(name: string, raw: unknown): SetMetadataEntry[] {
  const c = obj(raw, name);
  if (c.metadata_namespace !== undefined || c.value !== undefined) {
    throw new Error(`${name}: the deprecated metadata_namespace/value form is not supported by the harness`);
  }
  return list(c.metadata, `${name}.metadata`).map((m, i): SetMetadataEntry => {
    const where = `${name}.metadata[${i}]`;
    const e = obj(m, where);
    if (e.typed_value !== undefined) throw new Error(`${where}: typed_value is not supported by the harness`);
    return {
      namespace: str(e.metadata_namespace, `${where}.metadata_namespace`),
      value: obj(e.value, `${where}.value`),
      allowOverwrite: bool(e.allow_overwrite, `${where}.allow_overwrite`),
    };
  });
}

function parseHeaderMutationFilter(name: string, raw: unknown): RequestMutation[] {
  const c = obj(raw, name);
  const mutations = obj(c.mutations, `${name}.mutations`);
  if (mutations.query_parameter_mutations !== undefined || mutations.parameter_mutations !== undefined) {
    throw new Error(`${name}: query parameter mutations are not supported by the harness`);
  }
  return parseMutationList(mutations.request_mutations, `${name}.request_mutations`);
}

/**
 * HttpConnectionManager.early_header_mutation_extensions: only the header_mutation extension
 * (envoy.http.early_header_mutation.header_mutation) is imitated; its `mutations` are the same
 * config.common.mutation_rules.v3.HeaderMutation list as the header_mutation filter's.
 */
function parseEarlyHeaderMutations(v: unknown): RequestMutation[] {
  return list(v, 'early_header_mutation_extensions').flatMap((e, i) => {
    const where = `early_header_mutation_extensions[${i}]`;
    const ext = obj(e, where);
    const tc = obj(ext.typed_config, `${where}.typed_config`);
    if (tc['@type'] !== EARLY_HEADER_MUTATION_TYPE) {
      throw new Error(`${where}: only ${EARLY_HEADER_MUTATION_TYPE} is supported by the harness (got ${String(tc['@type'])})`);
    }
    const mutations = parseMutationList(tc.mutations, `${where}.mutations`);
    if (mutations.length === 0) throw new Error(`${where}.mutations: at least one mutation (PGV min_items 1)`);
    return mutations;
  });
}

function parseMutationList(v: unknown, at: string): RequestMutation[] {
  return list(v, at).map((m, i): RequestMutation => {
    const where = `${at}[${i}]`;
    const mm = obj(m, where);
    if (mm.remove !== undefined) return { kind: 'remove', name: str(mm.remove, `${where}.remove`).toLowerCase() };
    if (mm.remove_on_match !== undefined) {
      const rom = obj(mm.remove_on_match, `${where}.remove_on_match`);
      return { kind: 'remove_on_match', matcher: parseStringMatcher(rom.key_matcher, `${where}.key_matcher`) };
    }
    if (mm.append !== undefined) {
      const a = obj(mm.append, `${where}.append`);
      const header = obj(a.header, `${where}.append.header`);
      const value = String(header.value ?? '');
      // Values are Envoy substitution-format strings; only literals are imitated.
      if (/%[A-Z_]+[(%]/.test(value)) throw new Error(`${where}: format commands in values are not supported`);
      const action = (a.append_action ?? 'APPEND_IF_EXISTS_OR_ADD') as string;
      if (!['APPEND_IF_EXISTS_OR_ADD', 'ADD_IF_ABSENT', 'OVERWRITE_IF_EXISTS_OR_ADD', 'OVERWRITE_IF_EXISTS'].includes(action)) {
        throw new Error(`${where}: bad append_action ${action}`);
      }
      return {
        kind: 'append',
        name: str(header.key, `${where}.append.header.key`).toLowerCase(),
        value,
        action: action as 'APPEND_IF_EXISTS_OR_ADD',
        keepEmptyValue: bool(a.keep_empty_value, `${where}.keep_empty_value`),
      };
    }
    throw new Error(`${where}: unsupported header mutation ${JSON.stringify(mm)}`);
  });
}

function parseHeaderMatcher(v: unknown, where: string): HeaderMatcher {
  const h = obj(v, where);
  const hm: HeaderMatcher = {
    name: str(h.name, `${where}.name`).toLowerCase(),
    invert: bool(h.invert_match, `${where}.invert_match`),
    treatMissingAsEmpty: bool(h.treat_missing_header_as_empty, `${where}.treat_missing_header_as_empty`),
  };
  if (h.present_match !== undefined) hm.present = bool(h.present_match, `${where}.present_match`);
  else if (h.exact_match !== undefined) hm.string = { kind: 'exact', value: str(h.exact_match, where), ignoreCase: false };
  else if (h.prefix_match !== undefined) hm.string = { kind: 'prefix', value: str(h.prefix_match, where), ignoreCase: false };
  else if (h.suffix_match !== undefined) hm.string = { kind: 'suffix', value: str(h.suffix_match, where), ignoreCase: false };
  else if (h.string_match !== undefined) hm.string = parseStringMatcher(h.string_match, `${where}.string_match`);
  else if (h.safe_regex_match !== undefined) {
    hm.string = { kind: 'regex', value: '', ignoreCase: false, regex: anchoredRegex(h.safe_regex_match, where) };
  } else throw new Error(`${where}: unsupported header matcher ${JSON.stringify(h)}`);
  return hm;
}

function parseRoute(v: unknown, where: string, extProcName: string | undefined): Route {
  const r = obj(v, where);
  const m = obj(r.match, `${where}.match`);
  const match: Route['match'] = {
    caseSensitive: bool(m.case_sensitive, `${where}.match.case_sensitive`, true),
    headers: list(m.headers, `${where}.match.headers`).map((h, i) => parseHeaderMatcher(h, `${where}.match.headers[${i}]`)),
  };
  if (m.prefix !== undefined) match.prefix = str(m.prefix, `${where}.match.prefix`);
  else if (m.path !== undefined) match.path = str(m.path, `${where}.match.path`);
  else if (m.safe_regex !== undefined) match.regex = anchoredRegex(m.safe_regex, `${where}.match.safe_regex`);
  else throw new Error(`${where}.match: need prefix, path or safe_regex`);
  if (m.query_parameters !== undefined || m.grpc !== undefined || m.runtime_fraction !== undefined) {
    throw new Error(`${where}.match: only prefix/path/safe_regex + headers are supported by the harness`);
  }

  let action: RouteAction;
  if (r.route !== undefined) {
    const ra = obj(r.route, `${where}.route`);
    const nf = (ra.cluster_not_found_response_code ?? 'SERVICE_UNAVAILABLE') as string;
    const clusterNotFoundStatus = CLUSTER_NOT_FOUND_CODES[nf];
    if (clusterNotFoundStatus === undefined) throw new Error(`${where}: bad cluster_not_found_response_code ${nf}`);
    if (ra.cluster !== undefined) action = { kind: 'cluster', cluster: str(ra.cluster, where), clusterNotFoundStatus };
    else if (ra.cluster_header !== undefined) {
      action = { kind: 'cluster_header', header: str(ra.cluster_header, where).toLowerCase(), clusterNotFoundStatus };
    } else throw new Error(`${where}.route: only cluster and cluster_header are supported by the harness`);
  } else if (r.direct_response !== undefined) {
    const d = obj(r.direct_response, `${where}.direct_response`);
    const body = obj(d.body, `${where}.direct_response.body`);
    action = { kind: 'direct_response', status: Number(d.status), body: String(body.inline_string ?? '') };
  } else {
    throw new Error(`${where}: only route and direct_response actions are supported by the harness`);
  }
  const route: Route = { match, action };
  if (typeof r.name === 'string') route.name = r.name;
  const perRoute = parsePerFilterConfig(r.typed_per_filter_config, `${where}.typed_per_filter_config`, extProcName);
  if (perRoute) route.extProcPerRoute = perRoute;
  return route;
}

function parseRouteConfig(v: unknown, extProcName: string | undefined): RouteConfig {
  const rc = obj(v, 'route_config');
  const rcOut: RouteConfig = {
    virtualHosts: list(rc.virtual_hosts, 'route_config.virtual_hosts').map((vh, i): VirtualHost => {
      const where = `virtual_hosts[${i}]`;
      const h = obj(vh, where);
      const out: VirtualHost = {
        name: String(h.name ?? where),
        domains: list(h.domains, `${where}.domains`).map((d) => str(d, `${where}.domains`).toLowerCase()),
        routes: list(h.routes, `${where}.routes`).map((r, j) => parseRoute(r, `${where}.routes[${j}]`, extProcName)),
      };
      const perRoute = parsePerFilterConfig(h.typed_per_filter_config, `${where}.typed_per_filter_config`, extProcName);
      if (perRoute) out.extProcPerRoute = perRoute;
      return out;
    }),
  };
  if (typeof rc.name === 'string') rcOut.name = rc.name;
  return rcOut;
}

function filterType(f: Obj): string | undefined {
  const tc = f.typed_config;
  return isObj(tc) && typeof tc['@type'] === 'string' ? tc['@type'] : undefined;
}

/** Parses a bootstrap document (already YAML-decoded). */
export function parseEnvoyBootstrap(doc: unknown): ParsedEnvoyConfig {
  const root = obj(doc, 'bootstrap');
  const sr = obj(root.static_resources, 'static_resources');
  const listener = list(sr.listeners, 'static_resources.listeners')[0];
  if (listener === undefined) throw new Error('bootstrap has no listener');
  const l = obj(listener, 'listener');
  const chain = obj(list(l.filter_chains, 'filter_chains')[0], 'filter_chains[0]');
  const hcmFilter = list(chain.filters, 'filter_chains[0].filters')
    .map((f) => obj(f, 'network filter'))
    .find((f) => filterType(f) === HCM_TYPE || f.name === 'envoy.filters.network.http_connection_manager');
  if (!hcmFilter) throw new Error('first listener has no http_connection_manager');
  const hcm = obj(hcmFilter.typed_config, 'http_connection_manager');
  if (hcm.rds !== undefined) throw new Error('RDS is not supported by the harness; inline route_config only');

  let extProc: ExtProcConfig | undefined;
  const httpFilters = list(hcm.http_filters, 'http_filters').map((raw, i): HttpFilter => {
    const f = obj(raw, `http_filters[${i}]`);
    const name = str(f.name, `http_filters[${i}].name`);
    const type = filterType(f);
    const isExtProc = type === EXT_PROC_TYPE || (type === undefined && name === 'envoy.filters.http.ext_proc');
    // HttpFilter.disabled (source/common/http/filter_chain_helper.h, FilterChainHelper::processFilter
    // keeps `disabled_by_default`): modelled for ext_proc (request-run.ts); another filter disabled
    // by default is refused rather than run on every route.
    if (f.disabled === true && !isExtProc) throw new Error(`http_filters[${i}] (${name}): disabled filters other than ext_proc are not supported by the harness`);
    if (isExtProc) {
      // One ext_proc server per harness: a second ext_proc filter would need its own stream.
      if (extProc) throw new Error('more than one ext_proc filter is not supported by the harness');
      extProc = parseExtProc(name, f.typed_config, f.disabled === true);
      return { kind: 'ext_proc', name };
    }
    if (type === HEADER_MUTATION_TYPE || (type === undefined && name === 'envoy.filters.http.header_mutation')) {
      return { kind: 'header_mutation', name, requestMutations: parseHeaderMutationFilter(name, f.typed_config) };
    }
    if (type === ROUTER_TYPE || (type === undefined && name === 'envoy.filters.http.router')) return { kind: 'router', name };
    if (type === SET_METADATA_TYPE) return { kind: 'set_metadata', name, entries: parseSetMetadataFilter(name, f.typed_config) };
    return type === undefined ? { kind: 'other', name } : { kind: 'other', name, typeUrl: type };
  });

  const clusterDefs = list(sr.clusters, 'static_resources.clusters').map((c, i) => obj(c, `clusters[${i}]`));
  const clusters = new Set(clusterDefs.map((c, i) => str(c.name, `clusters[${i}].name`)));
  const originalDstHeaders = new Map<string, string>();
  const originalDstClusters = new Map<string, OriginalDstLb>();
  for (const c of clusterDefs) {
    if (c.type !== 'ORIGINAL_DST') continue;
    const where = `${String(c.name)}.original_dst_lb_config`;
    const lb = obj(c.original_dst_lb_config, where);
    const unknown = Object.keys(lb).filter((k) => !['use_http_header', 'http_header_name', 'metadata_key', 'upstream_port_override'].includes(k));
    if (unknown.length > 0) throw new Error(`${where}: ${unknown.join(', ')} not supported by the harness`);
    const out: OriginalDstLb = {};
    if (bool(lb.use_http_header, 'use_http_header')) {
      // An empty http_header_name means the default header (OriginalDstCluster's constructor).
      out.header = typeof lb.http_header_name === 'string' && lb.http_header_name !== '' ? lb.http_header_name.toLowerCase() : 'x-envoy-original-dst-host';
      originalDstHeaders.set(String(c.name), out.header);
    } else if (typeof lb.http_header_name === 'string' && lb.http_header_name !== '') {
      // OriginalDstClusterFactory::createClusterImpl rejects this combination.
      throw new Error(`${where}: http_header_name is set but use_http_header is false`);
    }
    if (lb.metadata_key !== undefined) {
      const mk = obj(lb.metadata_key, `${where}.metadata_key`);
      const path = list(mk.path, `${where}.metadata_key.path`).map((seg, i) => str(obj(seg, `${where}.metadata_key.path[${i}]`).key, `${where}.metadata_key.path[${i}].key`));
      if (path.length === 0) throw new Error(`${where}.metadata_key.path: at least one segment (PGV min_items 1)`);
      out.metadataKey = { key: str(mk.key, `${where}.metadata_key.key`), path };
    }
    if (lb.upstream_port_override !== undefined) out.portOverride = uint32Value(lb.upstream_port_override, `${where}.upstream_port_override`, 0);
    originalDstClusters.set(String(c.name), out);
  }

  return {
    listenerName: String(l.name ?? 'listener_0'),
    bufferLimitBytes: uint32Value(l.per_connection_buffer_limit_bytes, 'per_connection_buffer_limit_bytes', 1024 * 1024),
    envoyHeaderPrefix: typeof root.header_prefix === 'string' ? root.header_prefix.toLowerCase() : 'x-envoy',
    httpFilters,
    extProc,
    routeConfig: parseRouteConfig(hcm.route_config, extProc?.filterName),
    clusters,
    originalDstHeaders,
    originalDstClusters,
    earlyHeaderMutations: parseEarlyHeaderMutations(hcm.early_header_mutation_extensions),
    requestHeaderLimits: {
      maxHeadersKb: uint32Value(hcm.max_request_headers_kb, 'max_request_headers_kb', 60),
      maxHeadersCount: uint32Value(obj(hcm.common_http_protocol_options, 'common_http_protocol_options').max_headers_count, 'common_http_protocol_options.max_headers_count', 100),
    },
  };
}

export function parseEnvoyConfig(yamlText: string): ParsedEnvoyConfig {
  return parseEnvoyBootstrap(parseYaml(yamlText));
}

export function loadEnvoyConfig(file: string): ParsedEnvoyConfig {
  return parseEnvoyConfig(readFileSync(file, 'utf8'));
}

/** A copy of `config` with ext_proc settings patched (e.g. fail-closed, a shorter timeout). */
export function withExtProc(config: ParsedEnvoyConfig, patch: Partial<ExtProcConfig>): ParsedEnvoyConfig {
  if (!config.extProc) throw new Error('config has no ext_proc filter');
  return { ...config, extProc: { ...config.extProc, ...patch } };
}
