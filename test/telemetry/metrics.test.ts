/**
 * Metrics: `/metrics` on the admin port parses with a Prometheus text parser, follows Prometheus
 * naming, and its counters move as requests are routed through the Envoy harness.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { stringify } from 'yaml';
import { isClosed } from '../harness/envoy-harness.js';
import { chat, clusterOf, harness, holdRequest, waitFor } from '../helpers/envoy.js';
import { setWorkerState, startTestGate } from '../helpers/gate.js';
import { DECISION_OUTCOMES, Metrics } from '../../src/telemetry/metrics.js';
import { scrape } from './prometheus.js';

describe('/metrics', () => {
  test('follows Prometheus naming, with every outcome present from the start', async () => {
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] }, { processMetrics: true });
    try {
      const m = await scrape(g.admin);
      const ours = m.families.filter((f) => f.name.startsWith('kvgate_'));
      assert.ok(ours.length >= 15, `kvgate metrics: ${ours.map((f) => f.name).join(', ')}`);
      for (const f of ours) {
        assert.ok(f.help.length > 10, `${f.name} has help`);
        if (f.type === 'COUNTER') assert.match(f.name, /_total$/, `${f.name}: counters end in _total`);
        if (f.type === 'HISTOGRAM') assert.match(f.name, /_seconds$/, `${f.name}: durations in seconds`);
        assert.doesNotMatch(f.name, /_(ms|milliseconds)\b/, `${f.name}: base units`);
      }
      const decisions = m.families.find((f) => f.name === 'kvgate_decisions_total');
      for (const o of DECISION_OUTCOMES) {
        assert.equal(m.value('kvgate_decisions_total', { outcome: o, pool: 'default' }), 0, o);
        // The help a Grafana user reads lists every label value there is.
        assert.match(decisions?.help ?? '', new RegExp(`\\b${o}\\b`), `kvgate_decisions_total help names ${o}`);
      }
      // The outcomes a request can have before a pool is chosen, under the empty pool.
      for (const o of ['rejected', 'fallback', 'abandoned']) assert.equal(m.value('kvgate_decisions_total', { outcome: o, pool: '' }), 0, `${o} with no pool`);
      assert.equal(m.value('kvgate_affinity_hit_ratio'), 0);
      assert.equal(m.value('kvgate_worker_state', { worker: 'w1', state: 'healthy' }), 1);
      assert.equal(m.value('kvgate_worker_state', { worker: 'w1', state: 'down' }), 0);
      assert.ok(m.family('process_cpu_user_seconds_total'), 'Node process metrics');
    } finally {
      await g.close(100);
    }
  });

  test('counters move as requests are routed: outcomes, migrations, sheds, latency, store, streams', async () => {
    const g = await startTestGate({
      limits: { malformed_body: 'reject' },
      workers: [
        { id: 'w1', cluster: 'worker_1', max_inflight: 2 },
        { id: 'w2', cluster: 'worker_2', max_inflight: 2 },
      ],
    });
    const h = harness(g.target);
    try {
      // new, then affinity_hit for the same session.
      const first = await h.request(chat({ session: 'alice' }));
      await h.request(chat({ session: 'alice' }));
      const home = first.cluster === 'worker_1' ? 'w1' : 'w2';
      const other = home === 'w1' ? 'w2' : 'w1';
      let m = await scrape(g.admin);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'new', pool: 'default' }), 1);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'affinity_hit', pool: 'default' }), 1);
      assert.equal(m.value('kvgate_affinity_hit_ratio'), 0.5);

      // Fill alice's worker: held requests are in flight, then alice migrates.
      await holdRequest(h, 'alice');
      await holdRequest(h, 'alice');
      m = await scrape(g.admin);
      assert.equal(m.value('kvgate_worker_inflight', { worker: home }), 2);
      assert.equal(m.value('kvgate_worker_max_inflight', { worker: home }), 2);
      assert.ok(m.value('kvgate_extproc_streams_open')! >= 2, "m.value('kvgate_extproc_streams_open')! >= 2");
      const moved = await h.request(chat({ session: 'alice' }));
      assert.equal(moved.cluster, other === 'w1' ? 'worker_1' : 'worker_2');
      m = await scrape(g.admin);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'migrated', pool: 'default' }), 1);
      assert.equal(m.value('kvgate_migrations_total', { from: home }), 1);

      // Fill the other worker too: the next request is shed with 429.
      await holdRequest(h, 'alice');
      await holdRequest(h, 'alice');
      const shed = await h.request(chat({ session: 'bob' }));
      assert.equal(shed.kind === 'local' && shed.status, 429);
      // Nothing healthy: 503.
      await setWorkerState(g.admin, 'w1', 'down');
      await setWorkerState(g.admin, 'w2', 'down');
      const none = await h.request(chat({ session: 'carol' }));
      assert.equal(none.kind === 'local' && none.status, 503);
      // A malformed body with malformed_body: reject is a 400, "rejected".
      const bad = await h.request({ method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, body: '{not json' });
      assert.equal(bad.kind === 'local' && bad.status, 400);

      m = await scrape(g.admin);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'shed', pool: 'default' }), 2);
      // A malformed body is rejected before any pool is chosen.
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'rejected', pool: '' }), 1);
      // Each shed names its class of service (unclassified requests are the default class).
      assert.equal(m.value('kvgate_sheds_total', { reason: 'overloaded', status: '429', class: 'standard', pool: 'default' }), 1);
      assert.equal(m.value('kvgate_sheds_total', { reason: 'no_healthy_workers', status: '503', class: 'standard', pool: 'default' }), 1);
      assert.equal(m.value('kvgate_class_requests_total', { class: 'standard', pool: 'default' }), 9, 'every routed or shed request, by class');
      assert.equal(m.value('kvgate_worker_state', { worker: 'w1', state: 'down' }), 1);
      assert.equal(m.value('kvgate_worker_state', { worker: 'w1', state: 'healthy' }), 0);
      const routed = m.sum('kvgate_decisions_total') - 3;
      assert.equal(routed, 7, 'new + affinity_hit + 4 held + migrated');
      assert.equal(m.value('kvgate_affinity_hit_ratio'), 5 / 7);

      // Every decision has a latency; every routed one took one store commit.
      const latency = m.histogram('kvgate_decision_duration_seconds', { outcome: 'affinity_hit', pool: 'default' });
      assert.equal(latency?.count, 5);
      assert.ok(latency.sum > 0 && latency.sum < 5, "latency.sum > 0 && latency.sum < 5");
      assert.equal(latency.buckets['+Inf'], 5);
      const commits = m.histogram('kvgate_store_duration_seconds', { operation: 'commit' });
      assert.equal(commits?.count, 7);
      assert.equal(m.value('kvgate_store_errors_total', { operation: 'commit' }), undefined, 'no store errors');
      assert.ok(m.histogram('kvgate_store_duration_seconds', { operation: 'set_state' })!.count >= 2);
      assert.equal(m.value('kvgate_extproc_streams_total'), 10, 'one stream per request');
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('with several pools, decisions, sheds and latency are counted per pool; a request no pool took has the empty pool', async () => {
    const g = await startTestGate({
      pools: [
        { name: 'big', models: ['llama'], workers: [{ id: 'b1', cluster: 'worker_1' }, { id: 'b2', cluster: 'worker_2' }] },
        { name: 'small', models: ['mistral'], workers: [{ id: 's1', cluster: 'worker_3' }] },
      ],
    });
    const h = harness(g.target);
    try {
      let m = await scrape(g.admin);
      // Both pools' outcomes from the first scrape, so a per-pool rate() has no gap.
      for (const pool of ['big', 'small']) assert.equal(m.value('kvgate_decisions_total', { outcome: 'shed', pool }), 0, `${pool} shed from the start`);
      await h.request(chat({ session: 'a', model: 'llama' }));
      await h.request(chat({ session: 'a', model: 'llama' }));
      await h.request(chat({ session: 'b', model: 'mistral' }));
      // Only the small pool loses its worker: its sheds must not be lost in a fleet-wide sum.
      await setWorkerState(g.admin, 's1', 'down');
      const none = await h.request(chat({ session: 'c', model: 'mistral' }));
      assert.equal(none.kind === 'local' && none.status, 503);
      // A model no pool serves is rejected before a pool is chosen.
      const unknown = await h.request(chat({ session: 'd', model: 'no-such-model' }));
      assert.equal(unknown.kind, 'local');
      m = await scrape(g.admin);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'new', pool: 'big' }), 1);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'affinity_hit', pool: 'big' }), 1);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'new', pool: 'small' }), 1);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'shed', pool: 'small' }), 1);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'shed', pool: 'big' }), 0);
      assert.equal(m.value('kvgate_decisions_total', { outcome: 'rejected', pool: '' }), 1);
      assert.equal(m.value('kvgate_sheds_total', { reason: 'no_healthy_workers', status: '503', class: 'standard', pool: 'small' }), 1);
      assert.equal(m.sum('kvgate_sheds_total', { pool: 'big' }), 0, 'the big pool shed nothing');
      assert.equal(m.value('kvgate_class_requests_total', { class: 'standard', pool: 'small' }), 2, 'the small pool: one routed, one shed');
      assert.equal(m.histogram('kvgate_decision_duration_seconds', { outcome: 'new', pool: 'big' })?.count, 1);
      // The gauge is the whole gate's: summed over pools (1 hit of 3 keyed).
      assert.equal(m.value('kvgate_affinity_hit_ratio'), 1 / 3);
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('a reload that removes a pool and a worker drops their series; the remaining pool keeps its counts', async () => {
    const pools = (bigWorkers: Array<{ id: string; cluster: string }>, withSmall: boolean) => ({
      pools: [
        { name: 'big', models: ['llama'], workers: bigWorkers },
        ...(withSmall ? [{ name: 'small', models: ['mistral'], workers: [{ id: 's1', cluster: 'worker_3' }] }] : []),
      ],
    });
    const big = [
      { id: 'b1', cluster: 'worker_1' },
      { id: 'b2', cluster: 'worker_2' },
    ];
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'kvgate-metrics-reload-')), 'kvgate.yaml');
    writeFileSync(file, stringify(pools(big, true)));
    const g = await startTestGate(pools(big, true), { configFile: file });
    const h = harness(g.target);
    try {
      // The big pool: a session, then its worker drained, so it migrates (a series labelled with that worker).
      const first = clusterOf(await h.request(chat({ session: 'a', model: 'llama' })));
      const left = first === 'worker_1' ? 'b1' : 'b2';
      const stays = big.find((w) => w.id !== left)!;
      await setWorkerState(g.admin, left, 'draining');
      assert.equal(clusterOf(await h.request(chat({ session: 'a', model: 'llama' }))), stays.cluster);
      // The small pool: one routed, one shed.
      clusterOf(await h.request(chat({ session: 'b', model: 'mistral' })));
      await setWorkerState(g.admin, 's1', 'down');
      const shed = await h.request(chat({ session: 'c', model: 'mistral' }));
      assert.equal(shed.kind === 'local' && shed.status, 503);
      const unknown = await h.request(chat({ session: 'd', model: 'no-such-model' }));
      assert.equal(unknown.kind, 'local');

      const before = await scrape(g.admin);
      // Every kind of series the reload must drop is there to begin with.
      assert.equal(before.value('kvgate_decisions_total', { outcome: 'new', pool: 'small' }), 1);
      assert.equal(before.value('kvgate_sheds_total', { reason: 'no_healthy_workers', status: '503', class: 'standard', pool: 'small' }), 1);
      assert.equal(before.value('kvgate_class_requests_total', { class: 'standard', pool: 'small' }), 2);
      assert.equal(before.histogram('kvgate_decision_duration_seconds', { outcome: 'new', pool: 'small' })?.count, 1);
      assert.equal(before.value('kvgate_migrations_total', { from: left }), 1);
      assert.equal(before.value('kvgate_worker_state', { worker: 's1', state: 'down' }), 1);
      assert.equal(before.value('kvgate_worker_inflight', { worker: left }), 0);

      writeFileSync(file, stringify(pools([stays], false)));
      assert.equal(g.reload('SIGHUP'), 'applied');
      const afterReload = await scrape(g.admin);

      // Nothing of the small pool or the removed worker is left, in any family.
      const gone = afterReload.text.split('\n').filter((l) => /pool="small"/.test(l) || new RegExp(`(worker|from)="${left}"`).test(l) || /worker="s1"/.test(l));
      assert.deepEqual(gone, [], 'no series of the removed pool or workers');
      // The remaining pool's series, and those of requests with no pool, keep their values.
      for (const [name, labels] of [
        ['kvgate_decisions_total', { outcome: 'new', pool: 'big' }],
        ['kvgate_decisions_total', { outcome: 'migrated', pool: 'big' }],
        ['kvgate_decisions_total', { outcome: 'rejected', pool: '' }],
        ['kvgate_class_requests_total', { class: 'standard', pool: 'big' }],
      ] as const) {
        const was = before.value(name, labels);
        assert.ok(was !== undefined && was > 0, `${name} ${JSON.stringify(labels)} counted before`);
        assert.equal(afterReload.value(name, labels), was, `${name} ${JSON.stringify(labels)} kept`);
      }
      assert.deepEqual(afterReload.histogram('kvgate_decision_duration_seconds', { outcome: 'new', pool: 'big' }), before.histogram('kvgate_decision_duration_seconds', { outcome: 'new', pool: 'big' }));
      assert.equal(afterReload.value('kvgate_worker_state', { worker: stays.id, state: 'healthy' }), 1);

      // A request of the remaining pool still counts on top of what it had.
      clusterOf(await h.request(chat({ session: 'a', model: 'llama' })));
      const later = await scrape(g.admin);
      assert.equal(later.value('kvgate_decisions_total', { outcome: 'affinity_hit', pool: 'big' }), (before.value('kvgate_decisions_total', { outcome: 'affinity_hit', pool: 'big' }) ?? 0) + 1);
    } finally {
      h.close();
      await g.close(100);
    }
  });

  test('a removed pool stays gone when a request of it records its outcome after the reload; no config yet drops nothing', async () => {
    let pools: string[] = [];
    const workers = ['b1', 's1'];
    const m = new Metrics({ pools: () => pools, workers: () => workers, processMetrics: false });
    const small = { outcome: 'new', pool: 'small' } as const;
    m.decisions.inc(small);
    m.migrations.inc({ from: 's1' });
    // No pool yet (a scrape while the gate starts): nothing counts as gone.
    let text = (await m.exposition()).body;
    assert.match(text, /kvgate_decisions_total\{outcome="new",pool="small"\} 1/);
    pools = ['big'];
    workers.pop();
    text = (await m.exposition()).body;
    assert.doesNotMatch(text, /pool="small"|from="s1"/);
    // A request of the old pool, still in flight at the reload, finishes and counts.
    m.decisions.inc(small);
    m.decisionSeconds.observe(small, 0.001);
    m.migrations.inc({ from: 's1' });
    text = (await m.exposition()).body;
    assert.doesNotMatch(text, /pool="small"|from="s1"/);
    assert.match(text, /kvgate_decisions_total\{outcome="new",pool="big"\} 0/);
  });

  test('ext_proc stream errors are counted by reason', async () => {
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1' }] });
    const h = harness(g.target);
    try {
      const s = h.openRawStream();
      s.write({} as never); // a message with no phase: protocol violation
      const ev = await s.next(3000);
      assert.ok(isClosed(ev), "isClosed(ev)");
      await waitFor(async () => (await scrape(g.admin)).value('kvgate_extproc_stream_errors_total', { reason: 'protocol_violation' }) === 1, 3000, 'the error counted');
      const m = await scrape(g.admin);
      assert.equal(m.value('kvgate_extproc_streams_open'), 0);
    } finally {
      h.close();
      await g.close(100);
    }
  });
});
