/**
 * The Envoy that Istio and Envoy Gateway would run with kvgate's recipes applied, as bootstraps the
 * harness can load. Neither control plane runs here, so their rendering is written out by hand,
 * reduced to what routing needs: one listener whose HCM holds the route table the recipe's
 * routing objects produce, then the recipe's own Envoy patches applied the way the control plane
 * applies them (Istio EnvoyFilter MERGE / INSERT_BEFORE, its default circuit breakers; Envoy
 * Gateway JSONPatch, ClientTrafficPolicy early request headers and buffer limit, the ext_proc
 * backend's circuit breaker). What matters for a spoofed routing header, a body's size or the
 * ext_proc streams allowed is exact: the values are the files' own. The rest (names, the base
 * route) is a model.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';

type Obj = Record<string, unknown>;

const ENVOY_DIR = path.resolve(import.meta.dirname, '../../envoy');
const HCM_TYPE = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const ROUTER = { name: 'envoy.filters.http.router', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' } };
const EXT_PROC_TYPE = 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor';
const EARLY_TYPE = 'type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation';

function docs(file: string): Obj[] {
  return parseAllDocuments(readFileSync(path.join(ENVOY_DIR, file), 'utf8')).map((d) => d.toJS() as Obj);
}

function ofKind(all: Obj[], kind: string): Obj {
  const d = all.find((x) => x.kind === kind);
  if (!d) throw new Error(`no ${kind}`);
  return d;
}

const o = (v: unknown): Obj => v as Obj;
const a = (v: unknown): unknown[] => v as unknown[];

/** proto Merge as Istio applies a MERGE patch: messages merge field by field, repeated fields append. */
function protoMerge(base: Obj, patch: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const cur = out[k];
    if (Array.isArray(cur) && Array.isArray(v)) out[k] = [...cur, ...v];
    else if (cur && typeof cur === 'object' && !Array.isArray(cur) && v && typeof v === 'object' && !Array.isArray(v)) out[k] = protoMerge(cur as Obj, v as Obj);
    else out[k] = v;
  }
  return out;
}

/** RouteAction's cluster_specifier oneof: setting one member clears the others. */
const CLUSTER_SPECIFIER = ['cluster', 'cluster_header', 'weighted_clusters', 'cluster_specifier_plugin', 'inline_cluster_specifier_plugin'];

/** `listener`: fields the control plane or the recipe sets on the listener (its buffer limit). */
function bootstrap(hcm: Obj, clusters: Obj[], listener: Obj = {}): Obj {
  return {
    static_resources: {
      listeners: [{
        name: 'gateway',
        address: { socket_address: { address: '0.0.0.0', port_value: 8080 } },
        ...listener,
        filter_chains: [{ filters: [{ name: 'envoy.filters.network.http_connection_manager', typed_config: hcm }] }],
      }],
      clusters,
    },
  };
}

/** A Kubernetes resource.Quantity as Envoy Gateway's sizes take it ("8Mi", "32768", "1G"). */
export function quantityBytes(q: unknown): number {
  const m = /^(\d+)([KMGTPE]i|[kMGTPE])?$/.exec(String(q));
  if (!m) throw new Error(`not a size quantity: ${String(q)}`);
  const unit = m[2];
  if (unit === undefined) return Number(m[1]);
  const power = 'kMGTPE'.indexOf(unit[0] === 'K' ? 'k' : unit[0]!) + 1;
  return Number(m[1]) * (unit.endsWith('i') ? 1024 : 1000) ** power;
}

const staticCluster = (name: string, extra: Obj = {}): Obj => ({ name, type: 'STRICT_DNS', connect_timeout: '1s', ...extra });

/** istiod's default thresholds on every cluster it generates (getDefaultCircuitBreakerThresholds: MaxUint32). */
const ISTIO_CIRCUIT_BREAKERS = { thresholds: [{ max_connections: 4294967295, max_pending_requests: 4294967295, max_requests: 4294967295, max_retries: 4294967295 }] };

/** Istio's per-pod worker clusters that the Istio recipe's kvgate config names. */
export const ISTIO_WORKERS = ['vllm-0', 'vllm-1', 'vllm-2'].map((p) => ({ id: p, cluster: `outbound|8000||${p}.llm.svc.cluster.local` }));

/**
 * The Istio ingress gateway with envoy/istio/kvgate.yaml applied: istiod renders the
 * VirtualService's http routes in order (a header `regex` match becomes a safe_regex string
 * match; each destination its outbound|port||host cluster), then the EnvoyFilter's patches.
 */
