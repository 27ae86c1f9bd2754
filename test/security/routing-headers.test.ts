/**
 * A client can never choose its worker. Every header kvgate may route with
 * (`routingOutputHeaders(config)`, for every body mode) is tried as a client-sent spoof in every
 * way a request can go: routed on a session, unkeyed, malformed, shed, with the spoof repeated,
 * hidden behind a header flood, and with the gate down. The request must reach the worker kvgate
 * chose (or none), and the header must arrive upstream only as kvgate set it.
 *
 * It runs twice: with envoy/envoy.yaml as shipped (its HCM early header mutation removes spoofs
 * before the route is picked) and with that removal taken out, so kvgate's own stripping is
 * tested on its own: then Envoy has picked the route on the spoofed header, and only a reply that
 * removes it *and* clears the route cache keeps the request off the named worker.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseConfig, loadConfigFile } from '../../src/config/load.js';
import { routingOutputHeaders } from '../../src/extproc/headers.js';
import type { GateResult } from '../../src/gate/gate.js';
import type { HarnessRequest, Outcome } from '../harness/envoy-harness.js';
import type { ParsedEnvoyConfig } from '../harness/envoy-config.js';
import { chat, envoyConfig, harness, holdRequest } from '../helpers/envoy.js';
import { startExtProcProxy, type ExtProcProxy } from '../helpers/ext-proc-proxy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { FALLBACK_CLUSTER } from '../helpers/load.js';
import { refusedPort } from '../helpers/refused-port.js';
import path from 'node:path';

const FLEET = [
  { id: 'worker_1', cluster: 'worker_1', max_inflight: 2 },
  { id: 'worker_2', cluster: 'worker_2', max_inflight: 2 },
];
/** A real cluster name of the fleet: the spoof most likely to be dangerous. */
const SPOOF = 'worker_2';
/** Headers Envoy's HCM adds itself (never kvgate's doing). */
const ENVOY_ADDED = new Set(['x-forwarded-proto', 'x-request-id', 'content-length']);

const MODES = [
  { name: 'buffered', routing: { request_body_mode: 'buffered' }, envoyMode: 'BUFFERED' },
  { name: 'streamed', routing: { request_body_mode: 'streamed' }, envoyMode: 'STREAMED' },
  { name: 'none', routing: { request_body_mode: 'none' }, envoyMode: 'NONE' },
] as const;

const SHIPPED = envoyConfig();
const WITHOUT_EARLY_STRIP: ParsedEnvoyConfig = { ...SHIPPED, earlyHeaderMutations: [] };

type Scenario = { name: string; request: (h: string) => HarnessRequest };
const SCENARIOS: Scenario[] = [
  { name: 'a session request', request: (h) => chat({ session: 'victim', headers: { [h]: SPOOF } }) },
  { name: 'an unkeyed body-less request', request: (h) => ({ method: 'GET', path: '/v1/models', headers: { [h]: SPOOF } }) },
  { name: 'a malformed body', request: (h) => ({ method: 'POST', path: '/v1/chat/completions', headers: { [h]: SPOOF }, body: '{"user": ' }) },
  { name: 'the spoof sent twice', request: (h) => ({ method: 'POST', path: '/v1/chat/completions', headers: { [h]: [SPOOF, 'worker_1'] }, body: '{"user": "twice"}' }) },
  { name: 'the spoof in upper case', request: (h) => ({ method: 'GET', path: '/v1/models', headers: { [h.toUpperCase()]: SPOOF } }) },
  {
    name: 'the spoof behind 600 other headers',
    request: (h) => ({ method: 'GET', path: '/v1/models', headers: { ...Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`x-pad-${i}`, 'v'])), [h]: SPOOF } }),
  },
];

/** The routing headers as they reach the upstream, and what else the gate added. */
function check(out: Outcome, header: string, results: GateResult[], outputs: string[]): void {
  const routed = results.find((r) => r.kind === 'route');
  const values = out.requestHeaders.getAll(header);
  if (routed && routed.kind === 'route') {
    assert.deepEqual(values, header === outputs[0] ? [routed.cluster] : [], `${header} upstream is only kvgate's choice`);
    if (out.kind === 'upstream' && header === 'x-kvgate-cluster') assert.equal(out.cluster, routed.cluster, 'reached the worker kvgate chose');
  } else {
    assert.deepEqual(values, [], `${header} never reaches upstream when kvgate did not route`);
    // Not routed by kvgate: the route picked without any routing header, never the spoof's.
    if (out.kind === 'upstream') assert.equal(out.cluster, FALLBACK_CLUSTER, `${header}: the fallback route, not the spoofed worker`);
  }
  // Whatever the gate added to the request is one of its declared routing outputs.
  for (const [name] of out.requestHeaders.entries()) {
    if (name.startsWith(':') || name.startsWith('x-pad-') || ENVOY_ADDED.has(name)) continue;
    if (!['host', 'content-type', 'x-session-id', header].includes(name)) assert.ok(outputs.includes(name), `undeclared header ${name} added`);
  }
}

