/**
 * Pools together with what main gained beside them: worker signals and preemptive migration work in
 * a pool other than the default one (signals, sessions and moves stay in the worker's pool), and in
 * endpoint-picker mode the subset hint is intersected with the request's pool and served-endpoint
 * feedback never moves an affinity across pools. Real gates, the Envoy harness, real HTTP metrics
 * endpoints.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadEnvoyConfig } from '../harness/envoy-config.js';
import type { EnvoyHarness, Outcome } from '../harness/envoy-harness.js';
import { chat, harness, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const LLAMA = 'llama';
const MISTRAL = 'mistral';

/** A worker's Prometheus page (vLLM names) whose KV use a test sets. */
class MetricsPage {
  kvUsage = 0.1;
  private readonly server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc ${this.kvUsage}\n`);
  });
  url = '';
  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/metrics`;
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

interface AdminWorker {
  id: string;
  pool: string;
  state: string;
  signals?: { kv_usage?: number };
}

async function adminWorkers(g: TestGate): Promise<AdminWorker[]> {
  return ((await (await fetch(`${g.admin}/workers`)).json()) as { workers: AdminWorker[] }).workers;
}

describe('pools with worker signals', () => {
  const pages = [new MetricsPage(), new MetricsPage()];
  let g: TestGate;
  let h: EnvoyHarness;
  before(async () => {
    await Promise.all(pages.map((p) => p.start()));
    g = await startTestGate({
      migration: { fraction: 1, interval_ms: 60_000 },
      pools: [
        { name: 'llama', models: [LLAMA], workers: [{ id: 'l1', cluster: 'worker_1' }] },
        {
          name: 'mistral',
          models: [MISTRAL],
          workers: [
            { id: 'm1', cluster: 'worker_2', metrics_url: pages[0]!.url },
            { id: 'm2', cluster: 'worker_3', metrics_url: pages[1]!.url },
          ],
        },
      ],
    });
    h = harness(g.target);
  });
  after(async () => {
    h.close();
    await g.close(100);
    await Promise.all(pages.map((p) => p.close()));
  });

  test("a non-default pool's workers are scraped, judged and shown with their pool", async () => {
    await waitFor(async () => (await adminWorkers(g)).filter((w) => w.pool === 'mistral').every((w) => w.state === 'healthy'), 3000, 'mistral workers healthy');
    const ws = await adminWorkers(g);
    assert.deepEqual(
      ws.map((w) => [w.id, w.pool]),
      [
        ['l1', 'llama'],
        ['m1', 'mistral'],
        ['m2', 'mistral'],
      ],
    );
    assert.equal(ws.find((w) => w.id === 'm1')?.signals?.kv_usage, 0.1);
  });

  test("a pressured worker's sessions move to a healthy worker of its own pool, never to another pool", async () => {
    const onM1: string[] = [];
    for (let i = 0; i < 12; i++) {
      const out = await h.request(chat({ session: `s-${i}`, model: MISTRAL }));
      assert.ok(out.cluster === 'worker_2' || out.cluster === 'worker_3', `mistral pool only (${out.cluster})`);
      if (out.cluster === 'worker_2') onM1.push(`s-${i}`);
    }
    assert.ok(onM1.length > 0, 'some sessions on m1');
    pages[0]!.kvUsage = 0.95;
    await waitFor(async () => (await adminWorkers(g)).find((w) => w.id === 'm1')?.state === 'pressured', 3000, 'm1 pressured');
    // migration.fraction 1: every session of m1 moves at once, to m2 (l1 is another pool).
    await waitFor(async () => {
      for (const s of onM1) if ((await h.request(chat({ session: s, model: MISTRAL, text: 'again' }))).cluster !== 'worker_3') return false;
      return true;
    }, 3000, 'sessions moved to m2');
    pages[0]!.kvUsage = 0.1;
    await waitFor(async () => (await adminWorkers(g)).find((w) => w.id === 'm1')?.state === 'healthy', 3000, 'm1 healthy again');
  });
});

describe('pools in endpoint-picker mode', () => {
  const EPP_ENVOY = path.resolve(import.meta.dirname, '../../envoy/endpoint-picker/envoy.yaml');
  const L1 = '10.0.0.1:8000';
  const M1 = '10.0.0.2:8000';
  const M2 = '10.0.0.3:8000';
  const subset = (...endpoints: string[]) => ({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': endpoints } });
  const served = (endpoint: string) => ({ status: 200, metadata: { 'envoy.lb': { 'x-gateway-destination-endpoint-served': endpoint } } });
  const endpointOf = (out: Outcome) => (out.kind === 'upstream' ? out.endpoint : undefined);
  let g: TestGate;
  let h: EnvoyHarness;
  before(async () => {
    g = await startTestGate({
      routing: { protocol: 'endpoint_picker' },
      pools: [
        { name: 'llama', models: [LLAMA], workers: [{ id: 'l1', address: L1 }] },
        { name: 'mistral', models: [MISTRAL], workers: [{ id: 'm1', address: M1 }, { id: 'm2', address: M2 }] },
      ],
    });
    h = harness(g.target, { config: loadEnvoyConfig(EPP_ENVOY) });
  });
  after(async () => {
    h.close();
    await g.close(100);
  });

  test("the subset hint is intersected with the request's pool", async () => {
    const other = await h.request({ ...chat({ session: 'x', model: MISTRAL }), metadata: subset(L1) });
    assert.equal(other.kind === 'local' && other.status, 503, 'only another pool in the subset: 503');
    for (let i = 0; i < 5; i++) {
      assert.equal(endpointOf(await h.request({ ...chat({ session: `h-${i}`, model: MISTRAL }), metadata: subset(L1, M2) })), M2);
    }
  });

  test('served-endpoint feedback moves an affinity within the pool, never across pools', async () => {
    const home = endpointOf(await h.request(chat({ session: 'fb', model: MISTRAL })));
    assert.ok(home === M1 || home === M2, "home === M1 || home === M2");
    const sibling = home === M1 ? M2 : M1;
    // Served by a worker of another pool: ignored, the affinity stays.
    await h.request(chat({ session: 'fb', model: MISTRAL, text: 'a' }), served(L1));
    assert.equal(endpointOf(await h.request(chat({ session: 'fb', model: MISTRAL, text: 'b' }))), home);
    // Served by the other worker of its pool: the affinity follows.
    await h.request(chat({ session: 'fb', model: MISTRAL, text: 'c' }), served(sibling));
    assert.equal(endpointOf(await h.request(chat({ session: 'fb', model: MISTRAL, text: 'd' }))), sibling);
  });
});
