/**
 * The hostile-input corpus (test/fixtures/hostile-requests.ts) through the whole path: Envoy
 * harness → real gRPC → kvgate. Each case must get exactly its defined answer, on a gate that
 * forwards malformed bodies and on one that rejects them; afterwards nothing is left open or in
 * flight, no prototype was polluted, and the gate still routes.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { after, before, describe, test } from 'node:test';
import type { ReceivedProcessingResponse as ProcessingResponse } from '../../src/extproc/messages.js';
import { isClosed, isTimedOut, type EnvoyHarness } from '../harness/envoy-harness.js';
import { HOSTILE_CASES, type Answer, type HostileCase } from '../fixtures/hostile-requests.js';
import { chat, harness, routedCluster, waitFor } from '../helpers/envoy.js';
import { startTestGate, workers, type TestGate } from '../helpers/gate.js';
import { FALLBACK_CLUSTER } from '../helpers/load.js';

const FLEET = [
  { id: 'worker_1', cluster: 'worker_1', max_inflight: 1000 },
  { id: 'worker_2', cluster: 'worker_2', max_inflight: 1000 },
];
const LIMITS = { max_body_bytes: 1024 * 1024 };

let forward: TestGate;
let reject: TestGate;
let hf: EnvoyHarness;
let hr: EnvoyHarness;
before(async () => {
  forward = await startTestGate({ limits: LIMITS, workers: FLEET });
  reject = await startTestGate({ limits: { ...LIMITS, malformed_body: 'reject' }, workers: FLEET });
  // A generous message timeout: some cases are megabytes, and this is about answers, not speed.
  hf = harness(forward.target, { extProcOverride: { messageTimeoutMs: 10_000 } });
  hr = harness(reject.target, { extProcOverride: { messageTimeoutMs: 10_000 } });
});
after(async () => {
  hf.close();
  hr.close();
  await forward.close(100);
  await reject.close(100);
});

type RequestCase = Extract<HostileCase, { build: unknown }>;
type RawCase = Extract<HostileCase, { messages: unknown }>;

async function expectAnswer(g: TestGate, h: EnvoyHarness, c: RequestCase, want: Answer): Promise<void> {
  const seen = g.results.length;
  const out = await h.request(c.build(), { status: 200, body: '{}' });
  const got = g.results.slice(seen);
  if ('envoy' in want) {
    assert.equal(out.kind === 'local' && out.status, want.envoy, 'Envoy answers');
    assert.equal(got.length, 0, 'the gate never saw it');
    return;
  }
  assert.equal(got.length, 1, 'one decision');
  const result = got[0]!;
  if ('status' in want) {
    assert.equal(out.kind, 'local');
    assert.equal(out.kind === 'local' && out.status, want.status);
    assert.equal(out.kind === 'local' && out.details, `kvgate_${want.code}`);
    const err = JSON.parse(out.kind === 'local' ? out.body.toString() : '{}') as { error?: { code?: string } };
    assert.equal(err.error?.code, want.code, 'OpenAI-style error body');
    return;
  }
  assert.equal(out.kind, 'upstream', `routed, got ${out.kind === 'local' ? `${out.status} ${out.details}` : out.kind}`);
  assert.notEqual(out.cluster, FALLBACK_CLUSTER);
  assert.equal(result.kind, 'route');
  assert.equal(out.cluster, result.kind === 'route' ? result.cluster : undefined, 'to the worker kvgate chose');
  assert.equal(result.key?.kind ?? 'none', want.routed, 'keyed on');
}

function replyKind(ev: ProcessingResponse): string {
  if (routedCluster(ev)) return 'routed';
  return ev.response ?? 'unknown';
}

async function runRaw(h: EnvoyHarness, c: RawCase): Promise<void> {
  const s = h.openRawStream();
  const msgs = c.messages();
  const { replies, end } = c.expect;
  for (const [i, m] of msgs.entries()) {
    s.write(m);
    const violation = end === 'invalid' && i === msgs.length - 1;
    const want = replies[i];
    if (violation) {
      const ev = await s.next(5000);
      assert.ok(!isTimedOut(ev) && isClosed(ev), `message ${i} ends the stream`);
      assert.equal(ev.status.code, GrpcStatus.INVALID_ARGUMENT);
      return;
    }
    if (want === 'none') {
      const ev = await s.next(200);
      assert.ok(isTimedOut(ev), `message ${i} is ignored`);
      continue;
    }
    const ev = await s.next(5000);
    assert.ok(!isTimedOut(ev) && !isClosed(ev), `message ${i} answered`);
    assert.equal(replyKind(ev), want, `reply to message ${i}`);
  }
  s.end();
  const ev = await s.next(5000);
  assert.ok(!isTimedOut(ev) && isClosed(ev) && ev.status.code === GrpcStatus.OK, 'half-close answered with OK');
}

describe('hostile input corpus', () => {
  test('the docs give its size as it is', () => {
    const n = HOSTILE_CASES.length;
    assert.match(readFileSync(new URL('../../README.md', import.meta.url), 'utf8'), new RegExp(`a ${n}-request hostile corpus`));
    assert.match(readFileSync(new URL('../../docs/RELIABILITY.md', import.meta.url), 'utf8'), new RegExp(`holds ${n} malformed or hostile requests`));
  });

  test('has at least 50 cases in every class, with distinct names', () => {
    assert.ok(HOSTILE_CASES.length >= 50, `${HOSTILE_CASES.length} cases`);
    assert.equal(new Set(HOSTILE_CASES.map((c) => c.name)).size, HOSTILE_CASES.length);
    const classes = new Set(HOSTILE_CASES.map((c) => c.class));
    for (const k of ['invalid JSON', 'deep nesting', 'huge', 'non-UTF-8', 'content type', 'content-length lie', 'header flood', 'class of service', 'prompt type', 'phase order']) {
      assert.ok(classes.has(k as never), k);
    }
  });

  for (const c of HOSTILE_CASES) {
    if ('build' in c) {
      test(`[${c.class}] ${c.name}`, async () => {
        await expectAnswer(forward, hf, c, c.expect);
        await expectAnswer(reject, hr, c, c.strict ?? c.expect);
      });
    } else {
      test(`[${c.class}] ${c.name}`, async () => {
        await runRaw(hf, c);
      });
    }
  }

  test('afterwards: nothing open or in flight, no prototype polluted, and the gates still route', async () => {
    for (const g of [forward, reject]) {
      await waitFor(() => g.extproc.openStreams === 0, 5000, 'no open streams');
      await waitFor(async () => (await workers(g.admin)).every((w) => w.inflight === 0), 5000, 'no leases');
    }
    assert.equal(({} as Record<string, unknown>)['polluted'], undefined);
    assert.equal(({} as Record<string, unknown>)['user'], undefined);
    for (const h of [hf, hr]) assert.equal((await h.request(chat({ session: 'still-fine' }))).kind, 'upstream');
  });
});
