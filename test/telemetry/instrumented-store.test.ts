/**
 * The instrumented store: every timed call lands in the duration histogram under its operation,
 * a thrown call or a degraded commit counts as that operation's error, and both reach the usage
 * of the request in whose context the call ran. It changes no result.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import type { CommitRequest, RoutingStore } from '../../src/state/store.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { InstrumentedStore, newStoreUsage, STORE_USAGE_KEY } from '../../src/telemetry/instrumented-store.js';
import { Metrics } from '../../src/telemetry/metrics.js';

const req: CommitRequest = {
  pool: 'p',
  key: undefined,
  workers: ['w1'],
  blocks: [],
  worker: 'w1',
  preconditions: { affinity: undefined, below: [], atOrAbove: [], states: [] },
  affinityTtlMs: 60_000,
  prefixTtlMs: 60_000,
  capacityBlocks: 100,
};

async function metricValue(m: Metrics, name: string, operation: string, suffix = ''): Promise<number | undefined> {
  const all = await m.registry.getMetricsAsJSON();
  const metric = all.find((x) => x.name === name);
  const v = metric?.values.find((x) => x.labels['operation'] === operation && (suffix === '' || (x as { metricName?: string }).metricName === `${name}${suffix}`));
  return v?.value;
}

test('calls are timed by operation; a throw and a degraded commit count as errors, in the calling request too', async () => {
  const manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
  try {
    const inner = new MemoryStore();
    let mode: 'ok' | 'throw' | 'degraded' = 'ok';
    const flaky: RoutingStore = Object.create(inner) as RoutingStore;
    flaky.commit = async (r) => {
      if (mode === 'throw') throw new Error('boom');
      const res = await inner.commit(r);
      return mode === 'degraded' && res.ok ? { ...res, degraded: true } : res;
    };
    const metrics = new Metrics({ processMetrics: false });
    const store = new InstrumentedStore(flaky, metrics);
    const usage = newStoreUsage();
    await context.with(ROOT_CONTEXT.setValue(STORE_USAGE_KEY, usage), async () => {
      const ok = await store.commit(req);
      assert.ok(ok.ok);
      await store.release(ok.lease);
      mode = 'degraded';
      const degraded = await store.commit(req);
      assert.ok(degraded.ok && degraded.degraded, 'the result passes through unchanged');
      mode = 'throw';
      await assert.rejects(store.commit(req), /boom/);
    });
    assert.equal(await metricValue(metrics, 'kvgate_store_duration_seconds', 'commit', '_count'), 3);
    assert.equal(await metricValue(metrics, 'kvgate_store_duration_seconds', 'release', '_count'), 1);
    assert.equal(await metricValue(metrics, 'kvgate_store_errors_total', 'commit'), 2);
    assert.equal(await metricValue(metrics, 'kvgate_store_errors_total', 'release'), undefined);
    assert.equal(usage.calls, 4);
    assert.deepEqual(usage.errors, [
      { operation: 'commit', message: 'shared store unreachable; committed on local state' },
      { operation: 'commit', message: 'boom' },
    ]);
  } finally {
    context.disable();
  }
});

test('a store call that throws before returning a promise still answers with a rejection, timed and counted in the calling request', async () => {
  const manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
  try {
    const flaky: RoutingStore = Object.create(new MemoryStore()) as RoutingStore;
    flaky.commit = () => {
      throw new Error('thrown synchronously');
    };
    const metrics = new Metrics({ processMetrics: false });
    const store = new InstrumentedStore(flaky, metrics);
    const usage = newStoreUsage();
    await context.with(ROOT_CONTEXT.setValue(STORE_USAGE_KEY, usage), async () => {
      let answer: Promise<unknown> | undefined;
      assert.doesNotThrow(() => (answer = store.commit(req)), 'no synchronous throw into the request path');
      await assert.rejects(answer!, /thrown synchronously/);
    });
    assert.equal(await metricValue(metrics, 'kvgate_store_duration_seconds', 'commit', '_count'), 1);
    assert.equal(await metricValue(metrics, 'kvgate_store_errors_total', 'commit'), 1);
    assert.deepEqual(usage.errors, [{ operation: 'commit', message: 'thrown synchronously' }]);
  } finally {
    context.disable();
  }
});
