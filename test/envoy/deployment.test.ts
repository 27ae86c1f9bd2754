/**
 * The deployment files fit Envoy's schema and each other. Bootstraps (envoy.yaml files) are
 * checked by schema.test.ts; here: every Istio EnvoyFilter patch value against the Envoy type its
 * applyTo implies, the Envoy Gateway patch values, the Kubernetes manifests and the compose demo
 * (the Dockerfile: test/cli/production.test.ts). Nothing here runs Envoy, Istio, Kubernetes or
 * Docker (none exist on this machine).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { before, describe, test } from 'node:test';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { parseConfig, loadConfigFile } from '../../src/config/load.js';
import { buildEnvoySchemaImage, validateEnvoyText } from '../../scripts/envoy-schema.js';
import { validateEnvoyPgvText } from '../../scripts/envoy-pgv.js';
import { loadEnvoyConfig, parseDurationMs, parseEnvoyBootstrap } from '../harness/envoy-config.js';
import { envoyGateway, istioGateway, quantityBytes } from '../helpers/deployments.js';
import { parseKvgate } from '../helpers/cli-parse.js';
import { buildCli } from '../../src/cli/cli.js';
import { parseStoreUrl } from '../../src/state/redis-connection.js';
import { SHUTDOWN_FLUSH_MS, tracingRequested } from '../../src/telemetry/tracing.js';
import { DEFAULTS } from '../../src/config/defaults.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const ENVOY_DIR = path.join(ROOT, 'envoy');

type Obj = Record<string, unknown>;
const obj = (v: unknown, where: string): Obj => {
  assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), `${where} is a mapping`);
  return v as Obj;
};
const arr = (v: unknown, where: string): unknown[] => {
  assert.ok(Array.isArray(v), `${where} is a list`);
  return v;
};

function docs(file: string): Obj[] {
  return parseAllDocuments(readFileSync(file, 'utf8')).map((d, i) => {
    assert.equal(d.errors.length, 0, `${file}#${i}: ${d.errors.join('; ')}`);
    return obj(d.toJS(), `${file}#${i}`);
  });
}

const ofKind = (all: Obj[], kind: string): Obj[] => all.filter((d) => d.kind === kind);

/**
 * Istio's EnvoyFilter applyTo → the Envoy message a patch value is (istio networking/v1alpha3
 * envoy_filter.proto).
 */
const APPLY_TO_TYPE: Record<string, string> = {
  HTTP_FILTER: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter',
  NETWORK_FILTER: 'envoy.config.listener.v3.Filter',
  CLUSTER: 'envoy.config.cluster.v3.Cluster',
  LISTENER: 'envoy.config.listener.v3.Listener',
  ROUTE_CONFIGURATION: 'envoy.config.route.v3.RouteConfiguration',
  VIRTUAL_HOST: 'envoy.config.route.v3.VirtualHost',
  HTTP_ROUTE: 'envoy.config.route.v3.Route',
};

/** Validates a patch value: schema always; PGV rules too unless the value is a partial (MERGE). */
async function validateValue(value: unknown, type: string, label: string, partial: boolean): Promise<void> {
  const text = stringify(value);
  const schema = await validateEnvoyText(text, { type, label });
  assert.ok(schema.ok, schema.message);
  if (!partial) {
    const rules = await validateEnvoyPgvText(text, { type, label });
    assert.ok(rules.ok, rules.message);
  }
}

/** A JSON-pointer patch `value` placed at `pointer` in an otherwise empty message. */
function atPointer(pointer: string, value: unknown): unknown {
  const parts = pointer.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  let out: unknown = value;
  for (let i = parts.length - 1; i >= 0; i--) {
    const p = parts[i]!;
    out = /^\d+$/.test(p) ? [...Array<unknown>(Number(p)).fill({}), out] : { [p]: out };
  }
  return out;
}

/** Every pod template (Deployment, StatefulSet, DaemonSet, Job) in `all`, with its owner's name. */
function podTemplates(all: Obj[]): Array<{ name: string; pod: Obj; labels: Obj }> {
  const out: Array<{ name: string; pod: Obj; labels: Obj }> = [];
  for (const d of all) {
    const template = (d.spec as Obj | undefined)?.template as Obj | undefined;
    if (!template?.spec) continue;
    const meta = (template.metadata as Obj | undefined) ?? {};
    out.push({ name: `${String(d.kind)}/${String(obj(d.metadata, 'metadata').name)}`, pod: obj(template.spec, 'pod spec'), labels: (meta.labels as Obj | undefined) ?? {} });
  }
  return out;
}

/** A container's securityContext field, else the pod's (the container's wins, as in Kubernetes). */
function effective(pod: Obj, c: Obj, field: string): unknown {
  const own = (c.securityContext as Obj | undefined)?.[field];
  return own !== undefined ? own : (pod.securityContext as Obj | undefined)?.[field];
}

const containersOf = (pod: Obj): Obj[] => [...((pod.initContainers as Obj[] | undefined) ?? []), ...((pod.containers as Obj[] | undefined) ?? [])];

