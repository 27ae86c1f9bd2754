/**
 * Picks the store backend from `--store`: `memory` (default) or a `redis://` / `rediss://` URL.
 */
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { DEFAULTS } from '../config/defaults.js';
import { KvgateError } from '../errors.js';
import { MemoryStore } from './memory-store.js';
import { RedisStore } from './redis-store.js';
import type { RoutingStore } from './store.js';

export function createStore(spec: string, config: Config, logger: Logger): RoutingStore {
  if (spec === 'memory') return new MemoryStore();
  if (/^rediss?:\/\//.test(spec)) {
    return new RedisStore({
      url: spec,
      keyPrefix: config.store.key_prefix,
      timeoutMs: config.store.timeout_ms,
      refreshMs: config.store.refresh_ms,
      leaseTtlMs: config.leases.ttl_s * 1000,
      localAffinityCacheSize: DEFAULTS.localAffinityCacheSize,
      prefixTtlMs: config.prefix.ttl_s * 1000,
      logger: logger.child({ component: 'redis-store' }),
    });
  }
  throw new KvgateError('invalid_config', `--store must be "memory" or a redis:// or rediss:// URL, got "${spec}"`);
}

/** Redacts the password of a store URL for logs. */
export function describeStore(spec: string): string {
  try {
    const u = new URL(spec);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return spec;
  }
}
