/**
 * The HTTP/2 servers under a grpc-js server. grpc-js does not expose them (nor any setting of the
 * sessions they accept beyond max_concurrent_streams); it keeps them in a private map, read here
 * and nowhere else. Undefined when that is not there (another grpc-js): callers then do without.
 */
import type * as http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

export function http2ServersOf(server: grpc.Server): Map<http2.Http2Server, unknown> | undefined {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  return servers instanceof Map ? (servers as Map<http2.Http2Server, unknown>) : undefined;
}
