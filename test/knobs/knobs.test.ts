/**
 * The pieces under the end-to-end knob tests: knob parsing and precedence, pool config and pool
 * picking, what a reload carries over, the log throttle, and Struct decoding.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { applyKnobs, metadataKey, readKnobs } from '../../src/config/knobs.js';
import { parseConfig } from '../../src/config/load.js';
import { ConfigReloader, carryRestartOnly } from '../../src/config/reload.js';
import { structToPlain } from '../../src/extproc/knob-source.js';
import { PoolTable } from '../../src/gate/pools.js';
import { LogThrottle } from '../../src/util/log-throttle.js';
import { recordingLogger } from '../helpers/logger.js';

const TWO_POOLS = {
  pools: [
    { name: 'big', models: ['m-big', 'm-big-alias'], max_inflight: 4, workers: [{ id: 'b1', cluster: 'cb1' }] },
    { name: 'small', workers: [{ id: 's1', cluster: 'cs1' }, { id: 's2', cluster: 'cs2' }] },
  ],
  default_pool: 'big',
};

describe('knobs', () => {
  test('both layers parse; the route layer wins knob by knob; numbers may be strings', () => {
    const r = readKnobs({
      metadata: [
        ['x-kvgate-policy', 'prefix'],
        ['X-KVGATE-MAX-INFLIGHT', ' 8 '],
        ['x-kvgate-session-header', 'X-Conversation-Id'],
        ['content-type', 'application/grpc'],
        ['traceparent', '00-abc'],
      ],
      context: { policy: 'session', shed_status: 503, retry_after_s: '30', block_chars: 128, pool: 'big' },
    });
    assert.deepEqual(r.problems, []);
    assert.deepEqual(r.knobs, { policy: 'prefix', shed_status: 503, retry_after_s: 30, block_chars: 128, pool: 'big', max_inflight: 8, session_header: 'x-conversation-id' });
    assert.deepEqual(r.from, { policy: 'route', shed_status: 'host', retry_after_s: 'host', block_chars: 'host', pool: 'host', max_inflight: 'route', session_header: 'route' });
    assert.equal(metadataKey('retry_after_s'), 'x-kvgate-retry-after-s');
  });

  test('unknown keys and invalid values are problems and leave the knob to the next layer', () => {
    const r = readKnobs({
      metadata: [
        ['x-kvgate-policy', 'fastest'],
        ['x-kvgate-max-inflight', '0'],
        ['x-kvgate-shed-status', '418'],
        ['x-kvgate-block-chars', '8'],
        ['x-kvgate-retry-after-s', '1.5'],
        ['x-kvgate-pool', 'has space'],
        ['x-kvgate-session-header', 'bad header'],
        ['x-kvgate-colour', 'blue'],
      ],
      context: { policy: 'least_loaded', max_inflight: { nested: true }, shed_status: 429, extra: 'x'.repeat(500) },
    });
    assert.deepEqual(r.knobs, { policy: 'least_loaded', shed_status: 429 });
    assert.deepEqual(r.from, { policy: 'host', shed_status: 'host' });
    const keys = r.problems.map((p) => `${p.layer}:${p.key}`);
    assert.deepEqual(keys.sort(), [
      'host:extra', 'host:max_inflight',
      'route:x-kvgate-block-chars', 'route:x-kvgate-colour', 'route:x-kvgate-max-inflight', 'route:x-kvgate-policy',
      'route:x-kvgate-pool', 'route:x-kvgate-retry-after-s', 'route:x-kvgate-session-header', 'route:x-kvgate-shed-status',
    ].sort());
    const extra = r.problems.find((p) => p.key === 'extra')!;
    assert.ok(extra.value.length <= 65, 'long values are shortened for logs');
    assert.match(r.problems.find((p) => p.key === 'x-kvgate-colour')!.reason, /unknown knob \(known: x-kvgate-pool/);
  });

  test('a flood of entries is cut off, not read', () => {
    const metadata = Array.from({ length: 200 }, (_, i): [string, string] => [`x-kvgate-k${i}`, 'v']);
    const r = readKnobs({ metadata });
    assert.equal(r.problems.length, 65);
    assert.match(r.problems.at(-1)!.reason, /more than 64 entries/);
  });

  test('applyKnobs changes only this request’s copy of the config', () => {
    const cfg = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    assert.equal(applyKnobs(cfg, {}), cfg);
    assert.equal(applyKnobs(cfg, { pool: 'x', max_inflight: 3 }), cfg, 'pool and threshold are applied by the gate');
    const k = applyKnobs(cfg, { policy: 'prefix', session_header: 'x-c', shed_status: 503, retry_after_s: 9, block_chars: 64 });
    assert.equal(k.routing.policy, 'prefix');
    assert.equal(k.routing.shed_status, 503);
    assert.equal(k.routing.retry_after_s, 9);
    assert.equal(k.keys.session_header, 'x-c');
    assert.equal(k.prefix.block_chars, 64);
    assert.equal(cfg.routing.policy, 'both');
    assert.equal(cfg.prefix.block_chars, 256);
  });
});

describe('pools in the config', () => {
  test('a top-level workers list is the one pool "default"', () => {
    const c = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    assert.deepEqual(c.pools.map((p) => p.name), ['default']);
    assert.equal(c.default_pool, 'default');
    assert.deepEqual(c.workers.map((w) => w.id), ['a']);
  });

  test('pools: workers flattened in order, default_pool defaults to the first', () => {
    const c = parseConfig({ pools: TWO_POOLS.pools });
    assert.equal(c.default_pool, 'big');
    assert.deepEqual(c.workers.map((w) => w.id), ['b1', 's1', 's2']);
  });

  test('every pool mistake is reported at once', () => {
    assert.throws(
      () =>
        parseConfig({
          routing: { policy: 'random' },
          pools: [
            { name: 'p', models: ['m'], workers: [{ id: 'a', cluster: 'a' }] },
            { name: 'p', workers: [{ id: 'b', cluster: 'b' }] },
            { name: 'q', models: ['m'], workers: [{ id: 'a', cluster: 'c' }] },
            { name: 'r', workers: [{ id: 'd', cluster: 'd' }] },
            { name: 'bad{tag}', models: ['n'], workers: [{ id: 'e', cluster: 'e' }] },
          ],
          default_pool: 'zz',
        }),
      (err: Error) => {
        for (const re of [
          /routing\.policy/,
          /pools\.1\.name: duplicate pool name "p"/,
          /pools\.2\.workers\.0\.id: worker "a" is already in pool "p"/,
          /pools\.2\.models\.0: model "m" is already served by pool "p"/,
          /pools\.3\.models: only one pool may leave out `models`/,
          /pools\.4\.name/,
          /default_pool: no pool named "zz"/,
        ]) {
          assert.match(err.message, re);
        }
        return true;
      },
    );
    assert.throws(() => parseConfig({ workers: [{ id: 'a', cluster: 'a' }], pools: TWO_POOLS.pools }), /not both/);
    assert.throws(() => parseConfig({ workers: [{ id: 'a', cluster: 'a' }], default_pool: 'other' }), /no pool named "other" \(pools: default\)/);
    assert.throws(() => parseConfig({ pools: [] }), /at least one pool/);
  });

  test('picking: the pool knob, else the model, else the default; unknown models are refused', () => {
    const t = new PoolTable(parseConfig(TWO_POOLS));
    const pick = (knob: string | undefined, model: string | undefined) => {
      const p = t.pick(knob, model);
      return p.kind === 'pool' ? `${p.pool.name}/${p.via}${p.unknownKnob ? `/unknown:${p.unknownKnob}` : ''}` : `reject:${p.error.code}`;
    };
    assert.equal(pick(undefined, 'm-big-alias'), 'big/model');
    assert.equal(pick(undefined, 'anything-else'), 'small/model', 'the pool without models serves the rest');
    assert.equal(pick(undefined, undefined), 'big/default');
    assert.equal(pick(undefined, ''), 'big/default', 'an empty model is no model');
    assert.equal(pick('small', 'm-big'), 'small/knob', 'a catch-all pool takes any model its route sends');
    assert.equal(pick('big', 'other'), 'reject:model_not_found', 'a pinned pool never gets a model it does not serve');
    assert.equal(pick('nope', 'm-big'), 'big/model/unknown:nope');
    assert.equal(pick('nope', undefined), 'big/default/unknown:nope');
    assert.equal(t.poolOfWorker('s2')?.name, 'small');

    const strict = new PoolTable(parseConfig({ pools: [TWO_POOLS.pools[0]!] }));
    const refused = strict.pick(undefined, `gpt-${'9'.repeat(300)}`);
    assert.equal(refused.kind, 'reject');
    assert.ok(refused.kind === 'reject' && refused.error.message.length < 200, 'the echoed model is shortened');
  });
});

describe('reload pieces', () => {
  test('restart-only settings keep their running values and are named', () => {
    const running = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    const next = parseConfig({ store: { refresh_ms: 1000 }, limits: { max_inflight: 3, max_body_bytes: 10 }, workers: [{ id: 'a', cluster: 'a' }] });
    const { config, restartNeeded } = carryRestartOnly(running, next);
    assert.deepEqual(restartNeeded, ['store', 'limits.max_body_bytes']);
    assert.equal(config.limits.max_inflight, 3);
    assert.equal(config.limits.max_body_bytes, running.limits.max_body_bytes);
    assert.equal(config.store.refresh_ms, running.store.refresh_ms);
    assert.ok(Object.isFrozen(config.limits), "Object.isFrozen(config.limits)");
    assert.equal(carryRestartOnly(running, running).config, running);
  });

  test('a config file that cannot be watched or read is logged, never thrown; the running config stays', () => {
    const { logger, lines } = recordingLogger('info');
    const running = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    let applied = 0;
    const r = new ConfigReloader({ file: '/nonexistent-kvgate-dir/kvgate.yaml', logger, current: () => running, apply: () => applied++ });
    r.watch();
    assert.equal(r.reload('SIGHUP'), 'rejected');
    r.close();
    assert.equal(applied, 0);
    assert.match(String(lines.find((l) => l['msg'] === 'cannot watch the config directory; changes are still seen by a stat poll every few seconds, or at once with SIGHUP')?.['err']), /ENOENT/);
    assert.match(String(lines.find((l) => l['msg'] === 'config reload rejected; keeping the running config')?.['err']), /cannot read config file/);
  });

  test('a valid config whose swap-in throws is said and counted as rejected, never thrown out of a watch timer', () => {
    // A ConfigMap update reaches every replica at once: a throw out of the timer would end them all.
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-apply-'));
    const file = path.join(dir, 'kvgate.yaml');
    writeFileSync(file, 'limits: {max_inflight: 7}\nworkers: [{id: a, cluster: a}]\n');
    const { logger, lines } = recordingLogger('info');
    const running = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    const outcomes: string[] = [];
    const r = new ConfigReloader({
      file,
      logger,
      current: () => running,
      apply: () => {
        throw new Error('boom');
      },
      onOutcome: (o) => outcomes.push(o),
    });
    assert.equal(r.reload('watch'), 'rejected');
    assert.deepEqual(outcomes, ['rejected']);
    assert.match(String(lines.find((l) => l['msg'] === 'config reload failed while being applied; restart kvgate to be sure which config runs')?.['err']), /boom/);
  });

  test('the log throttle lets the first line through and counts the repeats', () => {
    let now = 0;
    const t = new LogThrottle(1000, 2, () => now);
    assert.equal(t.take('a'), 0);
    assert.equal(t.take('a'), undefined);
    assert.equal(t.take('a'), undefined);
    now = 1000;
    assert.equal(t.take('a'), 2);
    assert.equal(t.take('b'), 0);
    assert.equal(t.take('c'), 0, 'a third key evicts the oldest');
    assert.equal(t.take('a'), 0, 'forgotten, so it logs again');
  });

  test('metadata_context Structs decode to plain values, depth-limited', () => {
    let deep = { kind: 'stringValue' as const, stringValue: 'bottom' } as Parameters<typeof structToPlain>[0]['fields'][string];
    for (let i = 0; i < 20; i++) deep = { kind: 'structValue', structValue: { fields: { d: deep } } };
    const plain = structToPlain({
      fields: {
        s: { kind: 'stringValue', stringValue: 'x' },
        n: { kind: 'numberValue', numberValue: 8 },
        b: { kind: 'boolValue', boolValue: true },
        z: { kind: 'nullValue', nullValue: 'NULL_VALUE' },
        l: { kind: 'listValue', listValue: { values: [{ kind: 'numberValue', numberValue: 1 }] } },
        none: {},
        deep,
      },
    });
    assert.deepEqual({ ...plain, deep: undefined }, { s: 'x', n: 8, b: true, z: null, l: [1], none: null, deep: undefined });
    assert.ok(!JSON.stringify(plain['deep']).includes('bottom'), 'nesting past the limit is cut');
  });
});
