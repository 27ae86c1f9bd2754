/**
 * Config changes without a restart: the watched file is re-read on change and swapped in whole;
 * requests in flight keep their streams and leases; an invalid file changes nothing and the log
 * says why; settings that need a restart are kept and named; SIGHUP re-reads the file.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { stringify } from 'yaml';
import type { EnvoyHarness, LocalOutcome } from '../harness/envoy-harness.js';
import { withExtProc } from '../harness/envoy-config.js';
import { chat, envoyConfig, harness, waitFor } from '../helpers/envoy.js';
import { setWorkerState, startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { startGateProcess } from '../helpers/gate-process.js';
import { startMetricsServer } from '../helpers/metrics-server.js';
import { recordingLogger } from '../helpers/logger.js';
import { HeldRequests } from './helpers.js';
import { parseConfig } from '../../src/config/load.js';
import { startRedis } from '../helpers/redis-server.js';
import { monitorRedis, type RedisMonitor } from '../helpers/redis-monitor.js';
import { scrape } from '../telemetry/prometheus.js';

function fleet(maxInflight: number, extra: Record<string, unknown> = {}, ids = ['w1', 'w2']) {
  return {
    limits: { max_inflight: maxInflight },
    ...extra,
    workers: ids.map((id, i) => ({ id, cluster: `worker_${i + 1}` })),
  };
}

/** Replaces the file the way editors and ConfigMap updates do: write aside, then rename over it. */
function writeAtomically(file: string, text: string): void {
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

function tempConfig(config: unknown): string {
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'kvgate-reload-')), 'kvgate.yaml');
  writeFileSync(file, stringify(config));
  return file;
}

