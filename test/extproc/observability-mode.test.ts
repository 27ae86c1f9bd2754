/**
 * Envoy's observability_mode, scripted with raw streams (the harness refuses the setting). Envoy
 * sends every message without waiting and drops every reply (ext_proc.cc `onReceiveMessage`:
 * "Ignoring received message when observability mode is enabled"), routing on its own. A decision
 * there would take a lease and count a route for a request that never went where it said. Red
 * when such a stream is decided (a result, a lease left in flight) or answered, or when the
 * config mistake goes unsaid.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { ProcessingRequest } from '../../src/extproc/messages.js';
import { initHashing } from '../../src/request/hashing.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { harness, headersMsg, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';

const HEADERS = { ':method': 'POST', ':path': '/v1/chat/completions', ':scheme': 'http', ':authority': 'llm', 'content-type': 'application/json', 'x-session-id': 'watched' };
const BODY = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] }));
const WORKERS = [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }];

let g: TestGate;
let h: EnvoyHarness;
const rec = recordingLogger('info');
before(async () => {
  await initHashing();
  g = await startTestGate({ workers: WORKERS, routing: { request_body_mode: 'streamed' } }, { logger: rec.logger });
  h = harness(g.target);
});
after(async () => {
  h.close();
  await g.close(100);
});

describe('observability_mode', () => {
  test('a stream in observability mode is neither decided nor answered, and the mistake is logged once', async () => {
    const n = g.results.length;
    for (let i = 0; i < 3; i++) {
      const s = h.openRawStream();
      s.write({ ...headersMsg(HEADERS, false), observability_mode: true } as never);
      s.write({ request_body: { body: BODY, end_of_stream: true }, observability_mode: true } as ProcessingRequest as never);
      s.write({ response_headers: headersMsg({ ':status': '200' }, true).request_headers, observability_mode: true } as never);
      const reply = await s.next(300);
      assert.ok(isTimedOut(reply), `answered in observability mode: ${JSON.stringify(reply).slice(0, 200)}`);
      s.close();
      await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
    }
    assert.equal(g.results.length, n, 'a decision was made');
    const warned = rec.lines.filter((l) => String(l.msg).includes('observability_mode'));
    assert.equal(warned.length, 1);
    assert.equal(warned[0]!.level, 40); // pino's warn

    // The same request outside observability mode is decided as usual (the gate is not simply idle).
    const s = h.openRawStream();
    s.write(headersMsg(HEADERS, false) as never);
    const decided = await s.next(5000);
    assert.ok(!isClosed(decided) && !isTimedOut(decided), "!isClosed(decided) && !isTimedOut(decided)");
    assert.ok(routedCluster(decided), "routedCluster(decided)");
    s.close();
    await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
  });
});