export function istioGateway(): Obj {
  const all = docs('istio/kvgate.yaml');
  const vs = ofKind(all, 'VirtualService');
  const spec = o(vs.spec);
  const routes = a(spec.http).map((raw) => {
    const r = o(raw);
    const dest = o(o(a(r.route)[0]).destination);
    const headers = Object.entries(o(o(a(r.match ?? [{}])[0]).headers ?? {})).map(([name, m]) => ({ name, string_match: { safe_regex: { regex: String(o(m).regex) } } }));
    return {
      name: r.name,
      match: { prefix: '/', ...(headers.length > 0 ? { headers } : {}) },
      route: { cluster: `outbound|${String(o(dest.port).number)}||${String(dest.host)}`, timeout: r.timeout },
    };
  });
  let hcmFilter: Obj = {
    name: 'envoy.filters.network.http_connection_manager',
    typed_config: {
      '@type': HCM_TYPE,
      stat_prefix: 'outbound_0.0.0.0_8080',
      route_config: { name: 'http.8080', virtual_hosts: [{ name: 'llm.example.com:80', domains: a(spec.hosts), routes }] },
      http_filters: [ROUTER],
    },
  };
  // Envoy's default listener buffer (istiod sets none on gateway listeners).
  let listener: Obj = {};
  for (const raw of a(o(ofKind(all, 'EnvoyFilter').spec).configPatches)) {
    const p = o(raw);
    const patch = o(p.patch);
    const value = o(patch.value);
    const hcm = o(hcmFilter.typed_config);
    if (p.applyTo === 'LISTENER' && patch.operation === 'MERGE') {
      listener = protoMerge(listener, value);
    } else if (p.applyTo === 'NETWORK_FILTER' && patch.operation === 'MERGE') {
      hcmFilter = protoMerge(hcmFilter, value);
    } else if (p.applyTo === 'HTTP_FILTER' && patch.operation === 'INSERT_BEFORE') {
      const filters = a(hcm.http_filters);
      const at = filters.findIndex((f) => o(f).name === 'envoy.filters.http.router');
      filters.splice(at, 0, value);
    } else if (p.applyTo === 'HTTP_ROUTE' && patch.operation === 'MERGE') {
      const name = o(o(o(o(p.match).routeConfiguration).vhost).route).name;
      for (const vh of a(o(hcm.route_config).virtual_hosts)) {
        for (const r of a(o(vh).routes)) {
          const route = o(r);
          if (route.name !== name) continue;
          // Istio's MERGE is a proto merge of the value into the route: the route action's
          // cluster specifier is a oneof (a new one replaces the old), messages merge field by field.
          for (const [k, v] of Object.entries(value)) {
            if (k === 'route') {
              const action = { ...o(route.route) };
              const set = o(v);
              if (Object.keys(set).some((key) => CLUSTER_SPECIFIER.includes(key))) for (const key of CLUSTER_SPECIFIER) delete action[key];
              route.route = { ...action, ...set };
            } else route[k] = protoMerge(o(route[k] ?? {}), o(v));
          }
        }
      }
    } else {
      throw new Error(`istio patch ${String(p.applyTo)} ${String(patch.operation)} is not modelled`);
    }
  }
  const clusters = [
    'outbound|8000||vllm.llm.svc.cluster.local',
    ...ISTIO_WORKERS.map((w) => w.cluster),
    'outbound|9002||kvgate.kvgate.svc.cluster.local',
  ].map((name) => staticCluster(name, { circuit_breakers: ISTIO_CIRCUIT_BREAKERS }));
  return bootstrap(o(hcmFilter.typed_config), clusters, listener);
}

/** The HTTPRoute backend's cluster as Envoy Gateway names it. */
export const EG_ROUTE_CLUSTER = 'httproute/llm/llm/rule/0';

/** RFC 6902 add/replace on a JSON pointer (what an EnvoyPatchPolicy JSONPatch does). */
function jsonPatch(target: Obj, op: string, pointer: string, value: unknown): void {
  const parts = pointer.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  const last = parts.pop();
  if (last === undefined) throw new Error('empty pointer');
  let at: unknown = target;
  for (const p of parts) at = Array.isArray(at) ? at[Number(p)] : o(at)[p];
  if (Array.isArray(at)) {
    const i = last === '-' ? at.length : Number(last);
    if (op === 'add') at.splice(i, 0, value);
    else at[i] = value;
  } else o(at)[last] = value;
}

/**
 * Envoy Gateway with envoy/envoy-gateway/kvgate.yaml applied. The translator's output, reduced:
 * the HTTPRoute's rule as one route to its backend's cluster; the EnvoyExtensionPolicy as an
 * ext_proc filter (Envoy Gateway adds it disabled and enables it on the HTTPRoute's routes; here
 * it is simply on, which is the same for these routes); ClientTrafficPolicy early request
 * headers as the header_mutation early header mutation extension; then the EnvoyPatchPolicy's
 * JSONPatches on the cluster list and the route configuration. `backend` is the HTTPRoute
 * backend's endpoints (ip:port).
 */
