/**
 * Logs: one debug line per decision, carrying hashes only; no session id or prompt text anywhere.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hashSessionId } from '../../src/request/hashing.js';
import { chat, harness } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';

test('a debug line per decision, with the key hash and never the raw id or prompt', async () => {
  const { logger, lines } = recordingLogger('debug');
  const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2', max_inflight: 1 }] }, { logger });
  const h = harness(g.target);
  try {
    await h.request(chat({ session: 'secret-session-123', text: 'my private prompt text' }));
    await h.request(chat({ user: 'alice@example.com', text: 'another private prompt' }));
    const routed = lines.filter((l) => l['msg'] === 'routed');
    assert.equal(routed.length, 2);
    assert.equal(routed[0]!['level'], 20, 'debug');
    assert.equal(routed[0]!['key_hash'], hashSessionId('secret-session-123'));
    assert.equal(routed[0]!['outcome'], 'new');
    assert.ok(routed[0]!['worker'], "routed[0]!['worker']");
    const all = JSON.stringify(lines);
    for (const secret of ['secret-session-123', 'alice@example.com', 'private prompt']) assert.ok(!all.includes(secret), `${secret} is not logged`);
  } finally {
    h.close();
    await g.close(100);
  }
});
