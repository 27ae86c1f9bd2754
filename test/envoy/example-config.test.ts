/**
 * The example kvgate config that `npm start` serves must fit envoy/envoy.yaml: every worker's
 * cluster exists there, and the routing header is the one Envoy routes on.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parse as parseYaml } from 'yaml';
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

test("README's Responses route is envoy/envoy.yaml's, and it comes before the catch-all fallback", () => {
  const readme = readFileSync(path.resolve(import.meta.dirname, '../../README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('### Stored responses'));
  const snippet = /```yaml\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(snippet, 'the section has a YAML example');
  const fromReadme = (parseYaml(snippet) as unknown[])[0];
  const envoy = parseYaml(readFileSync(path.resolve(import.meta.dirname, '../../envoy/envoy.yaml'), 'utf8')) as {
    static_resources: { listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config: { route_config: { virtual_hosts: Array<{ routes: unknown[] }> } } }> }> }> };
  };
  const routes = envoy.static_resources.listeners[0]!.filter_chains[0]!.filters[0]!.typed_config.route_config.virtual_hosts[0]!.routes;
  const i = routes.findIndex((r) => JSON.stringify(r).includes('/v1/responses'));
  assert.ok(i > 0 && i < routes.length - 1, 'after the cluster_header route, before the catch-all');
  assert.deepEqual(routes[i], fromReadme);
});
