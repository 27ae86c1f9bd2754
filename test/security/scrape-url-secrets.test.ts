/**
 * Secrets in a worker's metrics_url or dcgm_url stay out of what kvgate shows: `GET /workers`
 * (open to anyone who can read the admin port, token or not), `kvgate status`, and the log. A
 * user name and password in the URL are refused when the config is read (fetch refuses to send
 * them anyway, so they could never work); a query string (`?token=…`, as some auth proxies
 * take) does work, and is left out of every message about a failed scrape.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseConfig } from '../../src/config/load.js';
import { KvgateError } from '../../src/errors.js';
import { refusedPort } from '../helpers/refused-port.js';
import { waitFor } from '../helpers/envoy.js';
import { startTestGate } from '../helpers/gate.js';
import { recordingLogger } from '../helpers/logger.js';

describe('secrets in scrape URLs', () => {
  test('a metrics_url or dcgm_url with a user name or password is an invalid config that does not repeat the password', () => {
    for (const field of ['metrics_url', 'dcgm_url'] as const) {
      const worker = { id: 'w1', cluster: 'worker_1', metrics_url: 'http://127.0.0.1:8000/metrics', [field]: 'http://admin:s3cretpw@127.0.0.1:8000/metrics' };
      assert.throws(
        () => parseConfig({ workers: [worker] }),
        (err: unknown) => {
          assert.ok(err instanceof KvgateError && err.code === 'invalid_config', `${field}: invalid_config`);
          assert.match(err.message, new RegExp(`workers\\.0\\.${field}: .*credentials`), `${field}: names the field and why`);
          assert.doesNotMatch(err.message, /s3cretpw/, `${field}: the password is not repeated`);
          return true;
        },
      );
    }
    // A user name alone is credentials too.
    assert.throws(() => parseConfig({ workers: [{ id: 'w1', cluster: 'c', metrics_url: 'http://scraper@127.0.0.1:8000/metrics' }] }), /credentials/);
  });

  test("a failed scrape's message, in /workers and the log, leaves out the URL's query string", async () => {
    const refused = await refusedPort();
    const port = refused.port;
    const { logger, lines } = recordingLogger('info');
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'worker_1', metrics_url: `http://127.0.0.1:${port}/metrics?token=qtok3n` }] }, { logger });
    try {
      let body = '';
      await waitFor(
        async () => {
          body = await (await fetch(`${g.admin}/workers`)).text();
          return body.includes('last_error');
        },
        5000,
        'a failed scrape in /workers',
      );
      assert.match(body, new RegExp(`nothing listening at http://127\\.0\\.0\\.1:${port}/metrics\\?… \\(ECONNREFUSED\\)`), 'still says where');
      assert.doesNotMatch(body, /qtok3n/, '/workers');
      assert.ok(lines.some((l) => l.msg === 'worker scrape failed'), 'the failure is logged');
      assert.doesNotMatch(JSON.stringify(lines), /qtok3n/, 'the log');
    } finally {
      await g.close(100);
      await refused.release();
    }
  });
});
