import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfigFile, parseConfig, parseConfigText } from '../../src/config/load.js';
import { DEFAULTS } from '../../src/config/defaults.js';

describe('config', () => {
  test('defaults fill everything not given', () => {
    const c = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    assert.equal(c.routing.header, DEFAULTS.routingHeader);
    assert.equal(c.keys.session_header, 'x-session-id');
    assert.equal(c.limits.max_inflight, DEFAULTS.maxInflight);
    assert.ok(Object.isFrozen(c.routing), "Object.isFrozen(c.routing)");
  });

  test('settings that become timers are bounded: past 2^31-1 ms Node would fire them at once', () => {
    const w = [{ id: 'a', cluster: 'a' }];
    for (const [section, value] of [
      ['limits', { stream_idle_s: 3_000_000 }],
      ['store', { refresh_ms: 3_000_000_000 }],
      ['signals', { interval_ms: 3_000_000_000 }],
      ['leases', { ttl_s: 3_000_000 }],
    ] as const) {
      assert.throws(() => parseConfig({ [section]: value, workers: w }), (err: Error) => new RegExp(`${section}\\.${Object.keys(value)[0]}`).test(err.message), section);
    }
    assert.equal(parseConfig({ limits: { stream_idle_s: 86_400 }, workers: w }).limits.stream_idle_s, 86_400, 'a day is allowed');
  });

  test('bounds at their edge: kv_pressure 0 is refused (every worker would be pressured); a lease ttl_s of 2 is refused, 3 accepted', () => {
    const w = [{ id: 'a', cluster: 'a' }];
    assert.throws(() => parseConfig({ thresholds: { kv_pressure: 0 }, workers: w }), /thresholds\.kv_pressure/);
    assert.equal(parseConfig({ thresholds: { kv_pressure: 0.01 }, workers: w }).thresholds.kv_pressure, 0.01);
    assert.throws(() => parseConfig({ leases: { ttl_s: 2 }, workers: w }), /leases\.ttl_s/);
    assert.equal(parseConfig({ leases: { ttl_s: 3 }, workers: w }).leases.ttl_s, 3);
  });

  test('a scrape interval not shorter than stale_after_ms is refused: every worker would go down between two scrapes', () => {
    const w = [{ id: 'a', cluster: 'a' }];
    // An operator scraping less often (5 s, as Prometheus might) and leaving stale_after_ms at its
    // 2 s: figures age past it before the next scrape, so each worker counts as down 60% of the time.
    assert.throws(
      () => parseConfig({ signals: { interval_ms: 5000 }, workers: w }),
      (err: Error) => {
        assert.match(err.message, /signals\.stale_after_ms: .*2000 ms.*interval_ms \(5000 ms\)/);
        assert.match(err.message, /raise stale_after_ms above 5000 or scrape more often/);
        return true;
      },
    );
    assert.throws(() => parseConfig({ signals: { interval_ms: 800, stale_after_ms: 800 }, workers: w }), /signals\.stale_after_ms/);
    assert.equal(parseConfig({ signals: { interval_ms: 5000, stale_after_ms: 12_000 }, workers: w }).signals.interval_ms, 5000);
  });

  test('dcgm_url without metrics_url is refused: its figures would be scraped and never used', () => {
    assert.throws(() => parseConfig({ workers: [{ id: 'a', cluster: 'a', dcgm_url: 'http://n:9400/metrics' }] }), /workers\.0\.dcgm_url.*needs metrics_url/s);
    assert.ok(parseConfig({ workers: [{ id: 'a', cluster: 'a', metrics_url: 'http://n:8000/metrics', dcgm_url: 'http://n:9400/metrics' }] }));
  });

  test('every problem is reported at once, with its path', () => {
    assert.throws(
      () => parseConfig({ routing: { shed_status: 418, hedaer: 'x' }, workers: [{ id: 'a', cluster: 'a' }, { id: 'a', cluster: '' }] }),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, 'invalid_config');
        assert.match(err.message, /routing\.shed_status/);
        assert.match(err.message, /hedaer/);
        assert.match(err.message, /duplicate worker id "a"/);
        assert.match(err.message, /workers\.1\.cluster/);
        return true;
      },
    );
  });

  test('a routing header Envoy will not let kvgate set is refused, with the reason', () => {
    const withHeader = (header: string) => () => parseConfig({ routing: { header }, workers: [{ id: 'a', cluster: 'a' }] });
    // Envoy's default ext_proc mutation rules (mutation_rules.cc) skip these silently: the route
    // would never follow kvgate's answer.
    for (const header of ['host', ':authority', ':method', ':scheme']) {
      assert.throws(withHeader(header), (err: Error) => {
        assert.match(err.message, /routing\.header: .* cannot be the routing header: Envoy's default ext_proc mutation rules refuse/);
        assert.match(err.message, /a header Envoy itself routes on/);
        return true;
      }, header);
    }
    for (const header of ['x-envoy-original-dst-host', 'X-Envoy-Upstream-Alt', 'x-envoyish']) {
      assert.throws(withHeader(header), /refuse x-envoy-\* headers/, header);
    }
    assert.throws(withHeader('Not A Header'), /routing\.header: must be a lower-case HTTP header name/);
    assert.equal(parseConfig({ routing: { header: 'x-llm-worker' }, workers: [{ id: 'a', cluster: 'a' }] }).routing.header, 'x-llm-worker');
  });

  test('two workers naming one Envoy cluster are refused, across pools too: kvgate would count one set of hosts as two workers', () => {
    assert.throws(
      () => parseConfig({ workers: [{ id: 'a', cluster: 'gpu_1' }, { id: 'b', cluster: 'gpu_1' }] }),
      (err: Error) => {
        assert.match(err.message, /workers\.1\.cluster: cluster "gpu_1" is already worker "a"'s/);
        assert.match(err.message, /give each worker its own cluster/);
        return true;
      },
    );
    assert.throws(
      () => parseConfig({ pools: [{ name: 'p', models: ['m'], workers: [{ id: 'a', cluster: 'c' }] }, { name: 'q', workers: [{ id: 'b', cluster: 'c' }] }] }),
      /pools\.1\.workers\.0\.cluster: cluster "c" is already worker "a"'s/,
    );
    // endpoint_picker routes by address (checked for duplicates there); a cluster is only a label.
    const ep = parseConfig({ routing: { protocol: 'endpoint_picker' }, workers: [{ id: 'a', cluster: 'c', address: '10.0.0.1:8000' }, { id: 'b', cluster: 'c', address: '10.0.0.2:8000' }] });
    assert.equal(ep.workers.length, 2);
  });

  test('an unknown key names the key it is probably a typo of, or the keys allowed there', () => {
    const msg = (raw: unknown) => {
      try {
        parseConfig(raw);
      } catch (err) {
        return (err as Error).message;
      }
      return assert.fail('expected the config to be refused');
    };
    assert.match(msg({ workers: [{ id: 'a', cluster: 'a', max_inflite: 3 }] }), /workers\.0: Unrecognized key: "max_inflite" \(did you mean "max_inflight"\?\)/);
    assert.match(msg({ limits: { maxInflight: 3 }, workers: [{ id: 'a', cluster: 'a' }] }), /limits: .*"maxInflight" \(did you mean "max_inflight"\?\)/);
    assert.match(msg({ pools: [{ name: 'p', wrokers: [], workers: [{ id: 'a', cluster: 'a' }] }] }), /pools\.0: .*did you mean "workers"/);
    assert.match(msg({ routing: { zzz: 1 }, workers: [{ id: 'a', cluster: 'a' }] }), /routing: .*"zzz" \(allowed here: protocol, header, shed_status/);
    // A short key is not "probably" any key one letter away: `ip` is not a typo of `id`.
    assert.match(msg({ workers: [{ id: 'a', cluster: 'a', ip: '10.0.0.1' }] }), /workers\.0: .*"ip" \(allowed here: id, cluster, address,/);
    // A key of another section, as a YAML indentation slip leaves it: where it belongs.
    assert.match(msg({ stream_idle_s: 60, workers: [{ id: 'a', cluster: 'a' }] }), /\(root\): Unrecognized key: "stream_idle_s" \(not a key here: did you mean limits\.stream_idle_s\? check its indentation\)/);
    assert.match(msg({ max_inflight: 8, workers: [{ id: 'a', cluster: 'a' }] }), /did you mean limits\.max_inflight, workers\[\]\.max_inflight or pools\[\]\.max_inflight\?/);
    assert.match(msg({ workers: [{ id: 'a', cluster: 'a', ttl_s: 5 }] }), /workers\.0: .*"ttl_s" \(not a key here: did you mean prefix\.ttl_s, affinity\.ttl_s or leases\.ttl_s\?/);
  });

  test('a setting that is a flag, written in the file, names its flag and variable (it cannot change on reload)', () => {
    const msg = (raw: Record<string, unknown>) => {
      try {
        parseConfig({ workers: [{ id: 'a', cluster: 'a' }], ...raw });
      } catch (err) {
        return (err as Error).message;
      }
      return assert.fail('expected the config to be refused');
    };
    assert.match(msg({ grpc_port: 9002 }), /\(root\): Unrecognized key: "grpc_port" \(set with --grpc-port or KVGATE_GRPC_PORT, not in the config file\)/);
    assert.match(msg({ logLevel: 'debug' }), /"logLevel" \(set with --log-level or KVGATE_LOG_LEVEL/);
    assert.match(msg({ store: 'redis://redis:6379' }), /store: .*the store itself is chosen with --store or KVGATE_STORE; this section holds its settings/);
    assert.match(msg({ store: { url: 'redis://redis:6379' } }), /store: Unrecognized key: "url" \(set with --store or KVGATE_STORE/);
  });

  test('a file that is empty, not text, not a mapping or several documents says so, briefly', () => {
    const msg = (text: string) => {
      try {
        parseConfigText(text, 'kvgate.yaml');
      } catch (err) {
        return (err as Error).message;
      }
      return assert.fail('expected the file to be refused');
    };
    assert.match(msg(''), /kvgate\.yaml is empty/);
    const binary = msg(`\u0000\u0001\u0002${'\ufffd'.repeat(400)}`);
    assert.match(binary, /kvgate\.yaml is not text/);
    assert.ok(binary.length < 300, `no dump of the file: ${binary.length} characters`);
    assert.match(msg('just words\n'), /kvgate\.yaml is not a kvgate config: its top level is a string, not a mapping of settings/);
    assert.match(msg('- a\n- b\n'), /its top level is a list/);
    const multi = msg('workers: [{id: a, cluster: a}]\n---\nworkers: [{id: b, cluster: b}]\n');
    assert.match(multi, /several YAML documents/);
    assert.doesNotMatch(multi, /parseAllDocuments/, "the YAML library's advice to its own callers");
    // A value the file has is quoted as it is, and a long one cut short.
    assert.match(msg('limits: {max_inflight: .inf}\nworkers: [{id: a, cluster: a}]\n'), /limits\.max_inflight: .*\(got Infinity\)/);
    const long = msg(`routing: {shed_status: "${'x'.repeat(5000)}"}\nworkers: [{id: a, cluster: a}]\n`);
    assert.ok(long.length < 400, `a long value is cut short: ${long.length} characters`);
  });

  test('YAML merge keys (<<: *anchor) work, as in Kubernetes and compose files: workers sharing settings are written once', () => {
    const c = parseConfigText(
      'workers:\n  - &gpu {id: a, cluster: a, max_inflight: 8, kv_capacity_tokens: 900000}\n  - {<<: *gpu, id: b, cluster: b}\n  - {<<: *gpu, id: c, cluster: c, max_inflight: 4}\n',
      'kvgate.yaml',
    );
    assert.deepEqual(c.workers.map((w) => [w.id, w.cluster, w.max_inflight, w.kv_capacity_tokens]), [
      ['a', 'a', 8, 900000],
      ['b', 'b', 8, 900000],
      ['c', 'c', 4, 900000],
    ]);
  });

  test('no workers is an error', () => {
    assert.throws(() => parseConfig({}), /workers/);
    assert.throws(() => parseConfig({ workers: [] }), /at least one worker/);
  });

  test('files: unreadable, not YAML, and valid', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-config-'));
    assert.throws(() => loadConfigFile(path.join(dir, 'missing.yaml')), /cannot read config file/);
    // A mounted ConfigMap's directory passed for the file in it: named, with the files to choose from.
    const mount = path.join(dir, 'mount');
    mkdirSync(mount);
    writeFileSync(path.join(mount, 'kvgate.yaml'), 'workers: [{id: a, cluster: a}]\n');
    assert.throws(() => loadConfigFile(mount), (err: Error) => {
      assert.equal(err.message, `${mount} is a directory, not a config file: pass the file in it (${path.join(mount, 'kvgate.yaml')})`);
      return true;
    });
    writeFileSync(path.join(dir, 'bad.yaml'), 'workers: [ {id: a\n');
    assert.throws(() => loadConfigFile(path.join(dir, 'bad.yaml')), /not valid YAML/);
    writeFileSync(path.join(dir, 'ok.yaml'), 'workers:\n  - {id: a, cluster: ca, max_inflight: 3}\n');
    assert.equal(loadConfigFile(path.join(dir, 'ok.yaml')).workers[0]?.max_inflight, 3);
  });
});
