/**
 * The HTTP/2 servers under a grpc-js server, and the sessions they accept. grpc-js does not expose
 * them (nor any setting of the sessions they accept beyond max_concurrent_streams); it keeps them
 * in a private map, read here and nowhere else. Undefined when that is not there (another
 * grpc-js): callers then do without.
 */
import type * as http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

export function http2ServersOf(server: grpc.Server): Map<http2.Http2Server, unknown> | undefined {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  return servers instanceof Map ? (servers as Map<http2.Http2Server, unknown>) : undefined;
}

/**
 * Calls `onSession` for every session the HTTP/2 servers under `server` accept from now on. Call
 * after each bind: a server already in `hooked` (one set per caller) is not hooked twice.
 * Returns the servers hooked by this call and a function that unhooks them; undefined when this
 * grpc-js hides its HTTP/2 servers.
 */
export function onNewSessions(
  server: grpc.Server,
  hooked: WeakSet<http2.Http2Server>,
  onSession: (session: http2.ServerHttp2Session) => void,
): { servers: http2.Http2Server[]; stop(): void } | undefined {
  const all = http2ServersOf(server);
  if (!all) return undefined;
  const servers = [...all.keys()].filter((s) => !hooked.has(s));
  for (const s of servers) {
    hooked.add(s);
    s.on('session', onSession);
  }
  return {
    servers,
    stop: () => {
      for (const s of servers) {
        s.off('session', onSession);
        hooked.delete(s);
      }
    },
  };
}
