/**
 * The admin API's answer to requests it cannot serve, as a platform team's scripts and probes send
 * them: a bad query parameter, a worker id that is not valid percent-encoding, a method a path
 * does not take, a body too large to read, an unknown path. Each is a 4xx with a JSON error (and
 * the error's code where kvgate has one), never a 500, never a silent guess, never an error line
 * in the log: these are the caller's mistakes, not the gate's.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import { recordingLogger } from '../helpers/logger.js';
import { startTestGate, type TestGate } from '../helpers/gate.js';

const FLEET = { workers: [{ id: 'w1', cluster: 'worker_1' }] };

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** One request with node:http (fetch refuses some of what a script can send, e.g. a bare HEAD body check). */
function request(base: string, method: string, path: string, body?: Buffer | string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${base}${path}`, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The JSON error of a 4xx answer: its content type and an `error` sentence. */
function jsonError(a: Answer, what: string): { error: string; code?: string } {
  assert.match(String(a.headers['content-type']), /^application\/json/, `${what}: a JSON answer`);
  const body = JSON.parse(a.text) as { error?: unknown; code?: string };
  assert.equal(typeof body.error, 'string', `${what}: says what is wrong`);
  return body as { error: string; code?: string };
}

describe('admin API: requests it cannot serve', () => {
  let g: TestGate;
  const { logger, lines } = recordingLogger('info');
  before(async () => {
    g = await startTestGate(FLEET, { logger });
  });
  after(async () => {
    await g.close(100);
  });
  const errorLines = () => lines.filter((l) => (l.level as number) >= 50);

  test('/debug/decisions?limit= that is not a whole number from 1 to 100 is a 400 saying so, not a silent default', async () => {
    for (const limit of ['abc', '-5', '0', '1.5', '1e9', '101', '', '20abc', '0x10']) {
      const a = await request(g.admin, 'GET', `/debug/decisions?limit=${limit}`);
      assert.equal(a.status, 400, `limit=${limit}`);
      const e = jsonError(a, `limit=${limit}`);
      assert.equal(e.code, 'bad_request');
      assert.match(e.error, /limit/, `limit=${limit}: names the parameter`);
    }
    for (const limit of ['1', '20', '100', '007']) assert.equal((await request(g.admin, 'GET', `/debug/decisions?limit=${limit}`)).status, 200, `limit=${limit}`);
    assert.equal((await request(g.admin, 'GET', '/debug/decisions')).status, 200, 'no limit: the default');
  });

  test('a worker id that is not valid percent-encoding is a 400, not an internal error', async () => {
    for (const method of ['PUT', 'POST']) {
      const a = await request(g.admin, method, '/workers/%E0%A4%A/state', JSON.stringify({ state: 'draining' }));
      assert.equal(a.status, 400, method);
      assert.equal(jsonError(a, method).code, 'bad_request');
    }
    assert.deepEqual(errorLines(), [], 'a caller\'s mistake is not logged as the gate\'s failure');
  });

  test('a body over the admin limit is a 413; one that is not the documented JSON is a 400', async () => {
    const big = await request(g.admin, 'PUT', '/workers/w1/state', Buffer.alloc(200 * 1024, 'a'));
    assert.equal(big.status, 413);
    assert.equal(jsonError(big, 'too large').code, 'body_too_large');
    // Without a declared length (chunked), found while reading: the answer still arrives.
    const chunked = await new Promise<Answer>((resolve, reject) => {
      const req = http.request(`${g.admin}/workers/w1/state`, { method: 'PUT' }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      });
      req.on('error', reject);
      for (let i = 0; i < 25; i++) req.write(Buffer.alloc(8192, 'a'));
      req.end();
    });
    assert.equal(chunked.status, 413, 'chunked');
    assert.equal(jsonError(chunked, 'chunked').code, 'body_too_large');
    for (const body of ['not json', '{"state": "sleeping"}', '[]']) {
      const a = await request(g.admin, 'PUT', '/workers/w1/state', body);
      assert.equal(a.status, 400, body);
      assert.equal(jsonError(a, body).code, 'bad_request');
    }
    const workers = JSON.parse((await request(g.admin, 'GET', '/workers')).text) as { workers: Array<{ state: string }> };
    assert.equal(workers.workers[0]!.state, 'healthy', 'nothing was changed');
  });

  test('a method a path does not take is a 405 naming the ones it does; HEAD answers as GET without a body', async () => {
    const cases: Array<[string, string, string]> = [
      ['POST', '/healthz', 'GET, HEAD'],
      ['DELETE', '/readyz', 'GET, HEAD'],
      ['PUT', '/metrics', 'GET, HEAD'],
      ['POST', '/workers', 'GET, HEAD'],
      ['PATCH', '/debug/decisions', 'GET, HEAD'],
      ['GET', '/workers/w1/state', 'PUT, POST'],
      ['DELETE', '/workers/w1/state', 'PUT, POST'],
    ];
    for (const [method, path, allow] of cases) {
      const a = await request(g.admin, method, path);
      assert.equal(a.status, 405, `${method} ${path}`);
      assert.equal(a.headers.allow, allow, `${method} ${path}: Allow`);
      jsonError(a, `${method} ${path}`);
    }
    for (const path of ['/healthz', '/readyz', '/metrics', '/workers', '/debug/decisions']) {
      const a = await request(g.admin, 'HEAD', path);
      assert.equal(a.status, 200, `HEAD ${path}`);
      assert.equal(a.text, '', `HEAD ${path}: no body`);
    }
  });

  test('an unknown path is a JSON 404', async () => {
    for (const path of ['/nope', '/workers/w1', '/workers/w1/state/x', '//', '/healthz/']) {
      const a = await request(g.admin, 'GET', path);
      assert.equal(a.status, 404, path);
      jsonError(a, path);
    }
    assert.deepEqual(errorLines(), []);
  });

  test('a request target in absolute form (as a proxy sends it) reaches its path', async () => {
    const port = new URL(g.admin).port;
    const answer = await new Promise<number>((resolve, reject) => {
      // http.request writes `path` as the request target as given.
      const req = http.request({ host: '127.0.0.1', port, method: 'GET', path: `http://127.0.0.1:${port}/healthz` }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(answer, 200);
  });
});
