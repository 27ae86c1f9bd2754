/**
 * refusedPort(): refused while held, and no server can take the port in the meantime (the race
 * freePort() leaves open, which once let a gRPC server answer a test's "nothing listening" scrape).
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { refusedPort } from './refused-port.js';

test('a refused port: connections are refused and no server can bind it until it is released', async () => {
  const refused = await refusedPort();
  try {
    const err = await fetch(`http://127.0.0.1:${refused.port}/`).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.equal((err as { cause?: { code?: string } }).cause?.code, 'ECONNREFUSED');
    const server = net.createServer();
    const bound = await new Promise<string>((resolve) => {
      server.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
      server.listen(refused.port, '127.0.0.1', () => resolve('listening'));
    });
    if (bound === 'listening') server.close();
    assert.equal(bound, 'EADDRINUSE');
  } finally {
    await refused.release();
  }
});