export function envoyGateway(backend: string[]): Obj {
  const all = docs('envoy-gateway/kvgate.yaml');
  const ext = o(a(o(ofKind(all, 'EnvoyExtensionPolicy').spec).extProc)[0]);
  const mode = o(ext.processingMode);
  const md = o(ext.metadata);
  const body = (b: unknown): string => ({ Buffered: 'BUFFERED', Streamed: 'STREAMED', BufferedPartial: 'BUFFERED_PARTIAL', FullDuplexStreamed: 'FULL_DUPLEX_STREAMED' })[String(b)] ?? 'NONE';
  const timeout = /^(\d+)ms$/.exec(String(ext.messageTimeout));
  const circuitBreaker = o(ext.backendSettings ?? {}).circuitBreaker as Obj | undefined;
  const extProc = {
    name: 'envoy.filters.http.ext_proc/envoyextensionpolicy/llm/kvgate/extproc/0',
    typed_config: {
      '@type': EXT_PROC_TYPE,
      grpc_service: { envoy_grpc: { cluster_name: 'envoyextensionpolicy/llm/kvgate/0', authority: 'kvgate.kvgate:9002' }, timeout: '10s' },
      failure_mode_allow: ext.failOpen === true,
      message_timeout: timeout ? `${Number(timeout[1]) / 1000}s` : '0.2s',
      processing_mode: {
        request_header_mode: mode.request ? 'SEND' : 'SKIP',
        response_header_mode: mode.response ? 'SEND' : 'SKIP',
        request_body_mode: body(o(mode.request ?? {}).body),
        response_body_mode: body(o(mode.response ?? {}).body),
      },
      metadata_options: {
        forwarding_namespaces: { untyped: a(md.accessibleNamespaces) },
        receiving_namespaces: { untyped: a(md.writableNamespaces) },
      },
    },
  };
  const clientTraffic = o(ofKind(all, 'ClientTrafficPolicy').spec);
  const early = o(o(clientTraffic.headers).earlyRequestHeaders);
  // ClientTrafficPolicy connection.bufferLimit is the listener's buffer limit, 32 KiB when unset
  // (Envoy Gateway's tcpListenerPerConnectionBufferLimitBytes).
  const bufferLimit = o(clientTraffic.connection ?? {}).bufferLimit;
  const hcm: Obj = {
    '@type': HCM_TYPE,
    stat_prefix: 'http-10080',
    early_header_mutation_extensions: [{
      name: 'envoy.http.early_header_mutation.header_mutation',
      typed_config: { '@type': EARLY_TYPE, mutations: a(early.remove).map((h) => ({ remove: h })) },
    }],
    route_config: {
      name: 'llm/llm-gateway/http',
      virtual_hosts: [{
        name: 'llm/llm-gateway/http/*',
        domains: ['*'],
        routes: [{ name: 'httproute/llm/llm/rule/0/match/0/*', match: { prefix: '/' }, route: { cluster: EG_ROUTE_CLUSTER, timeout: '0s' } }],
      }],
    },
    http_filters: [extProc, ROUTER],
  };
  const clusters: Obj[] = [
    {
      name: EG_ROUTE_CLUSTER,
      type: 'STATIC',
      connect_timeout: '1s',
      load_assignment: {
        cluster_name: EG_ROUTE_CLUSTER,
        endpoints: [{ lb_endpoints: backend.map((b) => {
          const [address, port] = b.split(':');
          return { endpoint: { address: { socket_address: { address, port_value: Number(port) } } } };
        }) }],
      },
    },
    // backendSettings.circuitBreaker as Envoy Gateway translates it (unset: Envoy's defaults).
    staticCluster('envoyextensionpolicy/llm/kvgate/0', circuitBreaker === undefined ? {} : {
      circuit_breakers: { thresholds: [{
        ...(circuitBreaker.maxConnections !== undefined ? { max_connections: circuitBreaker.maxConnections } : {}),
        ...(circuitBreaker.maxPendingRequests !== undefined ? { max_pending_requests: circuitBreaker.maxPendingRequests } : {}),
        ...(circuitBreaker.maxParallelRequests !== undefined ? { max_requests: circuitBreaker.maxParallelRequests } : {}),
      }] },
    }),
  ];
  for (const raw of a(o(ofKind(all, 'EnvoyPatchPolicy').spec).jsonPatches)) {
    const p = o(raw);
    const op = o(p.operation);
    if (p.type === 'type.googleapis.com/envoy.config.cluster.v3.Cluster' && op.op === 'add' && op.path === '') clusters.push(o(op.value));
    else if (p.type === 'type.googleapis.com/envoy.config.route.v3.RouteConfiguration' && p.name === o(hcm.route_config).name) {
      jsonPatch(o(hcm.route_config), String(op.op), String(op.path), op.value);
    } else throw new Error(`JSONPatch on ${String(p.type)} ${String(p.name)} is not modelled`);
  }
  return bootstrap(hcm, clusters, { per_connection_buffer_limit_bytes: bufferLimit === undefined ? 32768 : quantityBytes(bufferLimit) });
}