describe('config reload', () => {
  const gates: TestGate[] = [];
  const harnesses: EnvoyHarness[] = [];
  after(async () => {
    for (const h of harnesses) h.close();
    for (const g of gates) await g.close(100);
  });
  async function setup(config: unknown) {
    const file = tempConfig(config);
    const { logger, lines } = recordingLogger('debug');
    const g = await startTestGate(config, { configFile: file, reloadDebounceMs: 30, logger });
    const h = harness(g.target, { config: withExtProc(envoyConfig(), { messageTimeoutMs: 10_000 }) });
    gates.push(g);
    harnesses.push(h);
    const logged = (msg: string) => lines.filter((l) => l['msg'] === msg);
    return { file, g, h, lines, logged };
  }

  test('a new threshold applies at once; open streams finish on their leases; an invalid file changes nothing', async () => {
    const { file, g, h, logged } = await setup(fleet(2));
    const held = new HeldRequests(h, g);
    await held.hold(['a', 'b', 'c', 'd'].map((s) => chat({ session: s })));
    assert.equal(((await h.request(chat({ session: 'e' }))) as LocalOutcome).status, 429, 'full at 2 per worker');

    writeAtomically(file, stringify(fleet(3)));
    await waitFor(() => g.gate.currentConfig.limits.max_inflight === 3, 5000, 'the reload');
    assert.equal(logged('config reloaded').length, 1);
    assert.deepEqual(logged('config reloaded')[0]!['changed'], ['limits'], 'the log says what the reload changed');
    await held.hold(['e', 'f'].map((s) => chat({ session: s })));
    assert.ok(g.results.slice(-2).every((r) => r.kind === 'route'), 'room for one more on each worker at 3');
    assert.equal(((await h.request(chat({ session: 'g' }))) as LocalOutcome).status, 429, 'full again at 3 per worker');
    const running = g.gate.currentConfig;

    // Invalid by schema, then not YAML at all: both refused, the running config stays.
    writeAtomically(file, stringify({ ...fleet(9), routing: { shed_status: 418 } }));
    await waitFor(() => logged('config reload rejected; keeping the running config').length === 1, 5000, 'the rejection');
    writeAtomically(file, 'workers: [ {id: w1\n');
    await waitFor(() => logged('config reload rejected; keeping the running config').length === 2, 5000, 'the second rejection');
    const [schemaError, yamlError] = logged('config reload rejected; keeping the running config');
    assert.match(String(schemaError!['err']), /routing\.shed_status/);
    assert.match(String(yamlError!['err']), /not valid YAML/);
    assert.equal(g.gate.currentConfig, running, 'the very same config object');
    assert.equal(((await h.request(chat({ session: 'g' }))) as LocalOutcome).status, 429, 'still 3 per worker, not the 9 of the rejected file');

    // The streams held since before both reloads finish normally and give their leases back.
    for (const out of await held.release()) assert.equal(out.kind === 'upstream' && out.responseStatus, 200);
    await waitFor(async () => (await workers(g.admin)).every((w) => w.inflight === 0), 3000, 'leases released');
  });

  test('a worker removed by a reload finishes its open request; restart-only settings are kept and named', async () => {
    const { file, g, h, logged } = await setup(fleet(4));
    const held = new HeldRequests(h, g);
    await held.hold(Array.from({ length: 8 }, (_, i) => chat({ session: `s${i}` })));
    const onW2 = g.results.filter((r) => r.kind === 'route' && r.worker === 'w2').length;
    assert.ok(onW2 > 0, "onW2 > 0");

    const storeTimeout = g.gate.currentConfig.store.timeout_ms;
    writeAtomically(file, stringify(fleet(4, { store: { timeout_ms: storeTimeout + 899 } }, ['w1'])));
    await waitFor(() => g.gate.currentConfig.workers.length === 1, 5000, 'the reload');
    const line = logged('config reloaded')[0]!;
    assert.deepEqual(line['restart_needed'], ['store']);
    assert.deepEqual([line['changed'], line['workers_added'], line['workers_removed']], [['pools', 'workers'], [], ['w2']]);
    assert.equal(g.gate.currentConfig.store.timeout_ms, storeTimeout, 'the running store settings stay until a restart');
    assert.deepEqual((await workers(g.admin)).map((w) => w.id), ['w1']);

    for (const out of await held.release()) assert.equal(out.kind, 'upstream');
    // New requests only reach the remaining worker.
    for (let i = 0; i < 3; i++) assert.equal((await h.request(chat({ session: `n${i}` }))).cluster, 'worker_1');
  });

  test('the last reload\'s outcome is a metric: an alert sees a rejected file before the next rollout needs it', async () => {
    const { file, g, logged } = await setup(fleet(2));
    const m0 = await scrape(g.admin);
    assert.equal(m0.value('kvgate_config_last_reload_successful'), 1, 'the startup config counts as loaded');
    for (const outcome of ['applied', 'unchanged', 'rejected']) assert.equal(m0.value('kvgate_config_reloads_total', { outcome }), 0, outcome);
    assert.equal(m0.value('kvgate_config_restart_pending'), 0);

    writeAtomically(file, 'workers: [ {id: w1\n');
    await waitFor(() => logged('config reload rejected; keeping the running config').length === 1, 5000, 'the rejection');
    const m1 = await scrape(g.admin);
    assert.equal(m1.value('kvgate_config_last_reload_successful'), 0, 'the file on disk is not the one running');
    // At least once: the stat poll may read the same bad file again.
    assert.ok((m1.value('kvgate_config_reloads_total', { outcome: 'rejected' }) ?? 0) >= 1, 'the rejection is counted');

    const storeTimeout = g.gate.currentConfig.store.timeout_ms;
    writeAtomically(file, stringify(fleet(3, { store: { timeout_ms: storeTimeout + 1 } })));
    await waitFor(() => g.gate.currentConfig.limits.max_inflight === 3, 5000, 'the reload');
    const m2 = await scrape(g.admin);
    assert.equal(m2.value('kvgate_config_last_reload_successful'), 1);
    assert.equal(m2.value('kvgate_config_reloads_total', { outcome: 'applied' }), 1);
    assert.equal(m2.value('kvgate_config_restart_pending'), 1, 'store.* waits for a restart');
  });

  test('a file edit of restart-only settings alone is said at info, with what needs a restart', async () => {
    const { file, g, lines } = await setup(fleet(4));
    const storeTimeout = g.gate.currentConfig.store.timeout_ms;
    writeAtomically(file, stringify(fleet(4, { store: { timeout_ms: storeTimeout + 899 } })));
    await waitFor(() => lines.some((l) => l['msg'] === 'config re-read; nothing to change'), 5000, 'the re-read');
    const line = lines.find((l) => l['msg'] === 'config re-read; nothing to change')!;
    assert.deepEqual(line['restart_needed'], ['store']);
    assert.equal(line['level'], 30, 'at info: an operator at the default log level sees it');
  });

  test('a worker moved to another pool keeps a drain, and its new pool\'s scrapes speak for it, not its old pool\'s', async () => {
    const m = await startMetricsServer({ kv: 0.1 });
    try {
      const sig = { interval_ms: 20, stale_after_ms: 400 };
      // w moves from pool a to pool b, which is listed first: the old pool's frozen record must not win.
      const before = { signals: sig, pools: [
        { name: 'b', models: ['mb'], workers: [{ id: 'x', cluster: 'x' }] },
        { name: 'a', models: ['ma'], workers: [{ id: 'w', cluster: 'w', metrics_url: m.url }, { id: 'y', cluster: 'y' }] },
      ] };
      const { file, g, logged } = await setup(before);
      await waitFor(async () => (await workers(g.admin)).find((w) => w.id === 'w')?.state === 'healthy', 5000, 'w healthy');
      await setWorkerState(g.admin, 'y', 'draining');
      writeAtomically(file, stringify({ signals: sig, pools: [
        { name: 'b', models: ['mb'], workers: [{ id: 'x', cluster: 'x' }, { id: 'w', cluster: 'w', metrics_url: m.url }, { id: 'y', cluster: 'y' }] },
        { name: 'a', models: ['ma'], workers: [{ id: 'z', cluster: 'z' }] },
      ] }));
      await waitFor(() => logged('workers moved to another pool by the reload: operator states carried over; in-flight counts, sessions and prefix history start afresh there').length > 0, 5000, 'the move');
      assert.equal((await workers(g.admin)).find((w) => w.id === 'y')?.state, 'draining', 'the drain holds in the new pool');
      // Past stale_after_ms: a record the old pool kept would have aged into "down" by now.
      await new Promise((r) => setTimeout(r, 800));
      assert.equal((await workers(g.admin)).find((w) => w.id === 'w')?.state, 'healthy');
    } finally {
      await m.close();
    }
  });

  test('the first worker with metrics, added by a reload, is scraped and becomes healthy', async () => {
    // No worker has metrics at startup, so the signal collector has nothing to run yet.
    const { file, g, h } = await setup(fleet(4));
    const metrics = await startMetricsServer({ kv: 0.2 });
    try {
      const config = fleet(4);
      writeAtomically(file, stringify({ ...config, workers: [...config.workers, { id: 'w3', cluster: 'worker_3', metrics_url: metrics.url }] }));
      await waitFor(async () => (await workers(g.admin)).find((w) => w.id === 'w3')?.state === 'healthy', 5000, 'w3 healthy from its first scrape');
      // And it takes traffic: with w1 and w2 drained, new sessions go to w3.
      for (const id of ['w1', 'w2']) await setWorkerState(g.admin, id, 'draining');
      assert.equal((await h.request(chat({ session: 'to-w3' }))).cluster, 'worker_3');

      // A new signals cadence restarts the collector's loops at the new intervals.
      assert.deepEqual(g.collector.loopIntervals, { heartbeatMs: 500, readMs: 100 });
      writeAtomically(file, stringify({ ...config, signals: { interval_ms: 40, stale_after_ms: 800 }, workers: [...config.workers, { id: 'w3', cluster: 'worker_3', metrics_url: metrics.url }] }));
      await waitFor(() => g.collector.loopIntervals.readMs === 80, 5000, 'the new read interval');
      assert.equal(g.collector.loopIntervals.heartbeatMs, 200);
    } finally {
      await metrics.close();
    }
  });
});

