/**
 * The endpoint-picker example pair fits together: kvgate speaks the protocol, the ORIGINAL_DST
 * cluster reads the protocol's envoy.lb metadata (not its header), ext_proc may write envoy.lb and forwards the subset hint
 * and served-endpoint namespaces, and the fallback cluster lists the workers kvgate knows.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { loadConfigFile } from '../../src/config/load.js';
import { DESTINATION_HEADER, LB_NAMESPACE, SUBSET_NAMESPACE } from '../../src/extproc/endpoint-picker.js';
import { loadEnvoyConfig } from '../harness/envoy-config.js';

const DIR = path.resolve(import.meta.dirname, '../../envoy/endpoint-picker');

test('envoy/endpoint-picker: kvgate.yaml and envoy.yaml agree', () => {
  const kv = loadConfigFile(path.join(DIR, 'kvgate.yaml'));
  assert.equal(kv.routing.protocol, 'endpoint_picker');
  const envoy = loadEnvoyConfig(path.join(DIR, 'envoy.yaml'));
  // The host comes from the metadata only kvgate writes, never from a header a client could send.
  assert.deepEqual(envoy.originalDstClusters.get('original_destination_cluster'), { metadataKey: { key: LB_NAMESPACE, path: [DESTINATION_HEADER] } });
  assert.equal(envoy.originalDstHeaders.size, 0, 'no ORIGINAL_DST cluster reads a header');
  assert.ok(envoy.extProc, "envoy.extProc");
  assert.deepEqual(envoy.extProc.receivingNamespaces, [LB_NAMESPACE]);
  assert.deepEqual([...envoy.extProc.forwardingNamespaces].sort(), [LB_NAMESPACE, SUBSET_NAMESPACE].sort());
  assert.ok(
    envoy.earlyHeaderMutations.some((m) => m.kind === 'remove' && m.name === DESTINATION_HEADER),
    'client copies of the header are stripped before routing',
  );

  const raw = parse(readFileSync(path.join(DIR, 'envoy.yaml'), 'utf8')) as {
    static_resources: { clusters: Array<{ name: string; load_assignment?: { endpoints: Array<{ lb_endpoints: Array<{ endpoint: { address: { socket_address: { address: string; port_value: number } } } }> }> } }> };
  };
  const fallback = raw.static_resources.clusters.find((c) => c.name === 'kvgate_fallback');
  const addrs = (fallback?.load_assignment?.endpoints ?? []).flatMap((e) => e.lb_endpoints.map((l) => `${l.endpoint.address.socket_address.address}:${l.endpoint.address.socket_address.port_value}`));
  assert.deepEqual(addrs.sort(), kv.workers.map((w) => w.address).sort());
});
