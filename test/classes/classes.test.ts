/**
 * Classes of service: a lower class fills only its share of each worker's in-flight limit, so it is
 * shed first; the top class is shed only when no worker could take it. Through the real gate and
 * memory store (leases held, as in flight), and the pure pieces on their own.
 */
import assert from 'node:assert/strict';
import { before, describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { DEFAULTS } from '../../src/config/defaults.js';
import { Gate, type GateResult } from '../../src/gate/gate.js';
import type { Knobs } from '../../src/config/knobs.js';
import { readKnobs } from '../../src/config/knobs.js';
import type { RequestInfo } from '../../src/request/request.js';
import { serviceClass } from '../../src/request/service-class.js';
import { classLimit } from '../../src/routing/filters/class-share.js';
import { decide } from '../../src/routing/policy.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';
import { MemoryStore } from '../../src/state/memory-store.js';
import type { Lease } from '../../src/state/store.js';
import { initHashing } from '../../src/util/xxhash.js';
import { recordingLogger, silentLogger } from '../helpers/logger.js';
import { chatRequest } from '../helpers/requests.js';

before(() => initHashing());

const CLASSES = {
  levels: [
    { name: 'critical', share: 1 },
    { name: 'standard', share: 0.75 },
    { name: 'sheddable', share: 0.5 },
  ],
};

function config(extra: Record<string, unknown> = {}) {
  return parseConfig(
    {
      workers: [
        { id: 'w1', cluster: 'gpu_1' },
        { id: 'w2', cluster: 'gpu_2' },
      ],
      limits: { max_inflight: 4 },
      classes: CLASSES,
      ...extra,
    },
    'test',
  );
}

let n = 0;
/** A sessionless chat request with a prompt of many 256-character blocks, unique per call, in a class. */
function req(cls?: string, headers: Record<string, string> = {}): RequestInfo {
  const text = `request ${n++}: ` + 'the quick brown fox jumps over the lazy dog. '.repeat(60);
  return chatRequest(text, { headers: { ...headers, ...(cls !== undefined ? { [DEFAULTS.classHeader]: cls } : {}) } });
}

function routedTo(r: GateResult, leases: Lease[]): string {
  assert.equal(r.kind, 'route', `routed, got ${r.kind === 'reject' ? `${r.error.code}: ${r.error.message}` : ''}`);
  if (r.kind !== 'route') throw new Error('unreachable');
  leases.push(r.lease);
  return r.cluster;
}

function shed(r: GateResult): Extract<GateResult, { kind: 'reject' }> {
  assert.equal(r.kind, 'reject', `shed, got a route to ${r.kind === 'route' ? r.cluster : ''}`);
  if (r.kind !== 'reject') throw new Error('unreachable');
  return r;
}

describe('classes of service through the gate', () => {
  test('a fleet full of low-class requests still routes critical ones; each lower class is shed at its share, naming its class', async () => {
    const gate = new Gate(config(), new MemoryStore(), silentLogger());
    const leases: Lease[] = [];
    // Sheddable: half of 4 per worker, so 2 on each of the two workers.
    const placed = [];
    for (let i = 0; i < 4; i++) placed.push(routedTo(await gate.route(req('sheddable')), leases));
    assert.deepEqual(placed.sort(), ['gpu_1', 'gpu_1', 'gpu_2', 'gpu_2']);
    const s = shed(await gate.route(req('sheddable')));
    assert.equal(s.error.code, 'overloaded');
    assert.equal(s.class, 'sheddable');
    assert.match(s.error.message, /class "sheddable" may use \(50%\)/);
    // Both workers were below their limit when it was shed: the share did it, not a full fleet.
    assert.deepEqual(s.views?.map((v) => [v.inflight, v.maxInflight]), [[2, 4], [2, 4]]);

    // Standard: three quarters of 4, so one more on each worker.
    for (let i = 0; i < 2; i++) routedTo(await gate.route(req('standard')), leases);
    const st = shed(await gate.route(req('standard')));
    assert.equal(st.class, 'standard');
    assert.equal(shed(await gate.route(req('sheddable'))).class, 'sheddable');

    // Critical: the whole limit, so the last place on each worker.
    const critical = [routedTo(await gate.route(req('critical')), leases), routedTo(await gate.route(req('critical')), leases)];
    assert.deepEqual(critical.sort(), ['gpu_1', 'gpu_2']);
    const r = await gate.route(req('critical'));
    assert.equal(shed(r).class, 'critical', 'shed only now that no worker can take anything');
    assert.equal(shed(r).error.message, 'every eligible worker is at its in-flight limit');

    // One place frees on gpu_1: critical takes it, sheddable still may not.
    const onOne = leases.find((l) => l.worker === 'w1')!;
    await gate.release(onOne);
    assert.equal(shed(await gate.route(req('sheddable'))).class, 'sheddable');
    assert.equal(routedTo(await gate.route(req('critical')), leases), 'gpu_1');
  });

  test('the route knob wins over the header; an unknown class value is the default class, logged once', async () => {
    const { logger, lines } = recordingLogger('warn');
    const gate = new Gate(config(), new MemoryStore(), logger);
    const leases: Lease[] = [];
    for (let i = 0; i < 6; i++) routedTo(await gate.route(req('standard')), leases);
    // Every worker at 3 of 4: standard's share is used up.
    const knobs: Knobs = { class: 'critical' };
    assert.equal(shed(await gate.route(req('standard'))).class, 'standard');
    const viaKnob = await gate.route(req('sheddable'), { knobs });
    assert.equal(viaKnob.kind === 'route' && viaKnob.class, 'critical', "the route's class, whatever the header says");
    if (viaKnob.kind === 'route') leases.push(viaKnob.lease);
    // A class the config does not have: ignored, so the default class (standard) applies.
    const odd = shed(await gate.route(req('platinum')));
    assert.equal(odd.class, 'standard');
    await gate.route(req('platinum'));
    const warned = lines.filter((l) => l.msg === 'unknown class of service ignored');
    assert.equal(warned.length, 1, 'once per value per minute');
    assert.equal(warned[0]!.value, 'platinum');
    // An unknown knob value falls through to the header.
    assert.equal((await gate.route(req('critical'), { knobs: { class: 'gold' } })).class, 'critical');
  });

  test('a session at its class share moves to a worker below it rather than fill the one it holds', async () => {
    const gate = new Gate(config(), new MemoryStore(), silentLogger());
    const leases: Lease[] = [];
    const session = { 'x-session-id': 'batch-job-7' };
    const home = routedTo(await gate.route(req('sheddable', session)), leases);
    assert.equal(routedTo(await gate.route(req('sheddable', session)), leases), home, 'sticky below its share');
    // Its worker is now at 2 of 4: sheddable's bound. The next turn moves.
    const moved = await gate.route(req('sheddable', session));
    assert.equal(moved.kind === 'route' && moved.outcome, 'migrated');
    assert.notEqual(moved.kind === 'route' && moved.cluster, home);
    // A standard turn of the same session would have stayed.
    const stays = await gate.route(req('standard', { 'x-session-id': 'other' }));
    assert.equal(stays.kind, 'route');
  });

  test("endpoint-picker mode: the GIE objective header classifies through classes.objectives; in cluster-header mode it means nothing", async () => {
    const picker = parseConfig(
      {
        routing: { protocol: 'endpoint_picker' },
        workers: [{ id: 'w1', address: '10.0.0.1:8000' }],
        limits: { max_inflight: 2 },
        classes: { ...CLASSES, objectives: { 'chat-prod': 'critical' } },
      },
      'test',
    );
    const gate = new Gate(picker, new MemoryStore(), silentLogger());
    const leases: Lease[] = [];
    routedTo(await gate.route(req('sheddable')), leases);
    // One of two places taken: sheddable (half) and standard (three quarters of 2 = 1) are at their bound.
    assert.equal(shed(await gate.route(req())).class, 'standard');
    const prod = await gate.route(req(undefined, { [DEFAULTS.objectiveHeader]: 'chat-prod' }));
    assert.equal(prod.kind === 'route' && prod.class, 'critical');
    const plain = new Gate(config({ classes: { ...CLASSES, objectives: { 'chat-prod': 'critical' } } }), new MemoryStore(), silentLogger());
    const r = await plain.route(req(undefined, { [DEFAULTS.objectiveHeader]: 'chat-prod' }));
    assert.equal(r.kind === 'route' && r.class, 'standard');
  });

  test('with the default classes, unclassified traffic uses the whole limit, as before classes existed', async () => {
    const gate = new Gate(parseConfig({ workers: [{ id: 'w1', cluster: 'gpu_1' }], limits: { max_inflight: 3 } }, 'test'), new MemoryStore(), silentLogger());
    const leases: Lease[] = [];
    for (let i = 0; i < 3; i++) routedTo(await gate.route(req()), leases);
    const s = shed(await gate.route(req()));
    assert.equal(s.class, 'standard');
    assert.equal(s.views?.[0]?.inflight, 3);
  });
});

describe('classes: the pure pieces', () => {
  test('a class limit is a share of the limit, never zero places', () => {
    assert.equal(classLimit(16, 0.875), 14);
    assert.equal(classLimit(16, 0.5), 8);
    assert.equal(classLimit(10, 0.7), 7, 'binary fractions do not round 7 down to 6');
    assert.equal(classLimit(100, 0.29), 29, '100 × 0.29 is 28.999… in binary: not 28');
    assert.equal(classLimit(90, 0.7), 63, '90 × 0.7 is 62.999… in binary: not 62');
    assert.equal(classLimit(1, 0.5), 1);
    assert.equal(classLimit(16, 1), 16);
    assert.equal(classLimit(16, undefined), 16);
  });

  test('decide() holds a class to its share and the commit checks that bound', () => {
    const w = (id: string, inflight: number): WorkerView => ({ id, state: 'healthy', inflight, maxInflight: 10, prefixBlocks: 0 });
    const base: DecisionInput = {
      keyHash: 'k',
      session: false,
      affinity: undefined,
      keyInflight: 0,
      totalBlocks: 0,
      mode: 'both',
      weights: { prefix: 1, load: 1, kv: 0.5, balance: 1 },
      balanceFloor: 1,
      maxInflightPerSession: 4,
      workers: [w('a', 5), w('b', 4)],
    };
    const d = decide({ ...base, classShare: 0.5 });
    assert.equal(d.kind === 'route' && d.worker, 'b');
    assert.deepEqual(d.preconditions.below, [{ worker: 'b', limit: 5 }], 'another replica filling b to 5 meanwhile fails the commit');
    const full = decide({ ...base, classShare: 0.4 });
    assert.equal(full.kind, 'shed');
    assert.deepEqual(full.preconditions.atOrAbove, [{ worker: 'a', limit: 4 }, { worker: 'b', limit: 4 }]);
    assert.equal(full.explanation.candidates[0]!.classLimit, 4);
    // Without a share: exactly the old decision.
    assert.deepEqual(decide(base), decide({ ...base, classShare: 1 }));
  });

  test('the class of a request: knob, header, then (endpoint picker) the GIE objective, then the default', () => {
    const cfg = config({ classes: { ...CLASSES, objectives: { 'chat-prod': 'critical', 'nightly-eval': 'sheddable' } } }).classes;
    const H = (h: Record<string, string>) => new Map(Object.entries(h));
    const obj = DEFAULTS.objectiveHeader;
    assert.deepEqual(serviceClass(H({}), cfg, undefined, false, obj), { name: 'standard', share: 0.75, source: 'default' });
    assert.equal(serviceClass(H({ [DEFAULTS.classHeader]: ' Sheddable ' }), cfg, undefined, false, obj).name, 'sheddable');
    assert.equal(serviceClass(H({ [DEFAULTS.classHeader]: 'sheddable' }), cfg, 'critical', false, obj).source, 'knob');
    // The objective header counts only in endpoint-picker mode, through the configured map.
    assert.equal(serviceClass(H({ [obj]: 'chat-prod' }), cfg, undefined, false, obj).name, 'standard');
    assert.deepEqual(serviceClass(H({ [obj]: 'chat-prod' }), cfg, undefined, true, obj), { name: 'critical', share: 1, source: 'objective' });
    assert.equal(serviceClass(H({ [obj]: 'nightly-eval' }), cfg, undefined, true, obj).name, 'sheddable');
    assert.equal(serviceClass(H({ [obj]: 'Sheddable' }), cfg, undefined, true, obj).name, 'sheddable', 'an objective named like a class');
    // An objective kvgate has no class for: the default, as the GIE picker gives an unknown one priority 0.
    const unknown = serviceClass(H({ [obj]: 'who-knows' }), cfg, undefined, true, obj);
    assert.deepEqual([unknown.name, unknown.source, unknown.ignored], ['standard', 'default', undefined]);
    // Names on Object.prototype are objectives like any other: no mapping, so the default, nothing ignored.
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      const p = serviceClass(H({ [obj]: name }), cfg, undefined, true, obj);
      assert.deepEqual([p.name, p.source, p.ignored], ['standard', 'default', undefined], name);
    }
    // The class header beats the objective.
    assert.equal(serviceClass(H({ [obj]: 'chat-prod', [DEFAULTS.classHeader]: 'sheddable' }), cfg, undefined, true, obj).name, 'sheddable');
    // Garbage in the header: ignored and reported, never thrown.
    const bad = serviceClass(H({ [DEFAULTS.classHeader]: 'x'.repeat(5000) }), cfg, undefined, false, obj);
    assert.equal(bad.name, 'standard');
    assert.equal(bad.ignored?.source, 'header');
    assert.ok(bad.ignored!.value.length <= 65, "bad.ignored!.value.length <= 65");
  });

  test('the class knob arrives as x-kvgate-class metadata; a malformed value is ignored with a problem', () => {
    assert.equal(readKnobs({ metadata: [['x-kvgate-class', ' Critical ']] }).knobs.class, 'critical');
    const bad = readKnobs({ metadata: [['x-kvgate-class', 'no spaces allowed']] });
    assert.equal(bad.knobs.class, undefined);
    assert.equal(bad.problems.length, 1);
  });

  test('the config refuses classes that cannot work, saying why', () => {
    const refuse = (classes: unknown, re: RegExp) => assert.throws(() => config({ classes }), re);
    refuse({ levels: [{ name: 'gold', share: 0.9 }] }, /top class uses the whole limit/);
    refuse({ levels: [{ name: 'a', share: 1 }, { name: 'b', share: 0.5 }, { name: 'c', share: 0.8 }] }, /may not use more than the class above/);
    refuse({ levels: [{ name: 'a', share: 1 }, { name: 'a', share: 0.5 }] }, /duplicate class "a"/);
    refuse({ ...CLASSES, default: 'gold' }, /no class named "gold"/);
    refuse({ ...CLASSES, objectives: { x: 'gold' } }, /no class named "gold"/);
    refuse({ levels: [{ name: 'a', share: 1 }, { name: 'b', share: 0 }] }, /share|0/);
  });
});
