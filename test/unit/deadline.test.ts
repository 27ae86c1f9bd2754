/**
 * The time limit on scrapes and on the demo's run holds through garbage collections. Node 20's
 * `AbortSignal.any([AbortSignal.timeout(ms)])` lost its timeout to a GC: a fetch of a metrics page
 * that never answered then waited for ever, and the worker's scrape loop with it.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import { fetchPage } from '../../src/signals/collector.js';
import { deadline } from '../../src/util/deadline.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

/** Runs `work` while collecting garbage every 10 ms; 'hung' if it has not settled in `giveUpMs`. */
async function underGc<T>(work: () => Promise<T>, giveUpMs: number): Promise<T | 'hung'> {
  const collector = setInterval(gc, 10);
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work(), new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), giveUpMs)))]);
  } finally {
    clearInterval(collector);
    clearTimeout(timer);
  }
}

test('a metrics page that never answers fails at the scrape timeout, garbage collections or not', async () => {
  const held = new Set<http.ServerResponse>();
  const server = http.createServer((_req, res) => void held.add(res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
  try {
    // Several at once, as a collector scrapes several workers: on Node 20 the old signal lost every one.
    const outcomes = await underGc(
      () => Promise.all([1, 2, 3, 4].map(() => fetchPage(url, 200).then(() => 'answered', (err: Error) => err.message))),
      5000,
    );
    assert.notEqual(outcomes, 'hung', 'the scrapes outlived their 200 ms timeout by 5 s');
    for (const m of outcomes as string[]) assert.match(m, /no answer from .* in 200 ms/);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});

test('deadline: fires at its time through garbage collections, as a TimeoutError', async () => {
  const outcome = await underGc(
    () =>
      new Promise<unknown>((resolve) => {
        // Only the listener's closure refers to the signal, as inside fetch.
        deadline(100).signal.addEventListener('abort', (e) => resolve((e.target as AbortSignal).reason));
      }),
    3000,
  );
  assert.ok(outcome instanceof DOMException && outcome.name === 'TimeoutError', `aborted with a TimeoutError, not ${String(outcome)}`);
});

test('deadline: follows its sources, by their reason, and lets go of them when cleared', async () => {
  const parent = new AbortController();
  const d = deadline(60_000, [parent.signal]);
  parent.abort('stop');
  assert.equal(d.signal.aborted, true);
  assert.equal(d.signal.reason, 'stop');

  const already = AbortSignal.abort('before');
  assert.equal(deadline(60_000, [already]).signal.reason, 'before', 'a source aborted already aborts it at once');

  const later = new AbortController();
  const cleared = deadline(20, [later.signal]);
  cleared.clear();
  later.abort('after');
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(cleared.signal.aborted, false, 'cleared: neither its timer nor its source aborts it');

  const early = deadline(60_000);
  early.abort();
  assert.equal(early.signal.aborted, true);
  assert.equal((early.signal.reason as Error).name, 'AbortError');
});
