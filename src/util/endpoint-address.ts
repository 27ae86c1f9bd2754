/**
 * One spelling for an ip:port. The same address can be written many ways (`[2001:DB8::1]:8000`,
 * `[2001:db8:0:0:0:0:0:1]:8000`, a port with leading zeros), and a proxy reports the endpoint it
 * used in its own (Envoy: `Address::asString`, lower-case and compressed). Config addresses are
 * stored in this form, and a reported address that does not match as written is compared in it,
 * so the spelling an operator chose never makes a worker unknown.
 */

/**
 * The WHATWG URL host parser's form (IPv6 lower-case and compressed, the port without leading
 * zeros; a non-special scheme, so no port is dropped as a default), or the input when it does not
 * parse. The same function on both sides is what makes two spellings meet, not agreement with
 * any proxy's own printing (an IPv4-mapped address comes out in hex here).
 */
export function canonicalEndpoint(address: string): string {
  try {
    return new URL(`kvgate://${address}`).host || address;
  } catch {
    return address;
  }
}
