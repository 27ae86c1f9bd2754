/**
 * DCGM on a shared node: the exporter reports every GPU of its node, and a worker that names its
 * own (`dcgm_gpus`) is judged by those alone.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { parseConfig } from '../../src/config/load.js';
import { parseSignals } from '../../src/signals/parse.js';
import { waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { startMetricsServer } from '../helpers/metrics-server.js';

/** A node of four GPUs: GPU 2 is hot (90 °C) and full. */
const NODE = [0, 1, 2, 3]
  .flatMap((i) => {
    const l = `gpu="${i}",UUID="GPU-${'abcd'[i]}",device="nvidia${i}"`;
    return [`DCGM_FI_DEV_GPU_TEMP{${l}} ${i === 2 ? 90 : 40}`, `DCGM_FI_DEV_FB_USED{${l}} ${i === 2 ? 79000 : 20000}`, `DCGM_FI_DEV_FB_FREE{${l}} ${i === 2 ? 1000 : 60000}`];
  })
  .join('\n')
  .concat('\n');

describe('dcgm_gpus', () => {
  test('only the named GPUs (by index or UUID) count; none named is every GPU on the page', () => {
    assert.deepEqual(parseSignals(NODE, 'vllm').signals, { fbUsedMiB: 79000, fbFreeMiB: 1000, gpuTempC: 90 });
    assert.deepEqual(parseSignals(NODE, 'vllm', { gpus: ['0', 'GPU-b'] }).signals, { fbUsedMiB: 20000, fbFreeMiB: 60000, gpuTempC: 40 });
    assert.equal(parseSignals(NODE, 'vllm', { gpus: ['GPU-c'] }).signals.gpuTempC, 90);
    // A list that names no GPU on the page reads nothing, and says so.
    const none = parseSignals(NODE, 'vllm', { gpus: ['7'] });
    assert.deepEqual(none.signals, {});
    assert.match(none.problems.join(';'), /no series for dcgm_gpus 7/);
  });

  test('config: indices or UUIDs, as numbers or strings; `all` by default', () => {
    const c = parseConfig({ workers: [{ id: 'a', cluster: 'a', dcgm_gpus: [0, 'GPU-b', '3'] }, { id: 'b', cluster: 'b' }] });
    assert.deepEqual(c.workers[0]!.dcgm_gpus, ['0', 'GPU-b', '3']);
    assert.equal(c.workers[1]!.dcgm_gpus, DEFAULTS.dcgmGpus);
    assert.equal(DEFAULTS.dcgmGpus, 'all');
    for (const bad of [[], [-1], [''], 'some']) assert.throws(() => parseConfig({ workers: [{ id: 'a', cluster: 'a', dcgm_gpus: bad }] }), /dcgm_gpus/);
  });

  test("a gate reads the worker's own GPUs: another worker's hot GPU on the same node does not make it pressured", async () => {
    const engine = await startMetricsServer({ running: 1, waiting: 0, kv: 0.2 });
    const dcgm = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(NODE));
    await new Promise<void>((r) => dcgm.listen(0, '127.0.0.1', r));
    const dcgmUrl = `http://127.0.0.1:${(dcgm.address() as AddressInfo).port}/metrics`;
    let g: TestGate | undefined;
    try {
      g = await startTestGate({
        workers: [
          { id: 'mine', cluster: 'worker_1', metrics_url: engine.url, dcgm_url: dcgmUrl, dcgm_gpus: [0, 1] },
          { id: 'hot', cluster: 'worker_2', metrics_url: engine.url, dcgm_url: dcgmUrl, dcgm_gpus: ['GPU-c', 'GPU-d'] },
        ],
      });
      const admin = g.admin;
      const state = async (id: string) => (await workers(admin)).find((w) => w.id === id)?.state;
      await waitFor(async () => (await state('hot')) === 'pressured', 3000, 'the worker on the hot GPU is pressured');
      assert.equal(await state('mine'), 'healthy');
    } finally {
      await g?.close(100);
      await engine.close();
      dcgm.closeAllConnections();
      await new Promise((r) => dcgm.close(r));
    }
  });
});
