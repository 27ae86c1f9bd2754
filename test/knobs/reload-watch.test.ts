/**
 * The config watcher against real file-system operations in a temporary directory, the way
 * operators' tools change a config file: Kubernetes' ConfigMap update (a new timestamped directory,
 * then an atomic rename of the `..data` symlink), a burst of updates, a file deleted and written
 * again, a config path that is a symlink into another directory, a config directory replaced, and
 * other files written beside the config.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { ConfigReloader } from '../../src/config/reload.js';
import { parseConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { waitFor } from '../helpers/envoy.js';
import { recordingLogger } from '../helpers/logger.js';

const text = (maxInflight: number) => `limits: {max_inflight: ${maxInflight}}\nworkers:\n  - {id: a, cluster: a}\n`;

describe('config watcher, real file-system operations', () => {
  const reloaders: ConfigReloader[] = [];
  after(() => reloaders.forEach((r) => r.close()));

  function watch(file: string) {
    let running: Config = parseConfig({ limits: { max_inflight: 1 }, workers: [{ id: 'a', cluster: 'a' }] });
    const { logger, lines } = recordingLogger('debug');
    const r = new ConfigReloader({ file, logger, current: () => running, apply: (c) => (running = c), debounceMs: 30, pollMs: 50 });
    reloaders.push(r);
    r.watch();
    return { limit: () => running.limits.max_inflight, lines };
  }

  test('a Kubernetes ConfigMap update (..data symlink swapped by rename), a burst of them, and a bad one', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-cm-'));
    let generation = 0;
    // What the kubelet does (atomic_writer.go): write a new timestamped directory, point a new
    // symlink at it, rename that over `..data`, remove the old directory.
    const publish = (body: string) => {
      const ts = path.join(dir, `..2026_12_01_00_00_00.${++generation}`);
      mkdirSync(ts);
      writeFileSync(path.join(ts, 'kvgate.yaml'), body);
      symlinkSync(path.basename(ts), path.join(dir, '..data_tmp'));
      renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
      if (generation > 1) rmSync(path.join(dir, `..2026_12_01_00_00_00.${generation - 1}`), { recursive: true });
    };
    publish(text(1));
    symlinkSync('..data/kvgate.yaml', path.join(dir, 'kvgate.yaml'));
    const w = watch(path.join(dir, 'kvgate.yaml'));

    publish(text(2));
    await waitFor(() => w.limit() === 2, 5000, 'the swapped ConfigMap');
    for (let n = 3; n <= 9; n++) publish(text(n));
    await waitFor(() => w.limit() === 9, 5000, 'the last of a burst');
    publish('workers: [\n');
    await waitFor(() => w.lines.some((l) => l['msg'] === 'config reload rejected; keeping the running config'), 5000, 'the rejection');
    assert.equal(w.limit(), 9, 'the running config stays');
  });

  test('a file deleted and written again is read again', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-watch-'));
    const file = path.join(dir, 'kvgate.yaml');
    writeFileSync(file, text(1));
    const w = watch(file);
    unlinkSync(file);
    await waitFor(() => w.lines.some((l) => /cannot read config file/.test(String(l['err']))), 5000, 'the missing file said');
    writeFileSync(file, text(5));
    await waitFor(() => w.limit() === 5, 5000, 'the new file');
  });

  test('a config path that is a symlink into another directory follows changes made there', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-watch-'));
    const elsewhere = mkdtempSync(path.join(os.tmpdir(), 'kvgate-target-'));
    writeFileSync(path.join(elsewhere, 'prod.yaml'), text(1));
    symlinkSync(path.join(elsewhere, 'prod.yaml'), path.join(dir, 'kvgate.yaml'));
    const w = watch(path.join(dir, 'kvgate.yaml'));
    await new Promise((r) => setTimeout(r, 150)); // the poll's first stat, its baseline, is taken
    // Replaced by rename, as an editor or a template agent writes it: no event in `dir`.
    writeFileSync(path.join(elsewhere, 'prod.yaml.tmp'), text(6));
    renameSync(path.join(elsewhere, 'prod.yaml.tmp'), path.join(elsewhere, 'prod.yaml'));
    await waitFor(() => w.limit() === 6, 5000, 'the change in the symlink\'s directory');
  });

  test('other files written in the directory (a log kept beside the config) neither re-read it nor hold a change back', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-watch-'));
    const file = path.join(dir, 'kvgate.yaml');
    writeFileSync(file, text(1));
    const w = watch(file);
    // `kvgate serve --config kvgate.yaml > kvgate.log`: a line every 10 ms, far inside the debounce.
    let n = 0;
    const log = setInterval(() => writeFileSync(path.join(dir, 'kvgate.log'), `line ${++n}\n`, { flag: 'a' }), 10);
    try {
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(w.lines.filter((l) => l['msg'] === 'config re-read; nothing to change').length, 0, 'the log file is not the config');
      writeFileSync(file, text(4));
      await waitFor(() => w.limit() === 4, 2000, 'the config change while the log is written');
    } finally {
      clearInterval(log);
    }
  });

  test('two reloaders of one file: closing one leaves the other polling (a gate stopped in a process that runs another)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-watch-'));
    const elsewhere = mkdtempSync(path.join(os.tmpdir(), 'kvgate-target-'));
    writeFileSync(path.join(elsewhere, 'prod.yaml'), text(1));
    symlinkSync(path.join(elsewhere, 'prod.yaml'), path.join(dir, 'kvgate.yaml'));
    const closed = watch(path.join(dir, 'kvgate.yaml'));
    const kept = watch(path.join(dir, 'kvgate.yaml'));
    reloaders.at(-2)!.close();
    await new Promise((r) => setTimeout(r, 150));
    // Seen by the poll alone (no event in `dir`).
    writeFileSync(path.join(elsewhere, 'prod.yaml.tmp'), text(3));
    renameSync(path.join(elsewhere, 'prod.yaml.tmp'), path.join(elsewhere, 'prod.yaml'));
    await waitFor(() => kept.limit() === 3, 5000, 'the change, by the reloader still open');
    assert.equal(closed.limit(), 1, 'the closed one reads nothing more');
  });

  test('a config directory removed and made again is still watched', async () => {
    const base = mkdtempSync(path.join(os.tmpdir(), 'kvgate-watch-'));
    const dir = path.join(base, 'conf');
    mkdirSync(dir);
    const file = path.join(dir, 'kvgate.yaml');
    writeFileSync(file, text(1));
    const w = watch(file);
    rmSync(dir, { recursive: true });
    mkdirSync(dir);
    writeFileSync(file, text(8));
    await waitFor(() => w.limit() === 8, 5000, 'the file in the new directory');
    // The first write after the swap is seen either way (the old directory's removal is an event
    // there); the next one only if the new directory is watched.
    await new Promise((r) => setTimeout(r, 100));
    writeFileSync(file, text(9));
    await waitFor(() => w.limit() === 9, 5000, 'a later change in the new directory');
  });
});
