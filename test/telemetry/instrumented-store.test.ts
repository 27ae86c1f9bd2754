/**
 * The instrumented store: every timed call lands in the duration histogram under its operation,
 * a thrown call or a degraded commit counts as that operation's error, and both reach the usage
 * of the request the call was made for (the scope passed with it), which the wrapped store gets
 * too. A release is timed but in no request (the request's decision is over by then). It changes
 * no result.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RoutingStore } from '../../src/state/store.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { InstrumentedStore } from '../../src/telemetry/instrumented-store.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { newStoreUsage, type RequestScope } from '../../src/util/request-scope.js';
import { commitRequest } from '../helpers/commits.js';

const scopeOf = (usage = newStoreUsage()): RequestScope => ({ logIds: { trace_id: 'a'.repeat(32), span_id: 'b'.repeat(16) }, storeUsage: usage });

const req = commitRequest({ workers: ['w1'], worker: 'w1' });

async function metricValue(m: Metrics, name: string, operation: string, suffix = ''): Promise<number | undefined> {
  const all = await m.registry.getMetricsAsJSON();
  const metric = all.find((x) => x.name === name);
  const v = metric?.values.find((x) => x.labels['operation'] === operation && (suffix === '' || (x as { metricName?: string }).metricName === `${name}${suffix}`));
  return v?.value;
}

test('calls are timed by operation; a throw and a degraded commit count as errors, in the calling request too', async () => {
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
  const scope = scopeOf(usage);
  const ok = await store.commit(req, scope);
  assert.ok(ok.ok, "ok.ok");
  await store.release(ok.lease);
  mode = 'degraded';
  const degraded = await store.commit(req, scope);
  assert.ok(degraded.ok && degraded.degraded, 'the result passes through unchanged');
  mode = 'throw';
  await assert.rejects(store.commit(req, scope), /boom/);
  // A call made for no request (background work) is timed, and counted in no request.
  const background = await store.commit(req).catch(() => undefined);
  assert.equal(background, undefined);
  assert.equal(await metricValue(metrics, 'kvgate_store_duration_seconds', 'commit', '_count'), 4);
  assert.equal(await metricValue(metrics, 'kvgate_store_duration_seconds', 'release', '_count'), 1);
  assert.equal(await metricValue(metrics, 'kvgate_store_errors_total', 'commit'), 3);
  assert.equal(await metricValue(metrics, 'kvgate_store_errors_total', 'release'), undefined);
  // The three commits; the release is in no request.
  assert.equal(usage.calls, 3);
  assert.ok(usage.seconds > 0, 'the time is added');
  assert.deepEqual(usage.errors, [
    { operation: 'commit', message: 'shared store unreachable; committed on local state' },
    { operation: 'commit', message: 'boom' },
  ]);
});

test('each request counts its own calls, after awaits and interleaved with other requests', async () => {
  const inner = new MemoryStore();
  const slow: RoutingStore = Object.create(inner) as RoutingStore;
  slow.snapshot = async (q) => {
    await new Promise((r) => setTimeout(r, 5));
    return inner.snapshot(q);
  };
  const store = new InstrumentedStore(slow, new Metrics({ processMetrics: false }));
  const a = scopeOf();
  const b = scopeOf();
  const q = { pool: 'p', key: undefined, workers: ['w1'], blocks: [] };
  // Two requests in flight at once: a makes three calls, b one; each after an await of its own.
  await Promise.all([
    (async () => {
      await store.snapshot(q, a);
      await store.snapshot(q, a);
      const res = await store.commit(req, a);
      assert.ok(res.ok, "res.ok");
    })(),
    (async () => {
      await new Promise((r) => setTimeout(r, 1));
      await store.snapshot(q, b);
    })(),
  ]);
  assert.equal(a.storeUsage.calls, 3);
  assert.equal(b.storeUsage.calls, 1);
});

test('the wrapped store gets the request scope of each call it makes on a request’s behalf', async () => {
  const seen: Array<[string, RequestScope | undefined]> = [];
  const inner: RoutingStore = new MemoryStore();
  const spy: RoutingStore = Object.create(inner) as RoutingStore;
  spy.commit = (r, s) => (seen.push(['commit', s]), inner.commit(r, s));
  spy.snapshot = (q, s) => (seen.push(['snapshot', s]), inner.snapshot(q, s));
  let released = 0;
  spy.release = (l) => (released++, inner.release(l));
  spy.responseWorker = (p, h, s) => (seen.push(['response_worker', s]), inner.responseWorker(p, h, s));
  spy.recordResponse = (p, h, w, t, s) => (seen.push(['record_response', s]), inner.recordResponse(p, h, w, t, s));
  const store = new InstrumentedStore(spy, new Metrics({ processMetrics: false }));
  const scope = scopeOf();
  await store.snapshot({ pool: 'p', key: undefined, workers: ['w1'], blocks: [] }, scope);
  const res = await store.commit(req, scope);
  assert.ok(res.ok, "res.ok");
  await store.release(res.lease);
  await store.recordResponse('p', 'h', 'w1', 1000, scope);
  await store.responseWorker('p', 'h', scope);
  assert.equal(released, 1, 'the release reached the wrapped store');
  assert.deepEqual(seen.map(([op]) => op), ['snapshot', 'commit', 'record_response', 'response_worker']);
  for (const [op, s] of seen) assert.equal(s, scope, `${op} got the request's scope`);
});

test('a store call that throws before returning a promise still answers with a rejection, timed and counted in the calling request', async () => {
  const flaky: RoutingStore = Object.create(new MemoryStore()) as RoutingStore;
  flaky.commit = () => {
    throw new Error('thrown synchronously');
  };
  const metrics = new Metrics({ processMetrics: false });
  const store = new InstrumentedStore(flaky, metrics);
  const usage = newStoreUsage();
  let answer: Promise<unknown> | undefined;
  assert.doesNotThrow(() => (answer = store.commit(req, scopeOf(usage))), 'no synchronous throw into the request path');
  await assert.rejects(answer!, /thrown synchronously/);
  assert.equal(await metricValue(metrics, 'kvgate_store_duration_seconds', 'commit', '_count'), 1);
  assert.equal(await metricValue(metrics, 'kvgate_store_errors_total', 'commit'), 1);
  assert.deepEqual(usage.errors, [{ operation: 'commit', message: 'thrown synchronously' }]);
});
