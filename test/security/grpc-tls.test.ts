/**
 * TLS and mTLS on the ext_proc gRPC server, with certificates made for this run: a gate with a
 * certificate serves only TLS clients that trust its CA; with a client CA as well, only clients
 * presenting a certificate that CA signed. The flags and their environment variables work from
 * the command line, bad combinations exit 2, and the Envoy cluster fragment for mTLS is valid.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { checkServerIdentity, type TLSSocket } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { validateEnvoyText } from '../../scripts/envoy-schema.js';
import { makeCerts, type CertFiles } from '../helpers/certs.js';
import { chat, harness } from '../helpers/envoy.js';
import { startGateProcess, writeConfig } from '../helpers/gate-process.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';
import { FALLBACK_CLUSTER, problemWith } from '../helpers/load.js';
import { KVGATE } from '../helpers/kvgate-cli.js';

const FLEET = [{ id: 'w1', cluster: 'worker_1' }, { id: 'w2', cluster: 'worker_2' }];

let certs: CertFiles;
before(() => {
  certs = makeCerts();
});
after(() => {
  certs.remove();
});

/** Client credentials as Envoy's UpstreamTlsContext would hold them (the gate's name checked: kvgate). */
function clientCreds(opts: { ca?: string; cert?: string; key?: string }): grpc.ChannelCredentials {
  return grpc.credentials.createSsl(
    opts.ca ? readFileSync(opts.ca) : null,
    opts.key ? readFileSync(opts.key) : null,
    opts.cert ? readFileSync(opts.cert) : null,
    { checkServerIdentity: (_host, cert) => checkServerIdentity('kvgate', cert) },
  );
}

/** One request through the harness; 'ok' when kvgate routed it, 'refused' when the stream failed. */
async function attempt(target: string, credentials: grpc.ChannelCredentials): Promise<string> {
  // A long message timeout: a TLS handshake on a busy machine must not pass for a refusal.
  const h = harness(target, { channelCredentials: credentials, sni: 'kvgate', extProcOverride: { messageTimeoutMs: 10_000 } });
  try {
    const out = await h.request(chat({ session: 'tls' }));
    if (out.kind === 'upstream' && out.cluster === FALLBACK_CLUSTER && out.stats?.streamsFailed === 1) return 'refused';
    return problemWith(out) ?? 'ok';
  } finally {
    h.close();
  }
}

test("the harness sends the cluster's SNI, as Envoy does, not the address it connects to", async () => {
  const seen: string[] = [];
  const server = http2.createSecureServer({ cert: readFileSync(certs.serverCert), key: readFileSync(certs.serverKey) });
  server.on('secureConnection', (socket: TLSSocket) => seen.push(String(socket.servername)));
  server.on('stream', (stream) => stream.close());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const target = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    await attempt(target, clientCreds({ ca: certs.caCert }));
    assert.deepEqual([...new Set(seen)], ['kvgate']);
  } finally {
    server.close();
  }
});

describe('TLS', () => {
  let g: TestGate;
  before(async () => {
    g = await startTestGate({ workers: FLEET }, { tls: { certFile: certs.serverCert, keyFile: certs.serverKey } });
  });
  after(async () => {
    await g.close(100);
  });

  test('a client that trusts the CA is served', async () => {
    assert.equal(await attempt(g.target, clientCreds({ ca: certs.caCert })), 'ok');
  });
  test('a plaintext client is refused', async () => {
    assert.equal('refused', await attempt(g.target, grpc.credentials.createInsecure()), 'ok');
  });
  test('a client that trusts another CA is refused', async () => {
    assert.equal('refused', await attempt(g.target, clientCreds({ ca: certs.rogueCaCert })), 'ok');
  });
});

describe('mTLS', () => {
  let g: TestGate;
  before(async () => {
    g = await startTestGate({ workers: FLEET }, { tls: { certFile: certs.serverCert, keyFile: certs.serverKey, clientCaFile: certs.caCert } });
  });
  after(async () => {
    await g.close(100);
  });

  test('a client with a certificate the CA signed is served', async () => {
    assert.equal(await attempt(g.target, clientCreds({ ca: certs.caCert, cert: certs.clientCert, key: certs.clientKey })), 'ok');
  });
  test('a client without a certificate is refused', async () => {
    assert.equal('refused', await attempt(g.target, clientCreds({ ca: certs.caCert })), 'ok');
  });
  test('a client with a certificate from another CA is refused', async () => {
    assert.equal('refused', await attempt(g.target, clientCreds({ ca: certs.caCert, cert: certs.rogueClientCert, key: certs.rogueClientKey })), 'ok');
  });
  test('a plaintext client is refused', async () => {
    assert.equal('refused', await attempt(g.target, grpc.credentials.createInsecure()), 'ok');
  });
});

describe('the command line', () => {
  test('KVGATE_TLS_* serve mTLS, and the startup line says so', async () => {
    const gate = await startGateProcess(['--config', writeConfig({ workers: FLEET })], {
      KVGATE_TLS_CERT: certs.serverCert,
      KVGATE_TLS_KEY: certs.serverKey,
      KVGATE_TLS_CLIENT_CA: certs.caCert,
    });
    try {
      assert.equal(gate.lines.find((l) => l['msg'] === 'kvgate serving')?.['grpc_tls'], 'mtls');
      assert.equal(await attempt(gate.target, clientCreds({ ca: certs.caCert, cert: certs.clientCert, key: certs.clientKey })), 'ok');
      assert.equal('refused', await attempt(gate.target, clientCreds({ ca: certs.caCert })), 'ok');
    } finally {
      await gate.stop();
    }
  });

  test('incomplete or unreadable TLS settings are config errors that say why (exit status 2)', async () => {
    const cases: Array<[Parameters<typeof startTestGate>[1], RegExp]> = [
      [{ tls: { certFile: certs.serverCert } }, /needs both --tls-cert and --tls-key/],
      [{ tls: { clientCaFile: certs.caCert } }, /needs both --tls-cert and --tls-key/],
      [{ tls: { certFile: certs.serverCert, keyFile: '/nonexistent/key.pem' } }, /--tls-key: cannot read/],
      [{ tls: { certFile: certs.serverCert, keyFile: certs.clientKey } }, /not usable/],
      [{ storeTls: { caFile: certs.caCert } }, /need a rediss/],
      [{ store: 'redis://127.0.0.1:1', storeTls: { caFile: certs.caCert } }, /needs a rediss/],
      [{ store: 'rediss://127.0.0.1:1', storeTls: { certFile: certs.clientCert } }, /needs both --store-cert-file and --store-key-file/],
    ];
    for (const [opts, why] of cases) {
      await assert.rejects(startTestGate({ workers: FLEET }, opts), (err: Error & { code?: string }) => err.code === 'invalid_config' && why.test(err.message));
    }
    // And the command line turns them into exit status 2.
    const config = writeConfig({ workers: FLEET });
    const r = spawnSync(process.execPath, [...KVGATE, 'serve', '--config', config, '--grpc-port', '0', '--admin-port', '0', '--tls-cert', certs.serverCert], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /needs both --tls-cert and --tls-key/);
  });
});

test('the Envoy cluster fragment for mTLS to the gate is valid against Envoy’s schema', async () => {
  const file = path.resolve(import.meta.dirname, '../../envoy/kvgate-ext-proc-mtls-cluster.yaml');
  const result = await validateEnvoyText(readFileSync(file, 'utf8'), { type: 'envoy.config.cluster.v3.Cluster', label: 'kvgate-ext-proc-mtls-cluster.yaml' });
  assert.ok(result.ok, result.message);
});
