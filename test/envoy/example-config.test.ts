/**
 * The example kvgate config that `npm start` serves must fit envoy/envoy.yaml: every worker's
 * cluster exists there, and the routing header is the one Envoy routes on.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { loadConfigFile } from '../../src/config/load.js';
import { envoyConfig } from '../helpers/envoy.js';

test('envoy/kvgate.yaml workers are clusters of envoy/envoy.yaml, and the routing header matches', () => {
  const kv = loadConfigFile(path.resolve(import.meta.dirname, '../../envoy/kvgate.yaml'));
  const envoy = envoyConfig();
  for (const w of kv.workers) assert.ok(envoy.clusters.has(w.cluster), `cluster ${w.cluster} is defined in envoy.yaml`);
  const routes = envoy.routeConfig.virtualHosts.flatMap((v) => v.routes);
  assert.ok(
    routes.some((r) => r.action.kind === 'cluster_header' && r.action.header === kv.routing.header),
    `a route uses cluster_header: ${kv.routing.header}`,
  );
  // Removed before the route is picked (HCM early header mutation), not by an HTTP filter.
  assert.ok(
    envoy.earlyHeaderMutations.some((m) => m.kind === 'remove' && m.name === kv.routing.header),
    'the routing header is stripped from clients before routing',
  );
});
