/**
 * The gate's routing promises, end to end: real gRPC, the Envoy harness playing envoy/envoy.yaml,
 * and a real kvgate. Run against each store backend (routing-memory.test.ts, routing-redis.test.ts).
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { EnvoyHarness } from '../harness/envoy-harness.js';
import { chat, harness, holdRequest, waitFor } from '../helpers/envoy.js';
import { setWorkerState, startTestGate, workers, type TestGate } from '../helpers/gate.js';

export interface Backend {
  name: string;
  /** A store spec for a fresh, empty store. */
  store(): Promise<string>;
  cleanup(): Promise<void>;
}

const FLEET = {
  workers: [
    { id: 'worker_1', cluster: 'worker_1' },
    { id: 'worker_2', cluster: 'worker_2' },
    { id: 'worker_3', cluster: 'worker_3' },
  ],
};

export function routingScenarios(backend: Backend): void {
  describe(`routing through ext_proc (${backend.name} store)`, () => {
    const gates: TestGate[] = [];
    const harnesses: EnvoyHarness[] = [];
    after(async () => {
      for (const h of harnesses) h.close();
      for (const g of gates) await g.close(100);
      await backend.cleanup();
    });
    async function gate(config: unknown = FLEET): Promise<{ g: TestGate; h: EnvoyHarness }> {
      const g = await startTestGate(config, { store: await backend.store() });
      const h = harness(g.target);
      gates.push(g);
      harnesses.push(h);
      return { g, h };
    }

    test('one session lands on one cluster across requests, by header, body user and cookie', async () => {
      const { h } = await gate();
      for (const make of [
        (i: number) => chat({ session: 'conv-1', text: `turn ${i}` }),
        (i: number) => chat({ user: 'user-42', text: `turn ${i}` }),
        (i: number) => chat({ headers: { cookie: 'kvgate-session=c-9' }, text: `turn ${i}` }),
      ]) {
        const seen = new Set<string>();
        for (let i = 0; i < 6; i++) {
          const out = await h.request(make(i));
          assert.equal(out.kind, 'upstream');
          seen.add(out.cluster!);
          assert.equal(out.routeCleared, true, 'the gate cleared the route cache with its mutation');
        }
        assert.equal(seen.size, 1, `one cluster for the session, got ${[...seen].join(',')}`);
      }
    });

    test('the article example: worker_1 at 9 of 10 keeps "abc"; "def" and "ghi" go to worker_2', async () => {
      const cfg = { workers: [{ id: 'worker_1', cluster: 'worker_1', max_inflight: 10 }, { id: 'worker_2', cluster: 'worker_2', max_inflight: 10 }] };
      const { g, h } = await gate(cfg);
      // Put 9 requests (abc among them) on worker_1 and 2 on worker_2, all held in flight.
      await setWorkerState(g.admin, 'worker_2', 'draining');
      const held = [];
      for (const s of ['abc', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8']) {
        const r = await holdRequest(h, s);
        assert.equal(r.cluster, 'worker_1');
        held.push(r);
      }
      await setWorkerState(g.admin, 'worker_2', 'healthy');
      for (const s of ['q1', 'q2']) {
        const r = await holdRequest(h, s);
        assert.equal(r.cluster, 'worker_2');
        held.push(r);
      }
      assert.deepEqual((await workers(g.admin)).map((w) => [w.id, w.inflight]), [['worker_1', 9], ['worker_2', 2]]);

      const placed = [];
      for (const s of ['abc', 'def', 'ghi']) {
        const r = await holdRequest(h, s);
        placed.push([s, r.cluster]);
        held.push(r);
      }
      assert.deepEqual(placed, [['abc', 'worker_1'], ['def', 'worker_2'], ['ghi', 'worker_2']]);
      assert.deepEqual((await workers(g.admin)).map((w) => [w.id, w.inflight]), [['worker_1', 10], ['worker_2', 4]]);
      for (const r of held) r.stream.end();
      await waitFor(async () => (await workers(g.admin)).every((w) => w.inflight === 0), 3000, 'leases released');
    });

    test('a saturated affine worker sends the session to the least loaded worker (a migration)', async () => {
      const cfg = { workers: FLEET.workers.map((w) => ({ ...w, max_inflight: 2 })) };
      const { g, h } = await gate(cfg);
      const first = await h.request(chat({ session: 'mover' }));
      assert.equal(first.kind, 'upstream');
      const home = first.cluster!;
      // Fill the home worker with two held requests of the same session.
      const held = [await holdRequest(h, 'mover'), await holdRequest(h, 'mover')];
      assert.ok(held.every((r) => r.cluster === home), "held.every((r) => r.cluster === home)");
      // Make one other worker busier, so "least loaded" has one answer.
      const others = FLEET.workers.map((w) => w.id).filter((id) => id !== home);
      await setWorkerState(g.admin, others[1]!, 'draining');
      const filler = await holdRequest(h, 'filler');
      assert.equal(filler.cluster, others[0]);
      await setWorkerState(g.admin, others[1]!, 'healthy');
      const moved = await h.request(chat({ session: 'mover', text: 'again' }));
      assert.equal(moved.kind, 'upstream');
      assert.equal(moved.cluster, others[1], 'least loaded of the rest');
      const last = g.results.at(-1)!;
      assert.equal(last.kind === 'route' && last.outcome, 'migrated');
      assert.equal(last.kind === 'route' && last.from, home);
      for (const r of [...held, filler]) r.stream.end();
    });

    test('every worker saturated gives 429 with retry-after, at once', async () => {
      const cfg = { workers: FLEET.workers.slice(0, 2).map((w) => ({ ...w, max_inflight: 1 })), routing: { retry_after_s: 2 } };
      const { h } = await gate(cfg);
      const held = [await holdRequest(h, 'a'), await holdRequest(h, 'b')];
      assert.notEqual(held[0]!.cluster, held[1]!.cluster);
      const t0 = Date.now();
      const out = await h.request(chat({ session: 'c' }));
      assert.equal(out.kind, 'local');
      assert.equal(out.kind === 'local' && out.status, 429);
      assert.equal(out.kind === 'local' && out.headers.get('retry-after'), '2');
      // Not a speed test: queueing would mean waiting on held requests that never finish here.
      assert.ok(Date.now() - t0 < 3000, 'shed without queueing');
      const body = JSON.parse(out.kind === 'local' ? out.body.toString() : '{}') as { error: { code: string } };
      assert.equal(body.error.code, 'overloaded');
      for (const r of held) r.stream.end();
    });

    test('no healthy worker gives 503', async () => {
      const { g, h } = await gate();
      for (const w of FLEET.workers) await setWorkerState(g.admin, w.id, w.id === 'worker_1' ? 'down' : 'draining');
      const out = await h.request(chat({ session: 'x' }));
      assert.equal(out.kind === 'local' && out.status, 503);
      await setWorkerState(g.admin, 'worker_2', 'healthy');
      const back = await h.request(chat({ session: 'x' }));
      assert.equal(back.kind === 'upstream' && back.cluster, 'worker_2');
    });

    test('a spoofed routing header is overwritten, even with no early header strip in front', async () => {
      const { g } = await gate();
      const cfg = harness(g.target).config;
      // Envoy then picks the route on the spoof; kvgate's answer clears the route cache.
      const bare = { ...cfg, earlyHeaderMutations: [] };
      const h = harness(g.target, { config: bare });
      harnesses.push(h);
      const honest = await h.request(chat({ session: 'spoof-me' }));
      const target = honest.cluster!;
      const liar = FLEET.workers.map((w) => w.id).find((id) => id !== target)!;
      const out = await h.request(chat({ session: 'spoof-me', headers: { 'x-kvgate-cluster': liar } }));
      assert.equal(out.kind, 'upstream');
      assert.equal(out.cluster, target);
      assert.deepEqual(out.requestHeaders.getAll('x-kvgate-cluster'), [target], 'exactly one value, the gate’s');
      // A body-less request is decided on its headers: also overwritten.
      const get = await h.request({ method: 'GET', path: '/v1/models', headers: { 'x-kvgate-cluster': 'evil', 'x-session-id': 'spoof-me' } });
      assert.equal(get.cluster, target);
    });

    test('every Envoy phase gets the reply type Envoy expects', async () => {
      const { h: base, g } = await gate();
      const h = harness(g.target, {
        processingModeOverride: { request_trailer_mode: 'SEND', response_body_mode: 'STREAMED', response_trailer_mode: 'SEND' },
      });
      harnesses.push(h);
      void base;
      const req = { ...chat({ session: 'phases' }), trailers: { 'x-trailer': '1' } };
      const out = await h.request(req, { status: 200, headers: { 'content-type': 'text/event-stream' }, chunks: [Buffer.from('data: a\n\n'), Buffer.from('data: b\n\n')], trailers: { 'grpc-status': '0' } });
      assert.equal(out.kind, 'upstream');
      assert.equal(out.spurious, false);
      const pairs = out.messages.map((m) => `${m.sent}->${m.reply}`);
      assert.deepEqual(pairs, [
        'request_headers->request_headers',
        'request_body->request_body',
        'request_trailers->request_trailers',
        'response_headers->response_headers',
        'response_body->response_body',
        'response_body->response_body',
        'response_trailers->response_trailers',
      ]);
    });

    test('STREAMED request bodies: the gate decides on the headers and answers every chunk in order', async () => {
      const { g } = await gate({ ...FLEET, routing: { request_body_mode: 'streamed' } });
      const h = harness(g.target, { processingModeOverride: { request_body_mode: 'STREAMED' } });
      harnesses.push(h);
      const body = Buffer.from(chat({ session: 's' }).body);
      const chunks = [body.subarray(0, 10), body.subarray(10, 40), body.subarray(40)];
      const a = await h.request({ ...chat({ session: 'streamy' }), chunks });
      const b = await h.request({ ...chat({ session: 'streamy' }), chunks });
      assert.equal(a.kind, 'upstream');
      assert.equal(a.cluster, b.cluster);
      assert.equal(a.messages.filter((m) => m.sent === 'request_body' && m.reply === 'request_body').length, 3);
      assert.equal(a.spurious, false);
    });

    test('requests sharing a long system prompt share a worker without any session', async () => {
      const { h } = await gate();
      const system = 'You are a careful assistant for the ACME support desk. '.repeat(60);
      const seen = new Set<string>();
      for (let i = 0; i < 5; i++) {
        const out = await h.request(chat({ system, text: `question ${i}` }));
        seen.add(out.cluster!);
      }
      assert.equal(seen.size, 1);
    });

    test('no leaked streams or in-flight counts after a burst of requests', async () => {
      const { g, h } = await gate();
      await Promise.all(Array.from({ length: 60 }, (_, i) => h.request(chat({ session: `burst-${i % 7}` }))));
      await waitFor(() => g.extproc.openStreams === 0, 3000, 'streams closed');
      await waitFor(async () => (await workers(g.admin)).every((w) => w.inflight === 0), 3000, 'leases released');
    });
  });
}
