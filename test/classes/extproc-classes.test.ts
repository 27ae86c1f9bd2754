/**
 * Classes of service through ext_proc and the Envoy harness (envoy/envoy.yaml): the 429 names the
 * class it shed, a critical request still gets a cluster on a fleet full of sheddable ones, and
 * the route's `x-kvgate-class` metadata (ExtProcPerRoute grpc_initial_metadata) wins over the
 * client's header.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import type { EnvoyHarness, LocalOutcome, Outcome } from '../harness/envoy-harness.js';
import { isClosed, isTimedOut, type RawStream } from '../harness/raw-stream.js';
import { chat, harness, headersMsg, routedCluster } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

const FLEET = {
  workers: [
    { id: 'worker_1', cluster: 'worker_1' },
    { id: 'worker_2', cluster: 'worker_2' },
  ],
  limits: { max_inflight: 2 },
};

/** A body-less request of a class, held in flight until its stream ends. */
async function hold(h: EnvoyHarness, cls: string, session: string): Promise<{ cluster: string | undefined; stream: RawStream }> {
  const stream = h.openRawStream();
  stream.write(headersMsg({ ':method': 'GET', ':path': '/v1/models', ':scheme': 'http', ':authority': 'llm', 'x-session-id': session, [DEFAULTS.classHeader]: cls }, true) as never);
  const ev = await stream.next(3000);
  if (isClosed(ev) || isTimedOut(ev)) throw new Error(`no reply: ${JSON.stringify(ev)}`);
  return { cluster: routedCluster(ev), stream };
}

function local(out: Outcome): LocalOutcome {
  assert.equal(out.kind, 'local', `answered locally, got ${out.kind === 'upstream' ? `a route to ${out.cluster}` : out.kind}`);
  return out as LocalOutcome;
}

const longText = (tag: string) => `${tag}: ` + 'a system prompt shared by an application, long enough for many blocks. '.repeat(40);

describe('classes of service through ext_proc', () => {
  const gates: TestGate[] = [];
  const harnesses: EnvoyHarness[] = [];
  const streams: RawStream[] = [];
  let redis: TestRedis | undefined;
  after(async () => {
    for (const s of streams) s.end();
    for (const h of harnesses) h.close();
    for (const g of gates) await g.close(100);
    await redis?.stop();
  });

  test('sheddable fills half of each worker, then 429 naming its class; critical still gets a cluster', async () => {
    const g = await startTestGate(FLEET);
    const h = harness(g.target);
    gates.push(g);
    harnesses.push(h);
    const held = [await hold(h, 'sheddable', 's1'), await hold(h, 'sheddable', 's2')];
    streams.push(...held.map((x) => x.stream));
    assert.deepEqual(held.map((x) => x.cluster).sort(), ['worker_1', 'worker_2'], 'one per worker: half of 2');

    const out = local(await h.request(chat({ text: longText('batch'), headers: { [DEFAULTS.classHeader]: 'sheddable' } })));
    assert.equal(out.status, 429);
    const body = JSON.parse(out.body.toString()) as { error: { code: string; class: string; message: string } };
    assert.equal(body.error.code, 'overloaded');
    assert.equal(body.error.class, 'sheddable');
    assert.match(body.error.message, /sheddable/);

    const critical = await h.request(chat({ text: longText('pager'), headers: { [DEFAULTS.classHeader]: 'critical' } }));
    assert.equal(critical.kind, 'upstream');
    assert.ok(critical.kind === 'upstream' && ['worker_1', 'worker_2'].includes(critical.cluster!), 'a worker cluster is named');
    const last = g.results.at(-1)!;
    assert.equal(last.kind === 'route' && last.class, 'critical');
  });

  test("the route's class knob wins over the client's header", async () => {
    const g = await startTestGate(FLEET);
    // As ExtProcPerRoute.overrides.grpc_initial_metadata sets it for a batch route.
    const h = harness(g.target, { grpcMetadata: { 'x-kvgate-class': 'sheddable' } });
    gates.push(g);
    harnesses.push(h);
    const held = [await hold(h, 'critical', 'a'), await hold(h, 'critical', 'b')];
    streams.push(...held.map((x) => x.stream));
    const out = local(await h.request(chat({ text: longText('claims critical'), headers: { [DEFAULTS.classHeader]: 'critical' } })));
    assert.equal(out.status, 429);
    assert.equal((JSON.parse(out.body.toString()) as { error: { class: string } }).error.class, 'sheddable');
  });

  test("envoy/envoy.yaml's batch route makes its requests sheddable, whatever their header says", async () => {
    const g = await startTestGate(FLEET);
    const h = harness(g.target);
    gates.push(g);
    harnesses.push(h);
    // A free fleet: the batch request is routed (a cluster named), and its class is the route's.
    const batch = { ...chat({ text: longText('nightly'), headers: { [DEFAULTS.classHeader]: 'critical' } }), path: '/v1/batch/chat/completions' };
    const routed = await h.request(batch);
    assert.ok(routed.kind === 'upstream' && ['worker_1', 'worker_2'].includes(routed.cluster!), 'routed to a worker');
    const last = g.results.at(-1)!;
    assert.equal(last.kind === 'route' && last.class, 'sheddable');
    // The same request on the ordinary route keeps the class its header names.
    await h.request(chat({ text: longText('nightly'), headers: { [DEFAULTS.classHeader]: 'critical' } }));
    const plain = g.results.at(-1)!;
    assert.equal(plain.kind === 'route' && plain.class, 'critical');
  });

  test('two replicas on one Redis: what one holds counts against the class share on the other', async () => {
    redis = await startRedis();
    // A loaded machine can hold a reply past the default store.timeout_ms, and a replica then
    // decides on local state, which this test is not about (the fault tests cover it).
    const shared = { ...FLEET, store: { timeout_ms: 2000 } };
    const a = await startTestGate(shared, { store: `${redis.url}/1` });
    const b = await startTestGate(shared, { store: `${redis.url}/1` });
    const ha = harness(a.target);
    const hb = harness(b.target);
    gates.push(a, b);
    harnesses.push(ha, hb);
    // Replica b reads the fleet idle first, so its cached view is stale when a fills it.
    const warm = await hb.request(chat({ text: longText('warm-up') }));
    assert.equal(warm.kind, 'upstream');
    const held = [await hold(ha, 'sheddable', 'r1'), await hold(ha, 'sheddable', 'r2')];
    streams.push(...held.map((x) => x.stream));
    assert.deepEqual(held.map((x) => x.cluster).sort(), ['worker_1', 'worker_2']);
    const out = local(await hb.request(chat({ text: longText('batch on b'), headers: { [DEFAULTS.classHeader]: 'sheddable' } })));
    assert.equal(out.status, 429);
    assert.equal((JSON.parse(out.body.toString()) as { error: { class: string } }).error.class, 'sheddable');
    const critical = await hb.request(chat({ text: longText('pager on b'), headers: { [DEFAULTS.classHeader]: 'critical' } }));
    assert.equal(critical.kind, 'upstream');
  });
});