test('SIGHUP re-reads the config file and does not end the process', async () => {
  const file = tempConfig(fleet(4));
  const gate = await startGateProcess(['--config', file]);
  const h = harness(gate.target, { config: withExtProc(envoyConfig(), { messageTimeoutMs: 10_000 }) });
  try {
    gate.proc.kill('SIGHUP');
    await waitFor(() => gate.lines.some((l) => l['msg'] === 'config re-read; nothing to change' && l['trigger'] === 'SIGHUP'), 5000, 'the SIGHUP line');
    assert.equal(gate.proc.exitCode, null, 'still running');
    assert.equal((await h.request(chat({ session: 'after-hup' }))).kind, 'upstream');
  } finally {
    h.close();
    await gate.stop();
  }
});

test('Redis: a pool a reload removed is no longer polled once nothing of this replica is left in it', async () => {
  const redis = await startRedis();
  const mk = (pools: string[]) => ({ store: { refresh_ms: 50 }, pools: pools.map((p, i) => ({ name: p, ...(i ? { models: [p] } : {}), workers: [{ id: `w_${p}`, cluster: `c_${p}` }] })) });
  const g = await startTestGate(mk(['keep', 'gone']), { store: redis.url });
  let monitor: RedisMonitor | undefined;
  try {
    // /workers reads every pool, so the store has a view of each.
    await fetch(`${g.admin}/workers`).then((r) => r.arrayBuffer());
    g.gate.reconfigure(parseConfig(mk(['keep'])));
    await new Promise((r) => setTimeout(r, 200));
    monitor = monitorRedis(redis.port);
    await monitor.ready;
    await new Promise((r) => setTimeout(r, 500));
    const all = [...monitor.commands];
    const seen = all.filter((c) => c.args.some((a) => a.includes('{gone}'))).map((c) => c.args[0]!);
    assert.ok(all.some((c) => c.args.some((a) => a.includes('{keep}'))), 'the monitor saw the kept pool polled (it sees commands at all)');
    assert.deepEqual(seen, [], 'no command on the removed pool\'s keys (refresh_ms is 50)');
  } finally {
    monitor?.close();
    await g.close(100);
    await redis.stop();
  }
});

