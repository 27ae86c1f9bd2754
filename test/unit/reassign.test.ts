/**
 * Gate.reassign: when the proxy reports that another worker served a request (endpoint-picker
 * mode), the session's affinity moves there through a commit whose lease is handed back at once.
 * Red when that lease is not released: the worker the session moved to would count a request
 * nobody runs until the lease lapses.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

test('a reassignment moves the affinity and leaves no request in flight on either worker', async () => {
  const config = parseConfig({ workers: ['w1', 'w2', 'w3'].map((id) => ({ id, cluster: id })) }, 'test');
  const store = new MemoryStore();
  const gate = new Gate(config, store, silentLogger());
  const first = await gate.route(chatRequest('hello', { session: 'moved-by-the-proxy' }));
  assert.ok(first.kind === 'route' && first.key, 'routed with a key');
  await gate.release(first.lease);
  const to = ['w1', 'w2', 'w3'].find((w) => w !== first.worker)!;
  assert.equal(await gate.reassign(first.key, first.worker, to), true, 'moved');
  const snap = await store.snapshot({ pool: 'default', key: first.key.hash, workers: ['w1', 'w2', 'w3'], blocks: [] });
  for (const w of ['w1', 'w2', 'w3']) assert.equal(snap.inflight.get(w) ?? 0, 0, `nothing in flight on ${w}`);
  const next = await gate.route(chatRequest('hello again', { session: 'moved-by-the-proxy' }));
  assert.ok(next.kind === 'route', 'routed');
  assert.equal(next.worker, to, 'the session follows the worker that served it');
  await gate.release(next.lease);
});
