/**
 * The metrics page size limit holds while the page arrives, not after: an endless chunked page is
 * cut off near the limit, and a small gzip body that expands past it is refused.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { fetchPage } from '../../src/signals/collector.js';

const MiB = 1024 * 1024;

async function serve(handler: http.RequestListener): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

test('a chunked page past the limit is cut off while it arrives: the server sees the connection close long before 64 MiB', async () => {
  let written = 0;
  let closed!: () => void;
  const gone = new Promise<void>((r) => (closed = r));
  const line = Buffer.from(`${'vllm:num_requests_running{model_name="m"} 1\n'.repeat(1489)}`); // ~64 KiB
  const s = await serve((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' }); // no content-length: chunked
    res.on('close', () => closed());
    const pump = () => {
      while (written < 64 * MiB && !res.destroyed) {
        written += line.length;
        if (!res.write(line)) return void res.once('drain', pump);
      }
      if (!res.destroyed) res.end();
    };
    pump();
  });
  try {
    await assert.rejects(fetchPage(s.url, 20_000), /too large|larger than/);
    await gone;
    assert.ok(written < 16 * MiB, `the server wrote ${(written / MiB).toFixed(1)} MiB before the connection closed`);
  } finally {
    await s.close();
  }
});

test('a gzip body that expands past the limit is refused: the limit counts decoded bytes', async () => {
  const bomb = gzipSync(Buffer.alloc(64 * MiB, 'a'));
  assert.ok(bomb.length < 1 * MiB, 'small on the wire');
  const s = await serve((_req, res) => res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip', 'content-length': bomb.length }).end(bomb));
  try {
    await assert.rejects(fetchPage(s.url, 20_000), /too large|larger than/);
  } finally {
    await s.close();
  }
});

test('a page under the limit reads whole, gzipped or not, and a UTF-8 byte-order mark is dropped', async () => {
  const page = `\uFEFF${'vllm:num_requests_running{model_name="m"} 1\n'.repeat(1000)}`;
  const plain = await serve((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(page));
  const zipped = await serve((_req, res) => res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' }).end(gzipSync(page)));
  try {
    assert.equal((await fetchPage(plain.url, 5000)).text, page.slice(1));
    assert.equal((await fetchPage(zipped.url, 5000)).text, page.slice(1));
  } finally {
    await plain.close();
    await zipped.close();
  }
});