describe('deployment files', { concurrency: true }, () => {
  before(async () => {
    await buildEnvoySchemaImage();
  });

  const k8s = () => readdirSync(path.join(ENVOY_DIR, 'kubernetes')).flatMap((f) => docs(path.join(ENVOY_DIR, 'kubernetes', f)));

  test('Istio: every EnvoyFilter patch value is the Envoy type its applyTo implies', async () => {
    const all = docs(path.join(ENVOY_DIR, 'istio', 'kvgate.yaml'));
    const [filter] = ofKind(all, 'EnvoyFilter');
    assert.ok(filter, "filter");
    const patches = arr(obj(filter.spec, 'spec').configPatches, 'configPatches');
    assert.ok(patches.length >= 3, "patches.length >= 3");
    for (const [i, raw] of patches.entries()) {
      const p = obj(raw, `configPatches[${i}]`);
      const type = APPLY_TO_TYPE[String(p.applyTo)];
      assert.ok(type, `configPatches[${i}].applyTo ${String(p.applyTo)} has a known Envoy type`);
      const patch = obj(p.patch, 'patch');
      await validateValue(patch.value, type, `istio configPatches[${i}]`, patch.operation === 'MERGE');
    }
    // The ext_proc cluster is Istio's name for the kvgate Service's grpc port.
    const svc = ofKind(k8s(), 'Service').find((s) => obj(s.metadata, 'metadata').name === 'kvgate')!;
    const grpcPort = arr(obj(svc.spec, 'spec').ports, 'ports').map((p) => obj(p, 'port')).find((p) => p.name === 'grpc')!;
    assert.match(stringify(patches), new RegExp(`outbound\\|${String(grpcPort.port)}\\|\\|kvgate\\.kvgate\\.svc\\.cluster\\.local`));
    // The gateway's HCM strips the client's routing header before routing (an HTTP filter would
    // run after the route was picked on it).
    const early = patches.map((p) => obj(p, 'patch')).filter((p) => p.applyTo === 'NETWORK_FILTER');
    assert.equal(early.length, 1);
    const hcmValue = obj(obj(obj(early[0]!.patch, 'patch').value, 'value').typed_config, 'typed_config');
    const earlyExt = obj(arr(hcmValue.early_header_mutation_extensions, 'early_header_mutation_extensions')[0], 'extension');
    assert.deepEqual(obj(earlyExt.typed_config, 'typed_config').mutations, [{ remove: 'x-kvgate-cluster' }]);
    const rules = await validateEnvoyPgvText(stringify(earlyExt), { type: 'envoy.config.core.v3.TypedExtensionConfig', label: 'istio early strip' });
    assert.ok(rules.ok, rules.message);
    assert.ok(!patches.some((p) => JSON.stringify(p).includes('filters.http.header_mutation')), 'no strip by an HTTP filter');
    // The patched route exists in the VirtualService, and the header it matches is kvgate's.
    const vs = ofKind(all, 'VirtualService')[0]!;
    const routes = arr(obj(vs.spec, 'spec').http, 'http').map((r) => obj(r, 'route'));
    assert.ok(routes.some((r) => r.name === 'llm-affine' && JSON.stringify(r.match).includes('x-kvgate-cluster')), "routes.some((r) => r.name === 'llm-affine' && JSON.stringify(r.match).includes('x-kvgate-cluster'))");
  });

  test('Istio: a typo inside a patch value is caught', async () => {
    const all = docs(path.join(ENVOY_DIR, 'istio', 'kvgate.yaml'));
    const patch = obj(obj(arr(obj(ofKind(all, 'EnvoyFilter')[0]!.spec, 'spec').configPatches, 'p')[1], 'p').patch, 'patch');
    const text = stringify(patch.value).replace('request_body_mode: BUFFERED', 'request_body_mode: BUFFERD');
    const r = await validateEnvoyText(text, { type: APPLY_TO_TYPE.HTTP_FILTER!, label: 'typo' });
    assert.equal(r.ok, false);
    assert.match(r.message, /unknown enum value "BUFFERD"/);
  });

  test('Envoy Gateway: the patch policy’s Envoy values fit Envoy’s schema; the policy targets kvgate', async () => {
    const all = docs(path.join(ENVOY_DIR, 'envoy-gateway', 'kvgate.yaml'));
    const [patchPolicy] = ofKind(all, 'EnvoyPatchPolicy');
    for (const [i, raw] of arr(obj(patchPolicy!.spec, 'spec').jsonPatches, 'jsonPatches').entries()) {
      const p = obj(raw, `jsonPatches[${i}]`);
      const type = String(p.type).replace('type.googleapis.com/', '');
      const op = obj(p.operation, 'operation');
      const whole = op.op === 'add' && op.path === '';
      await validateValue(whole ? op.value : atPointer(String(op.path), op.value), type, `envoy-gateway jsonPatches[${i}]`, !whole);
    }
    const [ext] = ofKind(all, 'EnvoyExtensionPolicy');
    const proc = obj(arr(obj(ext!.spec, 'spec').extProc, 'extProc')[0], 'extProc[0]');
    assert.deepEqual(arr(proc.backendRefs, 'backendRefs'), [{ name: 'kvgate', namespace: 'kvgate', port: 9002 }]);
    // A backendRef into another namespace needs a ReferenceGrant there (Envoy Gateway's
    // validateExtServiceBackendReference), or the policy is refused and kvgate never called.
    const policyNs = obj(ext!.metadata, 'metadata').namespace;
    for (const ref of arr(proc.backendRefs, 'backendRefs').map((r, i) => obj(r, `backendRefs[${i}]`))) {
      if (ref.namespace === undefined || ref.namespace === policyNs) continue;
      const granted = ofKind(all, 'ReferenceGrant').some((g) => {
        const spec = obj(g.spec, 'ReferenceGrant spec');
        return (
          obj(g.metadata, 'metadata').namespace === ref.namespace &&
          arr(spec.from, 'from').some((f) => { const x = obj(f, 'from'); return x.group === 'gateway.envoyproxy.io' && x.kind === 'EnvoyExtensionPolicy' && x.namespace === policyNs; }) &&
          arr(spec.to, 'to').some((t) => { const x = obj(t, 'to'); return x.group === '' && x.kind === 'Service' && (x.name === undefined || x.name === ref.name); })
        );
      });
      assert.ok(granted, `no ReferenceGrant in ${String(ref.namespace)} lets EnvoyExtensionPolicy in ${String(policyNs)} reach Service ${String(ref.name)}`);
    }
    assert.deepEqual(obj(proc.processingMode, 'processingMode'), { request: { body: 'Buffered' }, response: {} });
    assert.deepEqual(obj(proc.metadata, 'metadata').writableNamespaces, ['envoy.lb']);
    // The client's destination header goes before routing, on the Gateway the patches target;
    // the ORIGINAL_DST cluster reads kvgate's metadata, not the header.
    const [ctp] = ofKind(all, 'ClientTrafficPolicy');
    const ctpSpec = obj(ctp!.spec, 'spec');
    assert.deepEqual(obj(obj(ctpSpec.headers, 'headers').earlyRequestHeaders, 'earlyRequestHeaders').remove, ['x-gateway-destination-endpoint']);
    const gatewayRef = obj(obj(patchPolicy!.spec, 'spec').targetRef, 'targetRef');
    assert.ok(arr(ctpSpec.targetRefs, 'targetRefs').some((t) => obj(t, 'ref').kind === 'Gateway' && obj(t, 'ref').name === gatewayRef.name));
    const cluster = arr(obj(patchPolicy!.spec, 'spec').jsonPatches, 'jsonPatches').map((p) => obj(obj(p, 'p').operation, 'op').value as Obj)
      .find((v) => v?.type === 'ORIGINAL_DST');
    assert.deepEqual(obj(cluster?.original_dst_lb_config, 'lb').metadata_key, { key: 'envoy.lb', path: [{ key: 'x-gateway-destination-endpoint' }] });
    assert.equal(obj(cluster?.original_dst_lb_config, 'lb').use_http_header, undefined);
  });

  test('every recipe sets up ext_proc alike: fail open, 0.5 s per message, headers and buffered body, response headers', () => {
    // What kvgate needs of the filter, the same under every proxy: the request headers and the
    // whole body in one message (session fields and the prompt prefix are in the body), the
    // response headers (they release the in-flight count), no response body at filter level;
    // fail open, so a gate that is down or slow costs affinity and not service; and one message
    // timeout (Envoy Gateway's own default is 200 ms, shorter than the others'). No recipe lets
    // kvgate override the mode (it never sends mode_override) or ignores its replies.
    // Gateway API's Duration (GEP-2257): e.g. 1h, 30s, 500ms, 1m30s.
    const gatewayApiDurationMs = (d: string) => {
      const m = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$/.exec(d);
      assert.ok(m && d !== '', `a Gateway API duration: ${d}`);
      return ((Number(m[1] ?? 0) * 60 + Number(m[2] ?? 0)) * 60 + Number(m[3] ?? 0)) * 1000 + Number(m[4] ?? 0);
    };
    type Settings = { failOpen: unknown; timeoutMs: number; modes: Record<string, unknown>; modeOverride: unknown; observability: unknown };
    const seen = new Map<string, Settings>();
    const fromEnvoy = (where: string, tc: Obj) => {
      const pm = obj(tc.processing_mode, `${where} processing_mode`);
      seen.set(where, {
        failOpen: tc.failure_mode_allow,
        timeoutMs: parseDurationMs(tc.message_timeout, `${where} message_timeout`),
        modes: { request_header_mode: pm.request_header_mode ?? 'SEND', request_body_mode: pm.request_body_mode ?? 'NONE', response_header_mode: pm.response_header_mode ?? 'SEND', response_body_mode: pm.response_body_mode ?? 'NONE' },
        modeOverride: tc.allow_mode_override ?? false,
        observability: tc.observability_mode ?? false,
      });
    };
    const walk = (v: unknown, where: string, visit: (o: Obj) => void): void => {
      if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${where}[${i}]`, visit));
      else if (typeof v === 'object' && v !== null) {
        visit(v as Obj);
        for (const [k, x] of Object.entries(v)) walk(x, `${where}.${k}`, visit);
      }
    };
    for (const f of ['envoy.yaml', 'endpoint-picker/envoy.yaml', 'pools/envoy.yaml', 'demo/envoy.yaml']) {
      walk(parse(readFileSync(path.join(ENVOY_DIR, f), 'utf8')), f, (o) => {
        if (o.name === 'envoy.filters.http.ext_proc' && typeof o.typed_config === 'object') fromEnvoy(f, obj(o.typed_config, f));
      });
    }
    for (const d of docs(path.join(ENVOY_DIR, 'istio', 'kvgate.yaml'))) {
      walk(d, 'istio', (o) => {
        if (o.name === 'envoy.filters.http.ext_proc' && typeof o.typed_config === 'object') fromEnvoy('istio/kvgate.yaml', obj(o.typed_config, 'istio'));
      });
    }
    const eep = obj(ofKind(docs(path.join(ENVOY_DIR, 'envoy-gateway', 'kvgate.yaml')), 'EnvoyExtensionPolicy')[0], 'EnvoyExtensionPolicy');
    for (const [i, raw] of arr(obj(eep.spec, 'spec').extProc, 'extProc').entries()) {
      // Envoy Gateway's api/v1alpha1 ExtProc: request/response present = their headers are sent;
      // body Buffered = BUFFERED; no body = NONE.
      const e = obj(raw, 'extProc');
      const pm = obj(e.processingMode ?? {}, 'processingMode');
      const side = (s: unknown) => (s === undefined ? undefined : obj(s, 'side'));
      const req = side(pm.request);
      const res = side(pm.response);
      const body = (s: Obj | undefined) => ({ Buffered: 'BUFFERED', Streamed: 'STREAMED', BufferedPartial: 'BUFFERED_PARTIAL', FullDuplexStreamed: 'FULL_DUPLEX_STREAMED' })[String(s?.body)] ?? 'NONE';
      seen.set(`envoy-gateway/kvgate.yaml extProc[${i}]`, {
        failOpen: e.failOpen,
        timeoutMs: e.messageTimeout === undefined ? 200 : gatewayApiDurationMs(String(e.messageTimeout)),
        modes: { request_header_mode: req ? 'SEND' : 'SKIP', request_body_mode: body(req), response_header_mode: res ? 'SEND' : 'SKIP', response_body_mode: body(res) },
        modeOverride: pm.allowModeOverride ?? false,
        observability: e.shadowMode ?? false,
      });
    }
    assert.ok(seen.size >= 6, `every recipe's ext_proc found: ${[...seen.keys()].join(', ')}`);
    for (const [where, st] of seen) {
      assert.equal(st.failOpen, true, `${where}: fails open`);
      assert.equal(st.timeoutMs, 500, `${where}: message timeout`);
      assert.deepEqual(st.modes, { request_header_mode: 'SEND', request_body_mode: 'BUFFERED', response_header_mode: 'SEND', response_body_mode: 'NONE' }, `${where}: processing mode`);
      assert.equal(st.modeOverride, false, `${where}: allow_mode_override`);
      assert.equal(st.observability, false, `${where}: kvgate's replies are applied`);
    }
  });

  test('every recipe buffers a body as long as the kvgate it calls accepts', () => {
    // BUFFERED ext_proc holds the body in the listener's buffer: past it the proxy answers 413
    // before kvgate sees the request, so a limit below kvgate's limits.max_body_bytes turns away
    // prompts kvgate would route. Envoy's default is 1 MiB; Envoy Gateway sets 32 KiB.
    const cm = ofKind(k8s(), 'ConfigMap')[0]!;
    const inCluster = parseConfig(parse(String(obj(cm.data, 'data')['kvgate.yaml']))).limits.max_body_bytes;
    const kv = (dir: string) => loadConfigFile(path.join(ENVOY_DIR, dir, 'kvgate.yaml')).limits.max_body_bytes;
    const cases: Array<[string, number, number]> = [
      ...['', 'pools', 'endpoint-picker', 'demo'].map((dir): [string, number, number] => [`envoy/${dir}${dir ? '/' : ''}envoy.yaml`, loadEnvoyConfig(path.join(ENVOY_DIR, dir, 'envoy.yaml')).bufferLimitBytes, kv(dir)]),
      // The gateways as test/helpers/deployments.ts renders them from the recipes; they call the
      // kvgate of envoy/kubernetes (Envoy Gateway's, in endpoint-picker mode, is configured like
      // envoy/endpoint-picker/kvgate.yaml).
      ['envoy/istio/kvgate.yaml', parseEnvoyBootstrap(istioGateway()).bufferLimitBytes, inCluster],
      ['envoy/envoy-gateway/kvgate.yaml', parseEnvoyBootstrap(envoyGateway(['10.0.0.1:8000'])).bufferLimitBytes, Math.max(inCluster, kv('endpoint-picker'))],
    ];
    for (const [where, envoyLimit, kvgateLimit] of cases) {
      assert.ok(envoyLimit >= kvgateLimit, `${where}: the proxy buffers ${envoyLimit} bytes, kvgate accepts ${kvgateLimit}`);
    }
  });

  test("every Envoy config lets kvgate's ext_proc cluster carry more than Envoy's default 1,024 streams", () => {
    // An ext_proc stream lives until the response headers (through queueing and prefill), and
    // Envoy's default circuit breaker holds a cluster to 1,024 requests and 1,024 pending: past
    // them a busy Envoy sends its requests on without kvgate. Istio's clusters have no such limit
    // (istiod sets MaxUint32), Envoy Gateway's get Envoy's default unless backendSettings says.
    const cases: Array<[string, Obj]> = [
      ...['', 'pools', 'endpoint-picker', 'demo'].map((dir): [string, Obj] => [`envoy/${dir}${dir ? '/' : ''}envoy.yaml`, obj(parse(readFileSync(path.join(ENVOY_DIR, dir, 'envoy.yaml'), 'utf8')), 'bootstrap')]),
      ['envoy/istio/kvgate.yaml', istioGateway()],
      ['envoy/envoy-gateway/kvgate.yaml', envoyGateway(['10.0.0.1:8000'])],
    ];
    const limits = (where: string, cluster: Obj | undefined) => {
      assert.ok(cluster, `${where}: the ext_proc cluster exists`);
      const t = ((cluster.circuit_breakers as Obj | undefined)?.thresholds as Obj[] | undefined)?.find((x) => (x.priority ?? 'DEFAULT') === 'DEFAULT') ?? {};
      for (const k of ['max_requests', 'max_pending_requests']) assert.ok(Number(t[k] ?? 1024) >= 10000, `${where}: ${String(cluster.name)} ${k} ${String(t[k] ?? '1024 (default)')}`);
    };
    for (const [where, bootstrap] of cases) {
      const clusterName = parseEnvoyBootstrap(bootstrap).extProc?.grpcCluster;
      assert.ok(clusterName, `${where}: an ext_proc filter`);
      const clusters = arr(obj(bootstrap.static_resources, 'static_resources').clusters, 'clusters').map((c) => obj(c, 'cluster'));
      limits(where, clusters.find((c) => c.name === clusterName));
    }
    // The mTLS drop-in for envoy/envoy.yaml's cluster keeps the limits.
    limits('envoy/kvgate-ext-proc-mtls-cluster.yaml', obj(parse(readFileSync(path.join(ENVOY_DIR, 'kvgate-ext-proc-mtls-cluster.yaml'), 'utf8')), 'cluster'));
  });

  test('Kubernetes: the embedded config is valid, and ports, probes and store agree', () => {
    const all = k8s();
    const cm = ofKind(all, 'ConfigMap')[0]!;
    const config = parseConfig(parse(String(obj(cm.data, 'data')['kvgate.yaml'])));
    // With a single Redis every replica loses the store at once: not ready would take them all
    // out of Envoy's path together for the whole restart, where local state can still route.
    const redisReplicas = Number(obj(ofKind(all, 'Deployment').find((d) => obj(d.metadata, 'm').name === 'kvgate-redis')!.spec, 'spec').replicas ?? 1);
    if (redisReplicas === 1) assert.equal(config.store.ready_when_unreachable, true, 'one Redis: replicas stay ready without it');
    const dep = ofKind(all, 'Deployment').find((d) => obj(d.metadata, 'm').name === 'kvgate')!;
    const pod = obj(obj(obj(dep.spec, 'spec').template, 'template').spec, 'pod spec');
    const c = obj(arr(pod.containers, 'containers')[0], 'container');
    const args = arr(c.args, 'args').map(String);
    const flag = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=').slice(1).join('=');
    const ports = Object.fromEntries(arr(c.ports, 'ports').map((p) => [obj(p, 'p').name, obj(p, 'p').containerPort]));
    assert.equal(Number(flag('grpc-port')), ports['grpc']);
    assert.equal(Number(flag('admin-port')), ports['http-admin']);
    assert.equal(flag('admin-host'), '0.0.0.0', 'Prometheus must reach /metrics');
    assert.deepEqual(obj(c.readinessProbe, 'readiness').grpc, { port: ports['grpc'], service: 'readiness' });
    assert.deepEqual(obj(c.livenessProbe, 'liveness').grpc, { port: ports['grpc'], service: 'liveness' });
    // The kubelet's gRPC probes speak plaintext without a client certificate, so a gate serving
    // TLS needs HTTP probes: the manifest shows them, on the admin port and its health paths.
    const manifestText = readFileSync(path.join(ENVOY_DIR, 'kubernetes', 'kvgate.yaml'), 'utf8');
    const adminSrc = readFileSync(path.join(ROOT, 'src', 'admin', 'server.ts'), 'utf8');
    const tlsProbes = [...manifestText.matchAll(/^\s*#\s+((readiness|liveness)Probe: \{.*\})\s*$/gm)].map((m) => [m[2]!, obj(parse(m[1]!), 'probe')] as const);
    assert.deepEqual(tlsProbes.map(([kind]) => kind).sort(), ['liveness', 'readiness'], 'the manifest shows HTTP probes for a TLS gate');
    for (const [kind, probe] of tlsProbes) {
      const get = obj(obj(probe[`${kind}Probe`], 'probe').httpGet, 'httpGet');
      assert.equal(get.port, ports['http-admin'], `${kind}: the admin port`);
      assert.equal(get.path, kind === 'readiness' ? '/readyz' : '/healthz', `${kind}: its health path`);
      assert.ok(adminSrc.includes(`'${String(get.path)}': ['GET']`), `the admin API serves GET ${String(get.path)}`);
    }
    // A gate busy with large bodies may take over the default 1 s to answer; liveness restarts.
    assert.ok(Number(obj(c.livenessProbe, 'liveness').timeoutSeconds) >= 3, 'liveness allows a busy event loop 3 s');
    // Tracing is opt-in: no exporter runs (and logs export failures) against a collector the
    // cluster may not have; the commented line shows where to turn it on.
    const literalEnv = Object.fromEntries(arr(c.env, 'env').map((e) => obj(e, 'env')).filter((e) => typeof e.value === 'string').map((e) => [String(e.name), String(e.value)]));
    assert.equal(tracingRequested(literalEnv).enabled, false, 'tracing is off until an endpoint is set');
    assert.match(readFileSync(path.join(ENVOY_DIR, 'kubernetes', 'kvgate.yaml'), 'utf8'), /#\s*- \{ name: OTEL_EXPORTER_OTLP_ENDPOINT/, 'the manifest shows how to turn it on');
    // Endpoints drop a terminating pod while it is being stopped, so kvgate waits in preStop
    // before SIGTERM starts its drain; the grace period counts from the start of preStop.
    const preStop = obj(obj(c.lifecycle, 'lifecycle').preStop, 'preStop');
    const sleepS = preStop.sleep !== undefined
      ? Number(obj(preStop.sleep, 'sleep').seconds)
      : Number(/^sleep (\d+)$/.exec(arr(obj(preStop.exec, 'exec').command, 'command').join(' '))?.[1]);
    assert.ok(sleepS >= 5, `preStop waits for the endpoint removal to reach Envoy (${sleepS} s)`);
    const grace = Number(pod.terminationGracePeriodSeconds);
    assert.ok(grace >= sleepS + Number(flag('shutdown-grace-s')) + 5, `grace ${grace} s >= preStop ${sleepS} + drain ${flag('shutdown-grace-s')} + 5 s`);
    // The whole stop, as kvgate runs it after SIGTERM: the delay (flag or default), the
    // connections' shutdown notice and the quiet wait before the grace starts counting, the grace,
    // and the bounded span flush; a second more for Redis and the admin server to close. Past the
    // period the kubelet sends SIGKILL and the last streams and spans are lost.
    const delayS = Number(flag('shutdown-delay-s') ?? DEFAULTS.shutdownDelayS);
    const stopS = delayS + (DEFAULTS.goawayNoticeMs + DEFAULTS.shutdownQuietMs) / 1000 + Number(flag('shutdown-grace-s') ?? DEFAULTS.shutdownGraceS) + SHUTDOWN_FLUSH_MS / 1000 + 1;
    assert.ok(grace >= sleepS + stopS, `grace ${grace} s >= preStop ${sleepS} s + kvgate's stop ${stopS} s (delay, notice, quiet, drain, span flush, close)`);
    // An Istio sidecar is stopped when preStop starts and drains for 5 s by default, cutting
    // kvgate's connections mid-drain: the pod asks it to last through preStop and the drain.
    const meta = obj(obj(obj(dep.spec, 'spec').template, 'template').metadata, 'metadata');
    const proxyConfig = JSON.parse(String(obj(meta.annotations, 'annotations')['proxy.istio.io/config'])) as Obj;
    const drainS = parseDurationMs(proxyConfig.terminationDrainDuration, 'terminationDrainDuration') / 1000;
    const connectionsS = sleepS + delayS + (DEFAULTS.goawayNoticeMs + DEFAULTS.shutdownQuietMs) / 1000 + Number(flag('shutdown-grace-s') ?? DEFAULTS.shutdownGraceS);
    assert.ok(drainS >= connectionsS, `Istio's sidecar drains ${drainS} s, kvgate's connections need ${connectionsS} s (preStop, delay, notice, quiet, drain)`);
    const redisSvc = ofKind(all, 'Service').find((s) => obj(s.metadata, 'm').name === 'kvgate-redis');
    assert.ok(redisSvc, "redisSvc");
    // The store URL carries Redis's password from the Secret Redis requires it from: through the
    // environment (KVGATE_STORE), so no flag may override it and the manifest holds no password.
    assert.equal(flag('store'), undefined, '--store would override KVGATE_STORE');
    const env = (container: Obj) => new Map(arr(container.env, 'env').map((e) => [String(obj(e, 'env').name), obj(e, 'env')]));
    const secretRef = (e: Obj | undefined) => obj(obj(obj(e?.valueFrom, 'valueFrom').secretKeyRef, 'secretKeyRef'), 'ref');
    const kvEnv = env(c);
    const store = String(kvEnv.get('KVGATE_STORE')?.value);
    const passwordVar = /\$\(([A-Z_]+)\)/.exec(store)?.[1];
    assert.ok(passwordVar, `KVGATE_STORE takes the password from a variable: ${store}`);
    const kvRef = secretRef(kvEnv.get(passwordVar));
    // The admin API's state changes are behind a token taken from a Secret (optional: the pod starts without it).
    const adminRef = secretRef(kvEnv.get('KVGATE_ADMIN_TOKEN'));
    assert.equal(adminRef.optional, true);
    assert.ok(typeof adminRef.name === 'string' && typeof adminRef.key === 'string', "typeof adminRef.name === 'string' && typeof adminRef.key === 'string'");
    const endpoint = parseStoreUrl(store.replace(`$(${passwordVar})`, '0123abcd'));
    assert.deepEqual(endpoint.nodes, [{ host: 'kvgate-redis', port: Number(obj(arr(obj(redisSvc.spec, 's').ports, 'p')[0], 'p').port) }]);
    assert.equal(endpoint.password, '0123abcd');
    const redisDep = ofKind(all, 'Deployment').find((d) => obj(d.metadata, 'm').name === 'kvgate-redis')!;
    const rc = obj(arr(obj(obj(obj(redisDep.spec, 'spec').template, 't').spec, 'pod').containers, 'containers')[0], 'redis');
    const redisArgs = arr(rc.args, 'args').map(String);
    const requirepass = redisArgs[redisArgs.indexOf('--requirepass') + 1];
    const redisVar = /^\$\(([A-Z_]+)\)$/.exec(String(requirepass))?.[1];
    assert.ok(redisVar, `redis-server --requirepass from a variable (${String(requirepass)})`);
    assert.deepEqual(secretRef(env(rc).get(redisVar)), kvRef, 'Redis and kvgate read the same Secret key');
    const secret = ofKind(all, 'Secret').find((s) => obj(s.metadata, 'm').name === kvRef.name);
    assert.ok(secret, `Secret ${String(kvRef.name)} is shipped (a placeholder)`);
    const value = String(obj(secret.stringData, 'stringData')[String(kvRef.key)]);
    assert.match(value, /^[A-Za-z0-9._~-]+$/, 'the placeholder is URL-safe, as the password must be');
    // The readiness probe authenticates (redis-cli reads REDISCLI_AUTH) and wants PONG.
    assert.equal(redisVar, 'REDISCLI_AUTH');
    assert.match(arr(obj(obj(rc.readinessProbe, 'probe').exec, 'exec').command, 'command').join(' '), /redis-cli ping \| grep -q PONG/);
    const svc = ofKind(all, 'Service').find((s) => obj(s.metadata, 'm').name === 'kvgate')!;
    for (const p of arr(obj(svc.spec, 's').ports, 'ports').map((x) => obj(x, 'port'))) assert.ok(String(p.targetPort) in ports, `targetPort ${String(p.targetPort)}`);
    const grpc = arr(obj(svc.spec, 's').ports, 'ports').map((x) => obj(x, 'port')).find((p) => p.name === 'grpc')!;
    assert.equal(grpc.appProtocol, 'grpc', 'HTTP/2 for meshes and gateways');
    // The admin API can drain workers (PUT /workers/<id>/state): no Service publishes it.
    // Prometheus scrapes pods at their own IPs (the annotations), which needs no Service.
    for (const s of ofKind(all, 'Service')) {
      for (const p of arr(obj(s.spec, 's').ports, 'ports').map((x) => obj(x, 'port'))) {
        assert.ok(p.targetPort !== 'http-admin' && Number(p.targetPort ?? p.port) !== ports['http-admin'], `Service ${String(obj(s.metadata, 'm').name)} publishes the admin port`);
      }
    }
    const annotations = obj(obj(obj(obj(dep.spec, 'spec').template, 'template').metadata, 'metadata').annotations, 'annotations');
    assert.equal(Number(annotations['prometheus.io/port']), ports['http-admin'], 'Prometheus scrapes the admin port on the pod');
  });

  test('Kubernetes, compose and the Dockerfile run kvgate with flags and KVGATE_* variables kvgate serve has', async () => {
    // An unknown flag stops kvgate at start; an unknown or misspelt KVGATE_* variable is silently
    // ignored (commander reads only the variables its options name), so a setting the manifest
    // means to make would not be made.
    const program = await buildCli(['node', 'kvgate', 'serve']);
    const serve = program.commands.find((c) => c.name() === 'serve')!;
    const known = new Set(serve.options.map((o) => o.envVar).filter((v): v is string => typeof v === 'string'));
    const checkEnv = (names: string[], where: string) => {
      for (const n of names.filter((v) => v.startsWith('KVGATE_'))) assert.ok(known.has(n), `${where}: ${n} is no variable of kvgate serve`);
    };
    let kvgateContainers = 0;
    for (const { name, pod } of podTemplates(k8s())) {
      for (const raw of arr(pod.containers, `${name} containers`)) {
        const c = obj(raw, `${name} container`);
        if (!String(c.image).startsWith('kvgate:')) continue;
        kvgateContainers++;
        const parsed = await parseKvgate(arr(c.args, `${name} args`).map(String));
        assert.equal(parsed.command, 'serve', `${name} runs kvgate serve`);
        checkEnv(arr(c.env ?? [], `${name} env`).map((e) => String(obj(e, 'env').name)), name);
      }
    }
    assert.ok(kvgateContainers > 0, 'the manifests run a kvgate container');
    // The image is this release's, and the README's Kubernetes steps build and push that tag.
    const version = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    const images = podTemplates(k8s()).flatMap(({ name, pod }) => arr(pod.containers, `${name} containers`).map((c) => String(obj(c, 'container').image))).filter((i) => i.startsWith('kvgate:'));
    for (const image of images) assert.equal(image, `kvgate:${version}`, "the manifest runs this release's image");
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const k8sSection = readme.slice(readme.indexOf('\n### Kubernetes\n'));
    assert.match(k8sSection, new RegExp(`docker build -t \\S+/kvgate:${version.replace(/\./g, '\\.')} \\.`), 'the Kubernetes steps build the image the manifest names');
    assert.match(k8sSection, new RegExp(`docker push \\S+/kvgate:${version.replace(/\./g, '\\.')}`), 'and push it');
    const compose = obj(parse(readFileSync(path.join(ENVOY_DIR, 'demo', 'compose.yaml'), 'utf8')), 'compose');
    for (const [name, raw] of Object.entries(obj(compose.services, 'services'))) {
      const env = obj(raw, name).environment;
      checkEnv(Array.isArray(env) ? env.map((e) => String(e).split('=')[0]!) : Object.keys(obj(env ?? {}, `${name} environment`)), `compose ${name}`);
    }
    // The image's default command: ENTRYPOINT node bin/kvgate.js, CMD its arguments.
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const cmd = /^CMD\s+(\[.*\])\s*$/m.exec(dockerfile)?.[1];
    assert.ok(cmd, 'the Dockerfile has an exec-form CMD');
    assert.equal((await parseKvgate(JSON.parse(cmd) as string[])).command, 'serve');
    checkEnv([...dockerfile.matchAll(/^ENV\s+(\w+)=/gm)].map((m) => m[1]!), 'Dockerfile');
  });

  test('Kubernetes: the manifests create the namespace the recipes call kvgate in, enforcing "restricted"', () => {
    // `kubectl apply -n kvgate -f envoy/kubernetes/` fails on a missing namespace; the Namespace's
    // file sorts first so it exists before the objects that go in it (kubectl reads a directory in
    // name order).
    const dir = path.join(ENVOY_DIR, 'kubernetes');
    const files = readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort();
    const nsDocs = docs(path.join(dir, files[0]!));
    assert.deepEqual(nsDocs.map((d) => d.kind), ['Namespace'], `${files[0]} (first in name order) holds the Namespace alone`);
    const name = obj(nsDocs[0]!.metadata, 'metadata').name;
    for (const f of files.slice(1)) assert.ok(!docs(path.join(dir, f)).some((d) => d.kind === 'Namespace'), `${f}: one Namespace, first`);
    // The namespace Istio's ext_proc cluster and Envoy Gateway's backendRef name.
    assert.match(readFileSync(path.join(ENVOY_DIR, 'istio', 'kvgate.yaml'), 'utf8'), new RegExp(`outbound\\|9002\\|\\|kvgate\\.${String(name)}\\.svc\\.cluster\\.local`));
    const ext = obj(ofKind(docs(path.join(ENVOY_DIR, 'envoy-gateway', 'kvgate.yaml')), 'EnvoyExtensionPolicy')[0], 'policy');
    assert.equal(obj(arr(obj(arr(obj(ext.spec, 'spec').extProc, 'extProc')[0], 'extProc').backendRefs, 'backendRefs')[0], 'ref').namespace, name);
    // Pod Security admission enforces the level the pods are checked against below.
    assert.equal(obj(obj(nsDocs[0]!.metadata, 'metadata').labels, 'labels')['pod-security.kubernetes.io/enforce'], 'restricted');
  });

  test('Kubernetes: a container that must run as non-root names a numeric, non-zero user', () => {
    // The kubelet checks runAsNonRoot against a uid. With no runAsUser it takes the image's USER,
    // and a name there (the node image's `node`) cannot be checked: the container is refused
    // ("image has non-numeric user (node), cannot verify user is non-root").
    const templates = podTemplates(k8s());
    assert.ok(templates.length >= 2, 'kvgate and Redis');
    let checked = 0;
    for (const { name, pod } of templates) {
      for (const c of containersOf(pod)) {
        if (effective(pod, c, 'runAsNonRoot') !== true) continue;
        const uid = effective(pod, c, 'runAsUser');
        assert.ok(Number.isInteger(uid) && (uid as number) > 0, `${name} ${String(c.name)}: runAsNonRoot with runAsUser ${String(uid)}`);
        checked++;
      }
    }
    assert.ok(checked > 0, "checked > 0");
  });

  test('Kubernetes: kvgate survives a node, a drain and a rollout (PDB, spread, surge)', () => {
    const all = k8s();
    const dep = ofKind(all, 'Deployment').find((d) => obj(d.metadata, 'm').name === 'kvgate')!;
    const spec = obj(dep.spec, 'spec');
    const labels = obj(obj(obj(spec.template, 'template').metadata, 'metadata').labels, 'labels');
    const selects = (sel: unknown) => Object.entries(obj(obj(sel, 'selector').matchLabels, 'matchLabels')).every(([k, v]) => labels[k] === v);
    const replicas = Number(spec.replicas);
    assert.ok(replicas >= 2, "replicas >= 2");
    // Drains take one replica at a time, and only the Deployment's pods count.
    const pdbs = ofKind(all, 'PodDisruptionBudget').filter((p) => selects(obj(p.spec, 'spec').selector));
    assert.equal(pdbs.length, 1, "a PodDisruptionBudget selects kvgate's pods");
    const pdb = obj(pdbs[0]!.spec, 'spec');
    assert.ok(Number(pdb.maxUnavailable) >= 1 && Number(pdb.maxUnavailable) < replicas, `maxUnavailable ${String(pdb.maxUnavailable)}`);
    assert.equal(pdb.unhealthyPodEvictionPolicy, 'AlwaysAllow', 'a not-ready replica never blocks a drain');
    // Replicas on different nodes (hard) and zones (soft); the constraints count kvgate's pods.
    const spread = arr(obj(obj(spec.template, 'template').spec, 'pod').topologySpreadConstraints, 'topologySpreadConstraints').map((t) => obj(t, 'constraint'));
    for (const t of spread) assert.ok(selects(t.labelSelector), `${String(t.topologyKey)} counts kvgate's pods`);
    const host = spread.find((t) => t.topologyKey === 'kubernetes.io/hostname');
    assert.equal(host?.whenUnsatisfiable, 'DoNotSchedule');
    assert.equal(host?.nodeTaintsPolicy, 'Honor', 'tainted or cordoned nodes are not empty domains that block scheduling');
    assert.equal(spread.find((t) => t.topologyKey === 'topology.kubernetes.io/zone')?.whenUnsatisfiable, 'ScheduleAnyway');
    // A rollout adds a pod before removing one.
    assert.deepEqual(obj(spec.strategy, 'strategy'), { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
  });

  test('Kubernetes: Redis is one pinned pod with the CPU and memory kvgate needs of it', () => {
    const redisDep = ofKind(k8s(), 'Deployment').find((d) => obj(d.metadata, 'm').name === 'kvgate-redis')!;
    const spec = obj(redisDep.spec, 'spec');
    // Two Redis pods behind one Service (a rolling update) would split kvgate's replicas' state.
    assert.equal(spec.replicas, 1);
    assert.equal(obj(spec.strategy, 'strategy').type, 'Recreate');
    const c = obj(arr(obj(obj(spec.template, 'template').spec, 'pod').containers, 'containers')[0], 'redis');
    assert.match(String(c.image), /^redis:\d+\.\d+\.\d+(-[a-z0-9.]+)?$/, `a release, not a moving tag: ${String(c.image)}`);
    const args = arr(c.args, 'args').map(String);
    // Redis sizes: k/m/g are powers of 1000, kb/mb/gb of 1024 (redis.conf).
    const size = /^(\d+)(k|kb|m|mb|g|gb)?$/i.exec(args[args.indexOf('--maxmemory') + 1]!);
    assert.ok(size, 'Redis has a maxmemory');
    const unit = (size[2] ?? '').toLowerCase();
    const maxmemory = Number(size[1]) * (unit === '' ? 1 : (unit.endsWith('b') ? 1024 : 1000) ** (' kmg'.indexOf(unit[0]!)));
    const resources = obj(c.resources, 'resources');
    const requests = obj(resources.requests, 'requests');
    const limits = obj(resources.limits, 'limits');
    assert.equal(requests.memory, limits.memory, 'memory request = limit');
    assert.ok(quantityBytes(limits.memory) >= 1.2 * maxmemory, `memory ${String(limits.memory)} >= 1.2 x maxmemory ${maxmemory}`);
    // BENCHMARKS.md: 80-235 µs of Redis CPU per decision; two replicas need half a core to most of one.
    const cpu = String(requests.cpu);
    const cores = cpu.endsWith('m') ? Number(cpu.slice(0, -1)) / 1000 : Number(cpu);
    assert.ok(cores >= 0.5, `Redis CPU request ${cpu}`);
  });

  test('Kubernetes: every pod meets Pod Security "restricted", on a read-only root without a token', () => {
    // The "restricted" level of the Pod Security Standards (what a namespace labelled
    // pod-security.kubernetes.io/enforce=restricted admits), plus two hardenings it does not ask for.
    const VOLUMES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret'];
    const templates = podTemplates(k8s());
    assert.ok(templates.length >= 2, 'kvgate and Redis');
    for (const { name, pod } of templates) {
      for (const f of ['hostNetwork', 'hostPID', 'hostIPC']) assert.notEqual(pod[f], true, `${name}: ${f}`);
      for (const v of (pod.volumes as Obj[] | undefined) ?? []) {
        const kind = Object.keys(v).filter((k) => k !== 'name');
        assert.ok(kind.length === 1 && VOLUMES.includes(kind[0]!), `${name}: volume ${String(v.name)} is ${kind.join(',')}`);
      }
      assert.equal(pod.automountServiceAccountToken, false, `${name}: no service account token`);
      for (const c of containersOf(pod)) {
        const where = `${name} ${String(c.name)}`;
        const sc = (c.securityContext as Obj | undefined) ?? {};
        assert.notEqual(sc.privileged, true, `${where}: privileged`);
        assert.equal(sc.allowPrivilegeEscalation, false, `${where}: allowPrivilegeEscalation false`);
        const caps = (sc.capabilities as Obj | undefined) ?? {};
        assert.ok(((caps.drop as string[] | undefined) ?? []).includes('ALL'), `${where}: drops ALL capabilities`);
        for (const add of (caps.add as string[] | undefined) ?? []) assert.equal(add, 'NET_BIND_SERVICE', `${where}: adds ${add}`);
        assert.equal(effective(pod, c, 'runAsNonRoot'), true, `${where}: runAsNonRoot`);
        assert.notEqual(effective(pod, c, 'runAsUser'), 0, `${where}: runAsUser 0`);
        const seccomp = effective(pod, c, 'seccompProfile') as Obj | undefined;
        assert.ok(seccomp?.type === 'RuntimeDefault' || seccomp?.type === 'Localhost', `${where}: seccompProfile ${JSON.stringify(seccomp)}`);
        for (const p of (c.ports as Obj[] | undefined) ?? []) assert.equal(p.hostPort, undefined, `${where}: hostPort`);
        assert.equal(sc.readOnlyRootFilesystem, true, `${where}: read-only root filesystem`);
        // Memory requests = limits: a pod over its request is evicted first under memory pressure.
        const resources = obj(c.resources, `${where} resources`);
        assert.equal(obj(resources.requests, 'requests').memory, obj(resources.limits, 'limits').memory, `${where}: memory request = limit`);
      }
    }
  });

  test('Kubernetes: NetworkPolicies admit only the gateways to ext_proc, monitoring to admin, kvgate to Redis', () => {
    const all = k8s();
    const policies = ofKind(all, 'NetworkPolicy');
    const templates = podTemplates(all);
    const labelsOf = (name: string) => templates.find((t) => t.name === `Deployment/${name}`)!.labels;
    const selects = (sel: unknown, labels: Obj) => Object.entries(obj(obj(sel, 'selector').matchLabels, 'matchLabels')).every(([k, v]) => labels[k] === v);
    const policyFor = (name: string) => {
      const found = policies.filter((p) => selects(obj(p.spec, 'spec').podSelector, labelsOf(name)));
      assert.equal(found.length, 1, `one NetworkPolicy selects ${name}'s pods`);
      const spec = obj(found[0]!.spec, 'spec');
      assert.ok(arr(spec.policyTypes, 'policyTypes').includes('Ingress'), `${name}: an Ingress policy`);
      // A rule without ports admits every port, one without peers every peer, an empty selector
      // every namespace or pod: none of these here.
      return arr(spec.ingress, 'ingress').map((r, i) => {
        const rule = obj(r, `${name} ingress[${i}]`);
        const ports = arr(rule.ports, `${name} ingress[${i}].ports`).map((p) => Number(obj(p, 'port').port));
        const from = arr(rule.from, `${name} ingress[${i}].from`).map((f) => obj(f, 'peer'));
        assert.ok(ports.length > 0 && from.length > 0, `${name} ingress[${i}] names ports and peers`);
        for (const peer of from) {
          assert.equal(peer.ipBlock, undefined, `${name} ingress[${i}]: no ipBlock`);
          for (const k of ['namespaceSelector', 'podSelector']) {
            if (peer[k] !== undefined) assert.ok(Object.keys(obj(obj(peer[k], k).matchLabels, 'matchLabels')).length > 0, `${name} ingress[${i}]: an empty ${k} admits all`);
          }
        }
        return { ports, from };
      });
    };
    const dep = ofKind(all, 'Deployment').find((d) => obj(d.metadata, 'm').name === 'kvgate')!;
    const c = obj(arr(obj(obj(obj(dep.spec, 'spec').template, 't').spec, 'pod').containers, 'containers')[0], 'container');
    const port = Object.fromEntries(arr(c.ports, 'ports').map((p) => [obj(p, 'p').name, Number(obj(p, 'p').containerPort)]));
    const ns = (peer: Obj) => (peer.namespaceSelector as Obj | undefined)?.matchLabels as Obj | undefined;

    const kvgate = policyFor('kvgate');
    // The admin API (it can drain workers) from the monitoring namespace only.
    const admin = kvgate.filter((r) => r.ports.includes(port['http-admin']!)).flatMap((r) => r.from);
    assert.ok(admin.length > 0, 'Prometheus can scrape');
    for (const peer of admin) assert.equal(ns(peer)?.['kubernetes.io/metadata.name'], 'monitoring', `admin port from ${JSON.stringify(peer)}`);
    // ext_proc from gateway pods (a pod selector in a named namespace), the recipes' gateways among them.
    const grpc = kvgate.filter((r) => r.ports.includes(port['grpc']!)).flatMap((r) => r.from);
    for (const peer of grpc) {
      assert.ok(ns(peer)?.['kubernetes.io/metadata.name'] && peer.podSelector, `ext_proc from gateway pods in a named namespace: ${JSON.stringify(peer)}`);
    }
    const istio = obj(ofKind(docs(path.join(ENVOY_DIR, 'istio', 'kvgate.yaml')), 'EnvoyFilter')[0], 'EnvoyFilter');
    const istioLabels = obj(obj(obj(istio.spec, 'spec').workloadSelector, 'workloadSelector').labels, 'labels');
    assert.ok(grpc.some((p) => ns(p)?.['kubernetes.io/metadata.name'] === obj(istio.metadata, 'm').namespace && selects(p.podSelector, istioLabels)), "Istio's ingress gateway reaches ext_proc");
    const eg = obj(ofKind(docs(path.join(ENVOY_DIR, 'envoy-gateway', 'kvgate.yaml')), 'EnvoyPatchPolicy')[0], 'EnvoyPatchPolicy');
    const gateway = obj(obj(eg.spec, 'spec').targetRef, 'targetRef').name;
    // Envoy Gateway labels its proxy pods with the owning Gateway's name and namespace (its
    // OwningGatewayNameLabel / OwningGatewayNamespaceLabel); the name alone would also admit a
    // Gateway of that name in any other namespace (another team's), since all their proxies run
    // in envoy-gateway-system.
    const gatewayNs = obj(eg.metadata, 'm').namespace;
    const egPeers = grpc.filter((p) => obj(obj(p.podSelector, 'podSelector').matchLabels, 'm')['gateway.envoyproxy.io/owning-gateway-name'] !== undefined);
    assert.ok(egPeers.length > 0, `Envoy Gateway's ${String(gateway)} reaches ext_proc`);
    for (const p of egPeers) {
      const labels = obj(obj(p.podSelector, 'podSelector').matchLabels, 'm');
      assert.equal(labels['gateway.envoyproxy.io/owning-gateway-name'], gateway, 'the recipe\'s Gateway');
      assert.equal(labels['gateway.envoyproxy.io/owning-gateway-namespace'], gatewayNs, `the Gateway's namespace (${String(gatewayNs)}), not any Gateway named ${String(gateway)}`);
    }

    // The example for the workers' namespace (a comment: its labels and ports are the user's)
    // admits kvgate's own pods, in kvgate's namespace, to the metrics port.
    const npText = readFileSync(path.join(ENVOY_DIR, 'kubernetes', 'network-policy.yaml'), 'utf8').split('\n');
    const exampleAt = npText.findIndex((l) => /^#\s+apiVersion: networking\.k8s\.io\/v1$/.test(l));
    assert.ok(exampleAt >= 0, 'network-policy.yaml shows a policy for the workers\' namespace');
    const exampleLines: string[] = [];
    for (let i = exampleAt; i < npText.length && /^#\s{3}/.test(npText[i]!); i++) exampleLines.push(npText[i]!.slice(4));
    const example = obj(parse(exampleLines.join('\n')), 'workers\' policy example');
    assert.equal(example.kind, 'NetworkPolicy');
    const examplePeers = arr(obj(arr(obj(example.spec, 'spec').ingress, 'ingress')[0], 'rule').from, 'from').map((f) => obj(f, 'peer'));
    const kvgateNs = obj(ofKind(all, 'Namespace')[0]!.metadata, 'ns').name;
    assert.ok(
      examplePeers.some((p) => ns(p)?.['kubernetes.io/metadata.name'] === kvgateNs && selects(p.podSelector, labelsOf('kvgate'))),
      `the example admits kvgate's pods from namespace ${String(kvgateNs)}`,
    );

    // Redis: kvgate's pods (in this namespace) on the Redis port, nothing else.
    const redisSvc = ofKind(all, 'Service').find((s) => obj(s.metadata, 'm').name === 'kvgate-redis')!;
    const redisPort = Number(obj(arr(obj(redisSvc.spec, 's').ports, 'p')[0], 'p').port);
    const redis = policyFor('kvgate-redis');
    assert.deepEqual(redis.flatMap((r) => r.ports), [redisPort]);
    for (const peer of redis.flatMap((r) => r.from)) {
      assert.equal(peer.namespaceSelector, undefined, 'kvgate in the same namespace');
      assert.ok(selects(peer.podSelector, labelsOf('kvgate')), `Redis from ${JSON.stringify(peer)}`);
    }
  });

  test('Kubernetes: every $(VAR) in a container env value names a variable defined earlier in that list', () => {
    // Kubernetes expands $(VAR) only from variables defined before it in the container's env (the
    // "Define Dependent Environment Variables" task); a later one stays the literal text, so
    // OTEL_RESOURCE_ATTRIBUTES once said k8s.pod.name=$(POD_NAME) on every pod.
    const manifests = [...k8s(), ...docs(path.join(ENVOY_DIR, 'istio', 'kvgate.yaml')), ...docs(path.join(ENVOY_DIR, 'envoy-gateway', 'kvgate.yaml'))];
    let checked = 0;
    for (const d of manifests) {
      const template = (d.spec as Obj | undefined)?.template as Obj | undefined;
      const containers = ((template?.spec as Obj | undefined)?.containers as Obj[] | undefined) ?? [];
      for (const c of containers) {
        const defined = new Set<string>();
        for (const e of (c.env as Obj[] | undefined) ?? []) {
          for (const [, ref] of String(e.value ?? '').matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
            assert.ok(defined.has(ref!), `${String(c.name)}: ${String(e.name)} uses $(${ref}) before it is defined`);
            checked++;
          }
          defined.add(String(e.name));
        }
      }
    }
    assert.ok(checked > 0, 'the manifests use dependent variables (the test would check nothing otherwise)');
  });

  test('compose demo: the files it mounts exist and agree (Envoy clusters, kvgate workers, tracer)', async () => {
    const dir = path.join(ENVOY_DIR, 'demo');
    const compose = obj(parse(readFileSync(path.join(dir, 'compose.yaml'), 'utf8')), 'compose');
    const services = obj(compose.services, 'services');
    for (const s of ['envoy', 'kvgate', 'redis', 'jaeger', 'worker-1', 'worker-2', 'worker-3']) assert.ok(services[s], `service ${s}`);
    for (const [name, raw] of Object.entries(services)) {
      for (const v of (obj(raw, name).volumes as string[] | undefined) ?? []) {
        const host = v.split(':')[0]!;
        assert.ok(existsSync(path.join(dir, host)), `${name} mounts ${host}`);
      }
    }
    assert.ok(existsSync(path.join(dir, String(obj(obj(services.kvgate, 'k').build, 'b').context), 'Dockerfile')));
    const kv = loadConfigFile(path.join(dir, 'kvgate.yaml'));
    const envoy = loadEnvoyConfig(path.join(dir, 'envoy.yaml'));
    for (const w of kv.workers) assert.ok(envoy.clusters.has(w.cluster), `cluster ${w.cluster}`);
    // Every command is one the kvgate command line accepts, and the fake workers listen where
    // Envoy's clusters and kvgate's metrics_url look for them (all interfaces: 127.0.0.1 inside a
    // container is unreachable from the others).
    const serve = await parseKvgate(obj(services.kvgate, 'k').command as string[]);
    assert.equal(serve.command, 'serve');
    const envoyText = readFileSync(path.join(dir, 'envoy.yaml'), 'utf8');
    for (const [i, w] of kv.workers.entries()) {
      const service = `worker-${i + 1}`;
      const fake = await parseKvgate(obj(services[service], service).command as string[]);
      assert.equal(fake.command, 'fake-worker');
      assert.equal(fake.options['host'], '0.0.0.0', `${service} listens on all interfaces`);
      assert.equal(fake.options['id'], w.id, `${service} reports the worker id kvgate knows it by`);
      assert.equal(w.metrics_url, `http://${service}:${String(fake.options['port'])}/metrics`, 'kvgate scrapes it');
      assert.match(envoyText, new RegExp(`address: ${service}, port_value: ${String(fake.options['port'])}`), 'Envoy reaches it');
    }
    assert.doesNotMatch(readFileSync(path.join(dir, 'compose.yaml'), 'utf8'), /assumed/i, 'no stale notes');
    const text = readFileSync(path.join(dir, 'envoy.yaml'), 'utf8');
    assert.match(text, /envoy\.tracers\.opentelemetry/);
    assert.match(text, /address: jaeger, port_value: 4317/);
    assert.match(text, /address: kvgate, port_value: 9002/);
    const env = obj(obj(services.kvgate, 'k').environment, 'env');
    assert.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, 'http://jaeger:4318');
    // The demo's Envoy declares its body mode (protocol_config, 1.35) and samples ext_proc spans
    // by the parent's decision (older releases marked every ext_proc span sampled).
    const image = String(obj(services.envoy, 'envoy').image);
    const minor = Number(/envoy:v1\.(\d+)/.exec(image)?.[1]);
    assert.ok(minor >= 35, `the demo's Envoy is 1.35 or later (${image})`);
  });
});
