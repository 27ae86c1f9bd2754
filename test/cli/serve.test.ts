/**
 * `kvgate serve` as a user runs it: a separate process, flags and environment variables, the
 * example config, health, and a clean exit on SIGTERM.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { chat, harness } from '../helpers/envoy.js';
import { startGateProcess, writeConfig } from '../helpers/gate-process.js';
import { freePort } from '../../src/util/free-port.js';
import { KVGATE } from '../helpers/kvgate-cli.js';
import { parseKvgate } from '../helpers/cli-parse.js';
import { buildCli } from '../../src/cli/cli.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const EXAMPLE = path.join(ROOT, 'envoy/kvgate.yaml');

async function grpcHealth(target: string, service: string): Promise<string> {
  const { HealthImplementation: _unused, protoPath } = await import('grpc-health-check');
  void _unused;
  const protoLoader = await import('@grpc/proto-loader');
  const def = protoLoader.loadSync(protoPath, { keepCase: true, enums: String });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } } };
  const client = new pkg.grpc.health.v1.Health(target, grpc.credentials.createInsecure());
  try {
    return await new Promise<string>((resolve, reject) =>
      (client as unknown as { Check(r: unknown, cb: (e: Error | null, r: { status: string }) => void): void }).Check({ service }, (e, r) => (e ? reject(e) : resolve(r.status))),
    );
  } finally {
    client.close();
  }
}

describe('kvgate serve', () => {
  test('serves the example config: Envoy gets routing answers, health is SERVING, SIGTERM exits 0', async () => {
    const gate = await startGateProcess(['--config', EXAMPLE]);
    const h = harness(gate.target);
    try {
      const out = await h.request(chat({ session: 'cli' }));
      assert.equal(out.kind, 'upstream');
      assert.match(out.cluster!, /^worker_[123]$/);
      assert.equal(await grpcHealth(gate.target, 'envoy.service.ext_proc.v3.ExternalProcessor'), 'SERVING');
      const ready = await fetch(`http://127.0.0.1:${gate.adminPort}/readyz`);
      assert.equal(ready.status, 200);
      h.close();
      assert.equal(await gate.stop(), 0);
    } finally {
      // A failed assertion must not leave the gate running: it would hold the test file open.
      h.close();
      await gate.kill();
    }
  });

  test('flags have environment variables', async () => {
    const grpcPort = await freePort();
    const adminPort = await freePort();
    const proc = spawn(process.execPath, [...KVGATE, 'serve'], {
      env: { ...process.env, KVGATE_CONFIG: EXAMPLE, KVGATE_GRPC_PORT: String(grpcPort), KVGATE_ADMIN_PORT: String(adminPort), KVGATE_STORE: 'memory', KVGATE_GRPC_HOST: '127.0.0.1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no start')), 60_000);
        proc.stdout.on('data', (d: Buffer) => {
          if (d.toString().includes('kvgate serving')) {
            clearTimeout(timer);
            resolve();
          }
        });
      });
      const res = await fetch(`http://127.0.0.1:${adminPort}/workers`);
      assert.equal(res.status, 200);
      const h = harness(`127.0.0.1:${grpcPort}`);
      const out = await h.request(chat({ session: 'env' }));
      h.close();
      assert.equal(out.kind, 'upstream');
    } finally {
      proc.kill('SIGTERM');
    }
  });

  test('every flag has an environment variable the README names, and the flag wins over it, as the README says', async () => {
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    assert.match(readme, /Every flag has an environment variable \(the flag wins\)/);
    const program = await buildCli(['node', 'kvgate', 'serve']);
    const serve = program.commands.find((c) => c.name() === 'serve')!;
    const flags = serve.options.filter((o) => o.long !== '--help');
    for (const o of flags) {
      assert.ok(o.envVar, `${o.long} has an environment variable`);
      assert.ok(readme.includes(`\`${o.envVar}\``), `the README names ${o.envVar}`);
    }
    const saved = { ...process.env };
    try {
      Object.assign(process.env, { KVGATE_CONFIG: '/from/env.yaml', KVGATE_GRPC_PORT: '1111', KVGATE_LOG_LEVEL: 'debug' });
      const fromEnv = await parseKvgate(['serve']);
      assert.deepEqual([fromEnv.options['config'], fromEnv.options['grpcPort'], fromEnv.options['logLevel']], ['/from/env.yaml', 1111, 'debug']);
      const fromFlags = await parseKvgate(['serve', '--config', '/from/flag.yaml', '--grpc-port', '2222', '--log-level', 'warn']);
      assert.deepEqual([fromFlags.options['config'], fromFlags.options['grpcPort'], fromFlags.options['logLevel']], ['/from/flag.yaml', 2222, 'warn']);
    } finally {
      for (const k of ['KVGATE_CONFIG', 'KVGATE_GRPC_PORT', 'KVGATE_LOG_LEVEL']) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
  });

  test('a flag a config error points to is a flag of serve, with the variable the message names', async () => {
    const { SET_BY_FLAG } = await import('../../src/config/issues.js');
    const program = await buildCli(['node', 'kvgate', 'serve']);
    const serve = program.commands.find((c) => c.name() === 'serve')!;
    for (const flag of new Set(Object.values(SET_BY_FLAG))) {
      const option = serve.options.find((o) => o.long === flag);
      assert.ok(option, `serve has ${flag}`);
      assert.equal(option.envVar, `KVGATE_${flag.slice(2).replace(/-/g, '_').toUpperCase()}`, flag);
    }
  });

  test('an invalid config exits with status 2 and lists every problem', () => {
    const file = writeConfig({ routing: { shed_status: 200 }, workers: [{ id: 'a' }] });
    const r = spawnSync(process.execPath, [...KVGATE, 'serve', '--config', file], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /routing\.shed_status/);
    assert.match(r.stderr, /workers\.0\.cluster/);
  });

  test('a store spec that is neither memory nor redis is refused', () => {
    const r = spawnSync(process.execPath, [...KVGATE, 'serve', '--config', EXAMPLE, '--store', 'postgres://x', '--grpc-port', '0', '--admin-port', '0'], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--store must be/);
  });

  test('with no port flags it listens on 9002 and 9090 (skipped when those ports are taken)', async (t) => {
    for (const port of [9002, 9090]) {
      const free = await new Promise<boolean>((resolve) => {
        const s = net.createServer().once('error', () => resolve(false)).listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
      });
      if (!free) return t.skip(`port ${port} is in use on this machine`);
    }
    const proc = spawn(process.execPath, [...KVGATE, 'serve', '--config', EXAMPLE], { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      const line = await new Promise<Record<string, unknown>>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no start')), 60_000);
        proc.stdout.on('data', (d: Buffer) => {
          for (const l of d.toString().split('\n')) {
            if (l.includes('kvgate serving')) {
              clearTimeout(timer);
              resolve(JSON.parse(l) as Record<string, unknown>);
            }
          }
        });
      });
      assert.equal(line['grpc_port'], 9002);
      assert.equal(line['admin_port'], 9090);
      const h = harness('127.0.0.1:9002');
      const out = await h.request(chat({ session: 'default-port' }));
      h.close();
      assert.equal(out.kind, 'upstream');
    } finally {
      proc.kill('SIGTERM');
    }
  });
});
