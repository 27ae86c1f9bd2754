/**
 * Throwaway PKI for TLS tests, made at test time with the `openssl` command (present wherever
 * redis-server is packaged; a missing binary fails loudly): a CA, a server certificate for
 * 127.0.0.1 / localhost / kvgate, a client certificate, and a second, untrusted CA with its own
 * client certificate. EC P-256 keys: generated in milliseconds.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface CertFiles {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** A CA nobody trusts, and a client certificate it signed. */
  rogueCaCert: string;
  rogueClientCert: string;
  rogueClientKey: string;
  read(file: string): Buffer;
  /** Deletes the directory. */
  remove(): void;
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { code?: string; stderr?: Buffer };
    if (e.code === 'ENOENT') throw new Error('openssl is not installed: the TLS tests generate their certificates with it (apt-get install -y openssl)');
    throw new Error(`openssl ${args.join(' ')} failed: ${e.stderr?.toString() ?? String(err)}`);
  }
}

function ca(dir: string, name: string): void {
  openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${name}.key`], dir);
  openssl(['req', '-x509', '-new', '-key', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
}

function leaf(dir: string, name: string, caName: string, ext: string): void {
  openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${name}.key`], dir);
  openssl(['req', '-new', '-key', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`], dir);
  writeFileSync(path.join(dir, `${name}.ext`), ext);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${caName}.crt`, '-CAkey', `${caName}.key`, '-CAcreateserial',
    '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`], dir);
}

/**
 * `serverNames`: the server certificate's subjectAltName (default: 127.0.0.1, localhost and kvgate);
 * e.g. `DNS:localhost` alone for a server reached by IP whose certificate names only hosts, as a
 * managed Redis Cluster's node certificates do.
 */
export function makeCerts(opts: { serverNames?: string } = {}): CertFiles {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-certs-'));
  ca(dir, 'ca');
  const names = opts.serverNames ?? 'IP:127.0.0.1,DNS:localhost,DNS:kvgate';
  leaf(dir, 'server', 'ca', `basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=${names}\n`);
  leaf(dir, 'client', 'ca', 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n');
  ca(dir, 'rogue-ca');
  leaf(dir, 'rogue-client', 'rogue-ca', 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n');
  const f = (n: string) => path.join(dir, n);
  return {
    dir,
    caCert: f('ca.crt'),
    serverCert: f('server.crt'),
    serverKey: f('server.key'),
    clientCert: f('client.crt'),
    clientKey: f('client.key'),
    rogueCaCert: f('rogue-ca.crt'),
    rogueClientCert: f('rogue-client.crt'),
    rogueClientKey: f('rogue-client.key'),
    read: (file) => readFileSync(file),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
