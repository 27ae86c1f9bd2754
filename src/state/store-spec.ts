/**
 * Store URLs without the Redis client: `kvgate serve` on the memory store tells a Redis URL from
 * `memory` and redacts passwords without loading ioredis (about a tenth of a second of start-up).
 */

export const STORE_SCHEME = /^(rediss?)(\+cluster)?:\/\//;

export function isRedisSpec(spec: string): boolean {
  return STORE_SCHEME.test(spec);
}

/**
 * A URL's credentials and what follows them, as the store URL parser reads them: the credentials
 * run from the scheme (`redis://`, any scheme, or none) to the URL's last '@', so a password may
 * hold '@', '/', '?', '#' or ':' unencoded (nothing after the hosts holds an '@'). `auth` is
 * undefined without an '@'.
 */
export function splitCredentials(spec: string): { scheme: string; auth: string | undefined; rest: string } {
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(spec)?.[0] ?? '';
  const body = spec.slice(scheme.length);
  const at = body.lastIndexOf('@');
  return at < 0 ? { scheme, auth: undefined, rest: body } : { scheme, auth: body.slice(0, at), rest: body.slice(at + 1) };
}

/**
 * The store URL with any password replaced, for logs and error messages: split as the parser
 * splits it (`splitCredentials`), so no part of a password shows, whatever characters it holds.
 */
export function redact(spec: string): string {
  const { scheme, auth, rest } = splitCredentials(spec);
  if (auth === undefined) return spec;
  const colon = auth.indexOf(':');
  return `${scheme}${colon >= 0 ? `${auth.slice(0, colon)}:***` : '***'}@${rest}`;
}
