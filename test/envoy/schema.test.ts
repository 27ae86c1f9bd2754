// Envoy configs under envoy/ must parse as Envoy's own Bootstrap (and fragments as their types),
// checked offline with buf against the Envoy API protos from npm. See scripts/envoy-schema.ts.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import {
  REPO_ROOT,
  buildEnvoySchemaImage,
  findEnvoyBootstraps,
  isEnvoyBootstrapYaml,
  patchValidateProto,
  validateEnvoyText,
  validateEnvoyYaml,
} from '../../scripts/envoy-schema.js';
import { validateEnvoyPgv, validateEnvoyPgvText } from '../../scripts/envoy-pgv.js';

const ENVOY_YAML = path.join(REPO_ROOT, 'envoy', 'envoy.yaml');

type Node = Record<string, unknown>;

function obj(value: unknown, where: string): Node {
  assert.ok(typeof value === 'object' && value !== null && !Array.isArray(value), `${where} is not a mapping`);
  return value as Node;
}

function list(value: unknown, where: string): unknown[] {
  assert.ok(Array.isArray(value), `${where} is not a list`);
  return value;
}

// Paths into envoy/envoy.yaml's shape; a failing lookup means the fixture changed, not the schema.
function hcm(config: Node): Node {
  const listener = obj(list(obj(config.static_resources, 'static_resources').listeners, 'listeners')[0], 'listener');
  const chain = obj(list(listener.filter_chains, 'filter_chains')[0], 'filter_chain');
  const filter = list(chain.filters, 'filters').map((f) => obj(f, 'filter'))
    .find((f) => f.name === 'envoy.filters.network.http_connection_manager');
  return obj(filter?.typed_config, 'http_connection_manager typed_config');
}

function httpFilter(config: Node, name: string): Node {
  const filter = list(hcm(config).http_filters, 'http_filters').map((f) => obj(f, 'http_filter'))
    .find((f) => f.name === name);
  return obj(filter?.typed_config, `${name} typed_config`);
}

/** The typed_config of the HCM's first early header mutation extension. */
function earlyMutation(config: Node): Node {
  const ext = obj(list(hcm(config).early_header_mutation_extensions, 'early_header_mutation_extensions')[0], 'early mutation');
  return obj(ext.typed_config, 'early mutation typed_config');
}

function firstRoute(config: Node): Node {
  const vhost = obj(list(obj(hcm(config).route_config, 'route_config').virtual_hosts, 'virtual_hosts')[0], 'vhost');
  return obj(obj(list(vhost.routes, 'routes')[0], 'route').route, 'route action');
}

