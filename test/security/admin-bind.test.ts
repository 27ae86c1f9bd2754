/**
 * The admin API can drain workers, so `kvgate serve` binds it to 127.0.0.1 unless told otherwise:
 * reachable on loopback, refused on every other address of this machine. With --admin-host
 * 0.0.0.0 the same addresses do connect, which shows the refusal is the binding, not the network.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import os from 'node:os';
import { test } from 'node:test';
import { DEFAULTS } from '../../src/config/defaults.js';
import { startGateProcess, writeConfig } from '../helpers/gate-process.js';

/** This machine's non-loopback IPv4 addresses (link-local IPv6 needs a scope; IPv4 is enough). */
const external = Object.values(os.networkInterfaces())
  .flat()
  .filter((a): a is os.NetworkInterfaceInfo => a !== undefined && !a.internal && a.family === 'IPv4')
  .map((a) => a.address);

function connects(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port, timeout: 2000 });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
    s.once('timeout', () => {
      s.destroy();
      resolve(false);
    });
  });
}

test('the admin API binds to 127.0.0.1 by default and to other addresses only when asked', async (t) => {
  assert.equal(DEFAULTS.adminHost, '127.0.0.1');
  const config = writeConfig({ workers: [{ id: 'w1', cluster: 'worker_1' }] });
  const byDefault = await startGateProcess(['--config', config]);
  try {
    const serving = byDefault.lines.find((l) => l['msg'] === 'kvgate serving')!;
    assert.equal(serving['admin_host'], '127.0.0.1');
    assert.equal((await fetch(`http://127.0.0.1:${byDefault.adminPort}/healthz`)).status, 200);
    if (external.length === 0) t.diagnostic('no non-loopback IPv4 address here: only the bound host was checked');
    for (const ip of external) assert.equal(await connects(ip, byDefault.adminPort), false, `admin port refused on ${ip}`);
  } finally {
    await byDefault.stop();
  }
  if (external.length === 0) return;
  const exposed = await startGateProcess(['--config', config, '--admin-host', '0.0.0.0']);
  try {
    for (const ip of external) assert.equal(await connects(ip, exposed.adminPort), true, `admin port open on ${ip} when asked`);
  } finally {
    await exposed.stop();
  }
});
