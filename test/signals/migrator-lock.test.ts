/**
 * Two replicas may both own a worker for a heartbeat: both Migrators are told it turned pressured,
 * and the store's lock lets one round of offload events through, not two.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import type { Pool } from '../../src/gate/pools.js';
import { Migrator } from '../../src/signals/migrator.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import type { OffloadEvent } from '../../src/state/store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

test('two Migrators on one store, both told a worker turned pressured: one round of offload events', async () => {
  const config = parseConfig({ migration: { fraction: 0.5 }, workers: [{ id: 'w1', cluster: 'c1' }, { id: 'w2', cluster: 'c2' }] }, 'test');
  const store = new MemoryStore();
  const gate = new Gate(config, store, silentLogger());
  // Every session on w1: w2 is drained while they are placed, then takes work again.
  await store.setWorkerState(gate.pool, 'w2', 'draining');
  for (let i = 0; i < 8; i++) {
    const r = await gate.route(chatRequest(`turn of session ${i}`, { session: `mig-${i}` }));
    assert.ok(r.kind === 'route' && r.worker === 'w1', "r.kind === 'route' && r.worker === 'w1'");
    if (r.kind === 'route') await gate.release(r.lease);
  }
  await store.setWorkerState(gate.pool, 'w2', undefined);
  const events: OffloadEvent[] = [];
  store.onOffload((e) => events.push(e));
  const a = new Migrator<Pool>(gate, store, silentLogger());
  const b = new Migrator<Pool>(gate, store, silentLogger());
  await a.pressured('w1', 'kv_pressure', true);
  await b.pressured('w1', 'kv_pressure', true);
  assert.equal(events.length, 4, 'half of the 8 sessions, once');
  assert.ok(events.every((e) => e.from === 'w1' && e.to === 'w2'), "events.every((e) => e.from === 'w1' && e.to === 'w2')");
});
