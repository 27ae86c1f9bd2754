import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Coalesced } from '../../src/util/coalesced.js';

test('calls while a run is in progress share it and cost exactly one more round', async () => {
  let runs = 0;
  let release!: () => void;
  const c = new Coalesced(async () => {
    runs++;
    if (runs === 1) await new Promise<void>((r) => (release = r));
  });
  const first = c.trigger();
  const second = c.trigger();
  const third = c.trigger();
  assert.equal(second, first);
  assert.equal(third, first);
  release();
  await first;
  assert.equal(runs, 2, 'the first run, then one more for the calls made during it');
  await c.trigger();
  assert.equal(runs, 3, 'idle again: a call starts a fresh run');
});

test('no extra round once keepGoing says stop', async () => {
  let runs = 0;
  let open = true;
  let release!: () => void;
  const c = new Coalesced(
    async () => {
      runs++;
      if (runs === 1) await new Promise<void>((r) => (release = r));
    },
    () => open,
  );
  const run = c.trigger();
  void c.trigger();
  open = false;
  release();
  await run;
  assert.equal(runs, 1);
});
