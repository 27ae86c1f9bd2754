/**
 * A free TCP port from the OS (bind to 0, read, release) for a server about to start on it (the
 * bench's redis-server, the tests' servers): never a shared fixed port.
 */
import net from 'node:net';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
