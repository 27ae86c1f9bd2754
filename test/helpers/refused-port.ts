/**
 * A local port that refuses connections, and stays so until released: what a test of "nothing
 * listening" needs. `freePort()` (bind to 0, read, release) hands out a port nothing holds, so a
 * server another test starts in the meantime can be given it, and the scrape or fetch that was to
 * be refused reaches that server instead (seen in CI: a gRPC server answering a metrics scrape).
 * Here the port is the local end of a connected client socket: a connection to it gets a reset
 * (ECONNREFUSED), and while the socket lives the OS neither assigns it nor lets a server bind it.
 */
import net from 'node:net';

export interface RefusedPort {
  port: number;
  release(): Promise<void>;
}

export async function refusedPort(): Promise<RefusedPort> {
  const accepted: net.Socket[] = [];
  const server = net.createServer((s) => accepted.push(s));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    client.once('error', reject);
    client.once('connect', resolve);
  });
  return {
    port: client.localPort!,
    release: async () => {
      client.destroy();
      for (const s of accepted) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
