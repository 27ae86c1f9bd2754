/**
 * A shed says why: every eligible worker at its in-flight limit, or pressured (with the causes its
 * signals gave), or both. A fleet under KV pressure was answered "at its in-flight limit".
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

const fleet = (metrics: boolean) =>
  parseConfig({ limits: { max_inflight: 1 }, workers: ['w1', 'w2'].map((id) => ({ id, cluster: id, ...(metrics ? { metrics_url: `http://127.0.0.1:9/${id}` } : {}) })) }, 'test');
const scrape = (kvUsage: number) => ({ signals: { running: 0, waiting: 0, kvUsage }, ageMs: 0, failures: 0 });

async function shedMessage(gate: Gate): Promise<string> {
  const r = await gate.route(chatRequest('a new conversation', { session: `s${Math.random()}` }));
  assert.equal(r.kind, 'reject');
  if (r.kind !== 'reject') return '';
  assert.equal(r.error.code, 'overloaded');
  return r.error.message;
}

test('every worker under KV pressure: the shed names the pressure, not the in-flight limit', async () => {
  const gate = new Gate(fleet(true), new MemoryStore(), silentLogger());
  gate.setSignals(new Map([['w1', scrape(0.95)], ['w2', scrape(0.97)]]));
  assert.equal(await shedMessage(gate), 'every eligible worker is pressured and takes no new work: 2 pressured (kv_pressure)');
});

test('one pressured, one at its limit: both causes', async () => {
  const gate = new Gate(fleet(true), new MemoryStore(), silentLogger());
  gate.setSignals(new Map([['w1', scrape(0.95)], ['w2', scrape(0.2)]]));
  const held = await gate.route(chatRequest('fills w2', { session: 'held' }));
  assert.equal(held.kind === 'route' && held.worker, 'w2');
  // KV at 0.2 leaves room past the limit: with overflow off the limit is hard.
  const hard = parseConfig({ limits: { max_inflight: 1, overflow_factor: 1 }, workers: ['w1', 'w2'].map((id) => ({ id, cluster: id, metrics_url: `http://127.0.0.1:9/${id}` })) }, 'test');
  gate.reconfigure(hard);
  gate.setSignals(new Map([['w1', scrape(0.95)], ['w2', scrape(0.2)]]));
  assert.equal(await shedMessage(gate), 'every eligible worker is pressured or at its in-flight limit: 1 pressured (kv_pressure), 1 at the limit');
});

test('every worker at its limit: the message it always had', async () => {
  const gate = new Gate(fleet(false), new MemoryStore(), silentLogger());
  for (const s of ['a', 'b']) assert.equal((await gate.route(chatRequest('fill', { session: s }))).kind, 'route');
  assert.equal(await shedMessage(gate), 'every eligible worker is at its in-flight limit');
});
