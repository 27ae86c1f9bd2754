/**
 * Transport security for the ext_proc gRPC server. Plaintext by default (Envoy usually reaches the
 * gate over a pod network or a sidecar's loopback); with a certificate and key it serves TLS, and
 * with a client CA as well it requires every peer (Envoy) to present a certificate that CA signed
 * (mTLS), so nothing but your Envoy can ask for routing decisions.
 */
import { createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { KvgateError } from '../errors.js';

/** PEM contents, already read. */
export interface GrpcTls {
  cert: Buffer;
  key: Buffer;
  /** Set = mTLS: clients must present a certificate signed by this CA. */
  clientCa?: Buffer;
}

export function serverCredentials(tls: GrpcTls | undefined): grpc.ServerCredentials {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  try {
    // grpc-js reads the PEMs only when it binds; check them now so a bad file is a config error.
    createSecureContext({ cert: tls.cert, key: tls.key, ...(tls.clientCa ? { ca: tls.clientCa } : {}) });
    return grpc.ServerCredentials.createSsl(tls.clientCa ?? null, [{ private_key: tls.key, cert_chain: tls.cert }], tls.clientCa !== undefined);
  } catch (err) {
    throw new KvgateError('invalid_config', `TLS certificate or key is not usable: ${(err as Error).message}`, { cause: err });
  }
}
