/**
 * Closing a TLS store whose handshakes fail must never crash the process. Closed mid-handshake, the
 * client ends the socket; the server's certificate then fails verification (the socket errors and
 * is destroyed), and the server's alert answering our early close comes in as a second error on
 * the same socket, after ioredis's one-shot error listener has been used up.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { RedisStore } from '../../src/state/redis-store.js';
import { makeCerts } from '../helpers/certs.js';
import { silentLogger } from '../helpers/logger.js';
import { startRedis } from '../helpers/redis-server.js';

for (const mode of ['one server', 'a cluster'] as const) {
  test(`closing a store mid-handshake while the server certificate fails verification throws nothing (${mode})`, async () => {
    const certs = makeCerts();
    const redis = await startRedis([], { tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.caCert } });
    const uncaught: Error[] = [];
    const onUncaught = (err: Error) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      // A client certificate but not the CA: the server accepts us, we reject the server.
      const tls = { cert: readFileSync(certs.clientCert), key: readFileSync(certs.clientKey) };
      // Closed at several points of the handshake: the race needs our end to leave before the
      // verification fails (without the fix, most of these closes crashed the process).
      for (let delayMs = 0; delayMs < 10; delayMs++) {
        // A cluster client seeded with the same server: its seed node's handshake fails the same way.
        const url = mode === 'one server' ? redis.url : redis.url.replace('rediss://', 'rediss+cluster://');
        const store = new RedisStore({ url, keyPrefix: 'tls-close', timeoutMs: 200, refreshMs: 100, leaseTtlMs: 30_000, localAffinityCacheSize: 10, logger: silentLogger(), tls });
        await new Promise((r) => setTimeout(r, delayMs));
        await store.close();
      }
      // The server's alert comes back within a round trip; give it ample time.
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(uncaught.map((e) => (e as NodeJS.ErrnoException).code ?? e.message), []);
    } finally {
      process.off('uncaughtException', onUncaught);
      await redis.stop();
      certs.remove();
    }
  });
}

test('a cluster client over TLS makes every connection (its slot-map refresher included) with a connector whose sockets keep an error listener', async () => {
  const { connectRedis, closeRedis } = await import('../../src/state/redis-connection.js');
  const certs = makeCerts();
  const redis = await startRedis([], { tls: { cert: certs.serverCert, key: certs.serverKey, ca: certs.caCert } });
  const client = connectRedis(redis.url.replace('rediss://', 'rediss+cluster://'), { lazyConnect: true }, { ca: readFileSync(certs.caCert), cert: readFileSync(certs.clientCert), key: readFileSync(certs.clientKey) });
  try {
    // The refresher is `duplicate()` of a node, so it gets the nodes' options, this connector included.
    const Connector = (client as unknown as { options: { redisOptions: { Connector?: new (o: object) => { connect(e: () => void): Promise<import('node:net').Socket> } } } }).options.redisOptions.Connector;
    assert.ok(Connector, 'the nodes get a connector of kvgate\'s');
    const stream = await new Connector({ host: '127.0.0.1', port: redis.port, tls: { ca: readFileSync(certs.caCert), servername: 'localhost' } }).connect(() => {});
    // ioredis adds its own one-shot listener; a second error on a socket it gave up must not throw.
    stream.once('error', () => {});
    stream.emit("error", new Error("first"));
    assert.doesNotThrow(() => stream.emit('error', new Error('the server\'s late alert')));
    stream.destroy();
  } finally {
    closeRedis(client);
    await redis.stop();
    certs.remove();
  }
});
