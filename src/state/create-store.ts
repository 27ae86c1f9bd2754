/**
 * Picks the store backend from `--store`: `memory` (default), or Redis: `redis://`, `rediss://`
 * (TLS), `redis+cluster://` and `rediss+cluster://` (Redis Cluster; see ./redis-connection.ts).
 */
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { DEFAULTS } from '../config/defaults.js';
import { KvgateError } from '../errors.js';
import { MemoryStore } from './memory-store.js';
import type { StoreTls } from './redis-connection.js';
import type { RedisStore } from './redis-store.js';
import { isRedisSpec, redact } from './store-spec.js';
import type { RoutingStore } from './store.js';

/**
 * PEM files for TLS to Redis (`--store-ca-file`, `--store-cert-file`, `--store-key-file`), and the
 * name its certificates are verified against (`--store-tls-servername`).
 */
export interface StoreTlsFiles {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  servername?: string;
}

/**
 * The Redis backend (and ioredis) is imported only when the store is Redis, so a gate on the
 * memory store starts without loading it.
 */
export async function createStore(spec: string, config: Config, logger: Logger, tlsFiles: StoreTlsFiles = {}): Promise<RoutingStore | RedisStore> {
  if (spec === 'memory') {
    if (tlsFiles.caFile || tlsFiles.certFile || tlsFiles.keyFile || tlsFiles.servername) {
      throw new KvgateError('invalid_config', 'store TLS files and server name need a rediss:// or rediss+cluster:// store');
    }
    return new MemoryStore();
  }
  if (isRedisSpec(spec)) {
    const { RedisStore } = await import('./redis-store.js');
    return new RedisStore({
      url: spec,
      keyPrefix: config.store.key_prefix,
      timeoutMs: config.store.timeout_ms,
      refreshMs: config.store.refresh_ms,
      leaseTtlMs: config.leases.ttl_s * 1000,
      localAffinityCacheSize: DEFAULTS.localAffinityCacheSize,
      prefixTtlMs: config.prefix.ttl_s * 1000,
      logger: logger.child({ component: 'redis-store' }),
      tls: readTlsFiles(tlsFiles),
    });
  }
  throw new KvgateError(
    'invalid_config',
    `--store must be "memory" or a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL, got "${redact(spec)}"`,
  );
}

function readTlsFiles(files: StoreTlsFiles): StoreTls {
  const out: StoreTls = {};
  if (files.caFile) out.ca = readPem(files.caFile, '--store-ca-file');
  if (files.certFile) out.cert = readPem(files.certFile, '--store-cert-file');
  if (files.keyFile) out.key = readPem(files.keyFile, '--store-key-file');
  if (files.servername) out.servername = files.servername;
  return out;
}

/** Reads a PEM file named by a flag; a missing or unreadable file is a config error. */
export function readPem(file: string, flag: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new KvgateError('invalid_config', `${flag}: cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
}

/** Redacts the password of a store URL for logs. */
export function describeStore(spec: string): string {
  return redact(spec);
}
