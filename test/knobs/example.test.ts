/**
 * envoy/pools/ holds a pair that must fit together: every worker cluster of kvgate.yaml exists in
 * envoy.yaml, every knob envoy.yaml sets is one kvgate knows with a valid value, and every pool a
 * route pins is a pool of kvgate.yaml. (test/envoy/schema.test.ts validates envoy.yaml against
 * Envoy's schema; this checks what the schema cannot.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readKnobs } from '../../src/config/knobs.js';
import { loadConfigFile } from '../../src/config/load.js';
import { POOLS_KVGATE_YAML, poolsEnvoy } from './helpers.js';

test('envoy/pools: clusters, knobs and pinned pools agree with kvgate.yaml', () => {
  const kv = loadConfigFile(POOLS_KVGATE_YAML);
  const envoy = poolsEnvoy();
  for (const w of kv.workers) assert.ok(envoy.clusters.has(w.cluster), `cluster ${w.cluster} is defined in envoy/pools/envoy.yaml`);
  assert.deepEqual(envoy.extProc?.forwardingNamespaces, ['kvgate']);

  const perRoute = envoy.routeConfig.virtualHosts.flatMap((vh) => [vh.extProcPerRoute, ...vh.routes.map((r) => r.extProcPerRoute)]);
  const layers = perRoute.filter((p) => p !== undefined);
  assert.ok(layers.length >= 3, 'a virtual host and two routes carry knobs');
  for (const p of layers) {
    const reading = readKnobs({ metadata: p.grpcInitialMetadata });
    assert.deepEqual(reading.problems, []);
    if (reading.knobs.pool !== undefined) assert.ok(kv.pools.some((pool) => pool.name === reading.knobs.pool), `pool ${reading.knobs.pool} exists`);
  }
  const setMetadata = envoy.httpFilters.find((f) => f.kind === 'set_metadata');
  assert.ok(setMetadata && setMetadata.kind === 'set_metadata', "setMetadata && setMetadata.kind === 'set_metadata'");
  for (const e of setMetadata.entries.filter((x) => x.namespace === 'kvgate')) assert.deepEqual(readKnobs({ context: e.value }).problems, []);
  // The routes with knobs are the ones matched before kvgate answers (no routing header yet).
  for (const vh of envoy.routeConfig.virtualHosts) {
    for (const r of vh.routes) {
      if (r.extProcPerRoute) assert.ok(!r.match.headers.some((m) => m.name === kv.routing.header), `${r.name}: knobs on a route without the routing header`);
    }
  }
});