describe('a client cannot choose its worker', () => {
  for (const mode of MODES) {
    describe(`body mode ${mode.name}`, () => {
      let g: TestGate;
      let outputs: string[];
      /** Every gate reply passes through here on its way to Envoy, so each can be checked. */
      let proxy: ExtProcProxy;
      const replies = { mutating: 0, withoutRouteClear: [] as string[] };
      before(async () => {
        const raw = { routing: mode.routing, workers: FLEET };
        outputs = routingOutputHeaders(parseConfig(raw));
        g = await startTestGate(raw);
        proxy = await startExtProcProxy(g.target, (r) => {
          // A request-path reply that changes headers must also clear the route cache: Envoy
          // picked the route before ext_proc, possibly on a client's routing header.
          const common = r.request_headers?.response ?? r.request_body?.response;
          if (common?.header_mutation) {
            replies.mutating++;
            if (common.clear_route_cache !== true) replies.withoutRouteClear.push(JSON.stringify(common.header_mutation));
          }
          return r;
        });
      });
      after(async () => {
        proxy.close();
        await g.close(100);
      });

      for (const [envoyName, envoy] of [
        ['envoy.yaml as shipped', SHIPPED],
        ['without Envoy’s early header mutation', WITHOUT_EARLY_STRIP],
      ] as const) {
        test(`${envoyName}: every routing header, every scenario`, async () => {
          const h = harness(proxy.target, { config: envoy, processingModeOverride: { request_body_mode: mode.envoyMode } });
          try {
            for (const header of outputs) {
              for (const s of SCENARIOS) {
                const seen = g.results.length;
                const out = await h.request(s.request(header), { status: 200 });
                assert.equal(out.kind, 'upstream', `${header} / ${s.name}`);
                check(out, header, g.results.slice(seen), outputs);
              }
              // Shed: both workers full, so kvgate answers itself and nothing goes upstream.
              const held = await Promise.all(['a', 'b', 'c', 'd'].map((k) => holdRequest(h, `hold-${mode.name}-${k}`)));
              const shed = await h.request({ method: 'GET', path: '/v1/models', headers: { [header]: SPOOF, 'x-session-id': 'shed' } });
              assert.equal(shed.kind === 'local' && shed.status, 429, `${header} / shed`);
              for (const x of held) x.stream.end();
            }
          } finally {
            h.close();
          }
          assert.ok(replies.mutating > 0, 'the gate answered with header mutations');
          assert.deepEqual(replies.withoutRouteClear, [], 'every request-path reply that mutates headers clears the route cache');
        });
      }
    });
  }

  test('gate down (fail-open): the shipped early header mutation removes every routing header kvgate can emit', async () => {
    const example = loadConfigFile(path.resolve(import.meta.dirname, '../../envoy/kvgate.yaml'));
    const outputs = new Set([...routingOutputHeaders(example), ...MODES.flatMap((m) => routingOutputHeaders(parseConfig({ routing: m.routing, workers: FLEET })))]);
    const removed = SHIPPED.earlyHeaderMutations.flatMap((m) => (m.kind === 'remove' ? [m.name] : []));
    for (const header of outputs) assert.ok(removed.includes(header), `envoy.yaml removes ${header}`);
    const refused = await refusedPort();
    const h = harness(`127.0.0.1:${refused.port}`); // nothing listens: every ext_proc call fails
    try {
      for (const header of outputs) {
        const out = await h.request(chat({ session: 'down', headers: { [header]: SPOOF } }));
        assert.equal(out.kind, 'upstream');
        assert.equal(out.cluster, FALLBACK_CLUSTER);
        assert.deepEqual(out.requestHeaders.getAll(header), []);
      }
    } finally {
      h.close();
      await refused.release();
    }
  });
});
