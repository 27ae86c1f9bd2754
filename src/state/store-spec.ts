/**
 * Store URLs without the Redis client: `kvgate serve` on the memory store tells a Redis URL from
 * `memory` and redacts passwords without loading ioredis (about a tenth of a second of start-up).
 */

export const STORE_SCHEME = /^(rediss?)(\+cluster)?:\/\//;

export function isRedisSpec(spec: string): boolean {
  return STORE_SCHEME.test(spec);
}

/** The store URL with any password replaced, for logs and error messages. */
export function redact(spec: string): string {
  return spec.replace(/^([a-z+]+:\/\/)([^@/]*)@/i, (_all, scheme: string, auth: string) => {
    const colon = auth.indexOf(':');
    return `${scheme}${colon >= 0 ? `${auth.slice(0, colon)}:***` : '***'}@`;
  });
}