// Each case runs its own buf process on its own temp file, so they can run side by side.
describe('Envoy schema validation', { concurrency: true }, () => {
  let tmp = '';
  let source = '';

  before(async () => {
    tmp = await mkdtemp(path.join(os.tmpdir(), 'kvgate-envoy-schema-test-'));
    source = await readFile(ENVOY_YAML, 'utf8');
    await buildEnvoySchemaImage(); // first run builds (~0.5 s); later runs reuse .build/envoy-schema
  });

  after(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  async function writeMutated(name: string, mutate: (config: Node) => void): Promise<string> {
    const config = obj(parse(source), 'envoy.yaml');
    mutate(config);
    const file = path.join(tmp, `${name}.yaml`);
    await writeFile(file, stringify(config));
    return file;
  }

  const validateMutated = async (name: string, mutate: (config: Node) => void) =>
    validateEnvoyYaml(await writeMutated(name, mutate));
  const validateMutatedPgv = async (name: string, mutate: (config: Node) => void) =>
    validateEnvoyPgv(await writeMutated(name, mutate));

  test('every Envoy bootstrap under envoy/ matches the Bootstrap schema and its PGV rules', async () => {
    const files = await findEnvoyBootstraps();
    assert.ok(files.includes(ENVOY_YAML), `envoy/envoy.yaml not discovered (found: ${files.join(', ')})`);
    for (const file of files) {
      const schema = await validateEnvoyYaml(file);
      assert.ok(schema.ok, schema.message);
      const rules = await validateEnvoyPgv(file);
      assert.ok(rules.ok, rules.message);
    }
  });

  test('discovery skips YAML that is not an Envoy bootstrap', async () => {
    assert.equal(isEnvoyBootstrapYaml('routing:\n  mode: session\n'), false);
    assert.equal(isEnvoyBootstrapYaml('static_resources: {}\n---\nstatic_resources: {}\n'), false);
    assert.equal(isEnvoyBootstrapYaml('admin: {}\nstatic_resources: {}\n'), true);
  });

  test('rejects an unknown field inside the ext_proc filter config', async () => {
    const result = await validateMutated('extproc-unknown-field', (config) => {
      httpFilter(config, 'envoy.filters.http.ext_proc').bogus_extproc_field = true;
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /unknown field "bogus_extproc_field"/);
    assert.match(result.message, /extproc-unknown-field\.yaml:\d+:\d+/);
  });

  test('rejects a misspelt processing_mode enum', async () => {
    const result = await validateMutated('enum-typo', (config) => {
      const mode = obj(httpFilter(config, 'envoy.filters.http.ext_proc').processing_mode, 'processing_mode');
    mode.request_body_mode = 'BUFFERD';
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /unknown enum value "BUFFERD"/);
  });

  test('rejects a misspelt route field', async () => {
    const result = await validateMutated('route-typo', (config) => {
      const route = firstRoute(config);
      route.cluster_headr = route.cluster_header;
      delete route.cluster_header;
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /unknown field "cluster_headr"/);
  });

  test('rejects an @type that is not in the schema image', async () => {
    const type = 'envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutaton';
    const result = await validateMutated('unknown-type', (config) => {
      earlyMutation(config)['@type'] = `type.googleapis.com/${type}`;
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /proto:\s+not found/); // Go may put U+00A0 after "proto:"
    assert.ok(result.message.includes(`type ${type} is not in the Envoy schema image`), result.message);
  });

  test('the early header mutation extension is checked field by field (schema and PGV)', async () => {
    const typo = await validateMutated('early-typo', (config) => {
      list(earlyMutation(config).mutations, 'mutations')[0] = { remvoe: 'x-kvgate-cluster' };
    });
    assert.equal(typo.ok, false);
    assert.match(typo.message, /unknown field "remvoe", expected one of \[remove append/);
    const both = await validateMutated('early-oneof', (config) => {
      list(earlyMutation(config).mutations, 'mutations')[0] = { remove: 'x-kvgate-cluster', append: { header: { key: 'x-kvgate-cluster', value: 'worker_1' } } };
    });
    assert.equal(both.ok, false);
    assert.match(both.message, /already set for oneof action/);
    const empty = await validateMutatedPgv('early-empty', (config) => {
      earlyMutation(config).mutations = [];
    });
    assert.equal(empty.ok, false);
    assert.match(empty.message, /mutations: must (?:contain|have) at least 1/);
  });

  test('PGV: an ORIGINAL_DST metadata_key needs a namespace and a path', async () => {
    const picker = await readFile(path.join(REPO_ROOT, 'envoy', 'endpoint-picker', 'envoy.yaml'), 'utf8');
    const lbConfig = (config: Node): Node => {
      const cluster = list(obj(config.static_resources, 'static_resources').clusters, 'clusters').map((c) => obj(c, 'cluster'))
        .find((c) => c.name === 'original_destination_cluster');
      return obj(obj(cluster, 'cluster').original_dst_lb_config, 'original_dst_lb_config');
    };
    for (const [name, mutate, expected] of [
      ['md-no-path', (c: Node) => { obj(lbConfig(c).metadata_key, 'metadata_key').path = []; }, /metadata_key\.path: must (?:contain|have) at least 1/],
      ['md-no-key', (c: Node) => { obj(lbConfig(c).metadata_key, 'metadata_key').key = ''; }, /metadata_key\.key: must be at least 1 characters/],
      ['md-typo', (c: Node) => { lbConfig(c).metadata_kye = lbConfig(c).metadata_key; delete lbConfig(c).metadata_key; }, /unknown field "metadata_kye"/],
    ] as const) {
      const config = obj(parse(picker), 'endpoint-picker envoy.yaml');
      mutate(config);
      const file = path.join(tmp, `${name}.yaml`);
      await writeFile(file, stringify(config));
      const result = await validateEnvoyPgv(file);
      assert.equal(result.ok, false, name);
      assert.match(result.message, expected, name);
    }
  });

  test('rejects cluster and cluster_header on one route (oneof)', async () => {
    const result = await validateMutated('oneof', (config) => {
      firstRoute(config).cluster = 'worker_1';
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /already set for oneof cluster_specifier/);
  });

  test('validates fragments such as EnvoyFilter patch values', async () => {
    const filter = [
      'name: envoy.filters.http.ext_proc',
      'typed_config:',
      '  "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      '  grpc_service: { envoy_grpc: { cluster_name: kvgate_ext_proc } }',
      '  processing_mode: { request_body_mode: BUFFERED }',
    ].join('\n');
    const httpFilterType = 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter';
    const good = await validateEnvoyText(filter, { type: httpFilterType });
    assert.ok(good.ok, good.message);

    const typo = filter.replace('BUFFERED', 'BUFFERD');
    const bad = await validateEnvoyText(typo, { type: httpFilterType, label: 'patch[0]' });
    assert.equal(bad.ok, false);
    assert.match(bad.message, /^patch\[0\]:5:\d+ unknown enum value "BUFFERD"/);

    const perRoute = JSON.stringify({
      '@type': 'type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute',
      overrides: { processing_mode: { response_body_mode: 'NONE' } },
    });
    const any = await validateEnvoyText(perRoute, { type: 'google.protobuf.Any' });
    assert.ok(any.ok, any.message);
    // JSON text too: buf's own JSON reader would drop this unknown field silently.
    const badAny = await validateEnvoyText(perRoute.replace('overrides', 'overides'), { type: 'google.protobuf.Any' });
    assert.equal(badAny.ok, false);
    assert.match(badAny.message, /unknown field "overides"/);
  });

  // buf convert accepts all of these; Envoy would refuse to start.
  test('PGV: rejects a port over 65535', async () => {
    const result = await validateMutatedPgv('pgv-port', (config) => {
      obj(obj(config.admin, 'admin').address, 'admin.address').socket_address = { address: '127.0.0.1', port_value: 70000 };
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /pgv-port\.yaml:\d+:\d+ admin\.address\.socket_address\.port_value: must be <= 65535/);
    assert.ok(result.message.includes('[(validate.rules).uint32.lte]'), result.message);
  });

  test('PGV: rejects an empty ext_proc cluster_name', async () => {
    const result = await validateMutatedPgv('pgv-cluster-name', (config) => {
      const grpc = obj(httpFilter(config, 'envoy.filters.http.ext_proc').grpc_service, 'grpc_service');
      obj(grpc.envoy_grpc, 'envoy_grpc').cluster_name = '';
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /typed_config\.grpc_service\.envoy_grpc\.cluster_name: must be at least 1 characters/);
    assert.ok(result.message.includes('[(validate.rules).string.min_len]'), result.message);
  });

  test('PGV: rejects an ext_proc message_timeout over an hour', async () => {
    const result = await validateMutatedPgv('pgv-timeout', (config) => {
      httpFilter(config, 'envoy.filters.http.ext_proc').message_timeout = '7200s';
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /message_timeout: must be <= 3600s \[\(validate\.rules\)\.duration\.lte\]/);
  });

  test('PGV: rejects a route with no cluster specifier (required oneof)', async () => {
    const result = await validateMutatedPgv('pgv-oneof', (config) => {
      delete firstRoute(config).cluster_header;
    });
    assert.equal(result.ok, false);
    assert.match(result.message, /routes\[0\]\.route: one of \[cluster, cluster_header, .*\] is required/);
  });

  test('PGV: checks fragments and still reports schema errors', async () => {
    const type = 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter';
    const value = [
      'name: envoy.filters.http.ext_proc',
      'typed_config:',
      '  "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
      '  grpc_service: { envoy_grpc: { cluster_name: "" } }',
    ].join('\n');
    const bad = await validateEnvoyPgvText(value, { type, label: 'patch[0]' });
    assert.equal(bad.ok, false);
    assert.match(bad.message, /^patch\[0\]:4:\d+ typed_config\.grpc_service\.envoy_grpc\.cluster_name: must be at least 1/);
    const typo = await validateEnvoyPgvText(value.replace('cluster_name', 'clustr_name'), { type });
    assert.equal(typo.ok, false);
    assert.match(typo.message, /unknown field "clustr_name"/);
  });

  test('validate.proto patch adds missing rule fields once and keeps existing ones', () => {
    const npmLike = [
      'syntax = "proto2";',
      'message StringRules {',
      '    optional string const = 1;',
      '    oneof well_known { bool email = 12; }',
      '    optional bool strict = 25 [default = true];',
      '}',
      'message RepeatedRules {',
      '    optional uint64 min_items = 1;',
      '    optional bool ignore_empty = 5;',
      '}',
      'message EnumRules { optional bool defined_only = 2; }',
    ].join('\r\n');
    const patched = patchValidateProto(npmLike);
    assert.match(patched, /message StringRules \{[^]*optional bool ignore_empty = 26;\n\}/);
    assert.equal(patched.match(/ignore_empty/g)?.length, 2, 'RepeatedRules kept its own, EnumRules got none');
    assert.ok(!patched.includes('\r'), 'CRLF normalised');
  });
});