test('a reload that gives serving workers a metrics_url keeps them serving until their first figures, for at most stale_after_ms', async () => {
  // Judged on no data at once, both were down from the reload to the first read of their scrapes:
  // 503s, and sessions moved off workers that were fine.
  const { Gate } = await import('../../src/gate/gate.js');
  const { MemoryStore } = await import('../../src/state/memory-store.js');
  const { initHashing } = await import('../../src/request/hashing.js');
  const { silentLogger } = await import('../helpers/logger.js');
  const { chatRequest } = await import('../helpers/requests.js');
  await initHashing();
  let now = 0;
  const plain = parseConfig({ workers: [{ id: 'w1', cluster: 'c1' }, { id: 'w2', cluster: 'c2' }] }, 'test');
  const scraped = parseConfig(
    { signals: { stale_after_ms: 2000 }, workers: ['w1', 'w2', 'w3'].map((id) => ({ id, cluster: id.replace('w', 'c'), metrics_url: `http://127.0.0.1:9/${id}` })) },
    'test',
  );
  const store = new MemoryStore();
  const gate = new Gate(plain, store, silentLogger(), () => now);
  const states = () => gate.views(store.cachedSnapshot({ pool: 'default', key: undefined, workers: ['w1', 'w2', 'w3'], blocks: [] })).map((v) => v.state);
  const first = await gate.route(chatRequest('hello', { session: 'S' }));
  assert.equal(first.kind, 'route');
  if (first.kind !== 'route') return;
  await gate.release(first.lease);

  gate.reconfigure(scraped);
  assert.deepEqual(states(), ['healthy', 'healthy', 'down'], 'served before: kept; new to the config: down until its figures come');
  const again = await gate.route(chatRequest('hello again', { session: 'S' }));
  assert.equal(again.kind === 'route' && again.outcome, 'affinity_hit');
  if (again.kind === 'route') await gate.release(again.lease);

  // The first record read judges a worker; the others keep their verdict meanwhile, failed reads too.
  now = 500;
  gate.setSignals(new Map([['w1', { signals: { running: 1, waiting: 0, kvUsage: 0.95 }, ageMs: 0, failures: 0 }]]));
  assert.deepEqual(states(), ['pressured', 'healthy', 'down']);
  now = 1900;
  gate.ageSignals();
  assert.equal(states()[1], 'healthy');
  // No record stale_after_ms after the reload: judged on no data, down.
  now = 2000;
  gate.setSignals(new Map([['w1', { signals: { running: 1, waiting: 0, kvUsage: 0.2 }, ageMs: 0, failures: 0 }]]));
  assert.deepEqual(states(), ['healthy', 'down', 'down']);
  assert.deepEqual(gate.signalsOf('w2')?.verdict.codes, ['no_data']);
});
