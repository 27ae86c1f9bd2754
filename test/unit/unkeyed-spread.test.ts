/**
 * Requests without a key (embeddings, body-less GETs) through the gate: they spread over an idle
 * fleet instead of all winning one worker's tie, and none goes to a worker whose engine reports a
 * deep queue because this gate happens to hold nothing there.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { Gate } from '../../src/gate/gate.js';
import type { RequestInfo } from '../../src/request/request.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { silentLogger } from '../helpers/logger.js';

before(() => initHashing());

const IDS = ['w1', 'w2', 'w3', 'w4'];
const fleet = (policy = 'both') => parseConfig({ routing: { policy }, workers: IDS.map((id) => ({ id, cluster: id, metrics_url: `http://127.0.0.1:9/${id}` })) }, 'test');
const engine = (running: number, waiting: number) => ({ signals: { running, waiting, kvUsage: 0.3 }, ageMs: 0, failures: 0 });
const embeddings = (i: number): RequestInfo => ({ method: 'POST', path: '/v1/embeddings', headers: new Map([['content-type', 'application/json']]), body: Buffer.from(JSON.stringify({ model: 'm', input: `text ${i}` })) });
const bare = (): RequestInfo => ({ method: 'GET', path: '/v1/models', headers: new Map() });

/** Routes `n` requests one after another (each released before the next), counting them by worker. */
async function tally(gate: Gate, n: number, request: (i: number) => RequestInfo): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const r = await gate.route(request(i));
    assert.equal(r.kind, 'route');
    if (r.kind !== 'route') continue;
    assert.equal(r.key, undefined, 'a request without a key');
    out.set(r.worker, (out.get(r.worker) ?? 0) + 1);
    await gate.release(r.lease);
  }
  return out;
}

test('sequential requests without a key spread over an idle fleet', async () => {
  const gate = new Gate(fleet(), new MemoryStore(), silentLogger());
  gate.setSignals(new Map(IDS.map((id) => [id, engine(0, 0)])));
  for (const request of [embeddings, bare]) {
    const counts = await tally(gate, 400, request);
    assert.equal(counts.size, 4, JSON.stringify([...counts]));
    for (const [id, n] of counts) assert.ok(n > 50, `${id} got ${n} of 400`);
  }
});

test("a worker whose engine reports a deep queue gets none of them, in every mode", async () => {
  for (const policy of ['both', 'least_loaded', 'session']) {
    const gate = new Gate(fleet(policy), new MemoryStore(), silentLogger());
    gate.setSignals(new Map(IDS.map((id) => [id, id === 'w2' ? engine(120, 30) : engine(0, 0)])));
    const counts = await tally(gate, 200, embeddings);
    assert.equal(counts.get('w2'), undefined, `${policy}: ${JSON.stringify([...counts])}`);
    assert.equal(counts.size, 3, `${policy}: the rest share them`);
  }
});
