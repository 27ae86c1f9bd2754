import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { loadConfigFile, parseConfig } from '../../src/config/load.js';
import { DEFAULTS } from '../../src/config/defaults.js';

describe('config', () => {
  test('defaults fill everything not given', () => {
    const c = parseConfig({ workers: [{ id: 'a', cluster: 'a' }] });
    assert.equal(c.routing.header, DEFAULTS.routingHeader);
    assert.equal(c.keys.session_header, 'x-session-id');
    assert.equal(c.limits.max_inflight, DEFAULTS.maxInflight);
    assert.ok(Object.isFrozen(c.routing));
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

  test('no workers is an error', () => {
    assert.throws(() => parseConfig({}), /workers/);
    assert.throws(() => parseConfig({ workers: [] }), /at least one worker/);
  });

  test('files: unreadable, not YAML, and valid', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-config-'));
    assert.throws(() => loadConfigFile(path.join(dir, 'missing.yaml')), /cannot read config file/);
    writeFileSync(path.join(dir, 'bad.yaml'), 'workers: [ {id: a\n');
    assert.throws(() => loadConfigFile(path.join(dir, 'bad.yaml')), /not valid YAML/);
    writeFileSync(path.join(dir, 'ok.yaml'), 'workers:\n  - {id: a, cluster: ca, max_inflight: 3}\n');
    assert.equal(loadConfigFile(path.join(dir, 'ok.yaml')).workers[0]?.max_inflight, 3);
  });
});
