/**
 * What an operator reads when something is wrong: each message says what happened and what to do,
 * and the exit status follows one scheme (0 done, 1 runtime failure, 2 usage or config error).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, test } from 'node:test';
import { context, trace, TraceFlags } from '@opentelemetry/api';
import { loadConfigFile, parseConfig } from '../../src/config/load.js';
import { fetchFailure } from '../../src/signals/collector.js';
import { RedisStore } from '../../src/state/redis-store.js';
import { diagToPino, installTraceContext } from '../../src/telemetry/tracing.js';
import { startTestGate } from '../helpers/gate.js';
import { KVGATE, ROOT } from '../helpers/kvgate-cli.js';
import { recordingLogger } from '../helpers/logger.js';
import { freePort } from '../../src/util/free-port.js';
import { refusedPort } from '../helpers/refused-port.js';

const EXAMPLE = path.join(ROOT, 'envoy/kvgate.yaml');
const kvgate = (...args: string[]) => spawnSync(process.execPath, [...KVGATE, ...args], { encoding: 'utf8', timeout: 30_000 });

describe('exit status and usage', () => {
  test('--version prints the package version, status 0', () => {
    const r = kvgate('--version');
    assert.equal(r.status, 0);
    assert.equal(r.stdout.trim(), (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version);
  });

  test('an unknown log level is a usage error (2) listing the levels, not the logger library’s text', () => {
    const r = kvgate('serve', '--config', EXAMPLE, '--log-level', 'verbose');
    assert.equal(r.status, 2);
    assert.match(r.stderr, /argument 'verbose' is invalid\. Allowed choices are fatal, error, warn, info, debug, trace, silent/);
  });

  test('flag errors and config errors share status 2; a runtime failure is 1', async () => {
    assert.equal(kvgate('serve', '--config', EXAMPLE, '--grpc-port', 'x').status, 2, 'bad flag value');
    assert.equal(kvgate('serve').status, 2, 'missing --config');
    assert.equal(kvgate('no-such-command').status, 2, 'unknown command');
    assert.equal(kvgate('serve', '--config', '/nonexistent/kvgate.yaml').status, 2, 'unreadable config');
    const port = await freePort();
    const r = kvgate('status', '--admin', `http://127.0.0.1:${port}`);
    assert.equal(r.status, 1, 'admin API unreachable');
    assert.match(r.stderr, /^kvgate: nothing is listening at/m);
  });

  test('a session hash key too short to be secret is a config error (2) saying what it needs', () => {
    const r = spawnSync(process.execPath, [...KVGATE, 'serve', '--config', EXAMPLE, '--grpc-port', '0', '--admin-port', '0'], {
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, KVGATE_SESSION_HASH_KEY: 'hunter2' },
    });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /session hash key \(--session-hash-key, KVGATE_SESSION_HASH_KEY\) has 7 bytes; it needs at least 16/);
  });

  test('so is a previous session hash key (a rotation) too short, read from its variable', () => {
    const r = spawnSync(process.execPath, [...KVGATE, 'serve', '--config', EXAMPLE, '--grpc-port', '0', '--admin-port', '0'], {
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, KVGATE_SESSION_HASH_KEY: 'a-key-long-enough-to-be-secret', KVGATE_SESSION_HASH_KEY_PREVIOUS: 'old' },
    });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /previous session hash key \(--session-hash-key-previous, KVGATE_SESSION_HASH_KEY_PREVIOUS\) has 3 bytes; it needs at least 16/);
  });

  test('serve without a config names both ways to give it and the example config, status 2', () => {
    const { KVGATE_CONFIG: _unset, ...env } = process.env;
    void _unset;
    for (const value of [undefined, '']) {
      const r = spawnSync(process.execPath, [...KVGATE, 'serve'], {
        encoding: 'utf8',
        timeout: 30_000,
        env: value === undefined ? env : { ...env, KVGATE_CONFIG: value },
      });
      const how = value === undefined ? 'KVGATE_CONFIG unset' : 'KVGATE_CONFIG empty';
      assert.equal(r.status, 2, how);
      assert.doesNotMatch(r.stderr, /required option/, how);
      assert.match(r.stderr, /--config <file>/, how);
      assert.match(r.stderr, /KVGATE_CONFIG environment variable/, how);
      assert.match(r.stderr, /envoy\/kvgate\.yaml/, how);
      assert.match(r.stderr, /\/etc\/kvgate\/kvgate\.yaml/, how);
      assert.match(r.stderr, /add --help for usage/, how);
    }
    // The example it points at is the one `npm start` serves, is valid, and the image ships it where it says.
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    assert.match(pkg.scripts['start'] ?? '', /--config envoy\/kvgate\.yaml\b/);
    assert.doesNotThrow(() => loadConfigFile(EXAMPLE));
    assert.match(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'), /^COPY envoy\/kvgate\.yaml \/etc\/kvgate\/kvgate\.yaml$/m);
  });

  test('a subcommand whose development dependency is missing says so and what to do', async () => {
    const { loadSubcommand } = await import('../../src/cli/cli.js');
    const missing = Object.assign(new Error("Cannot find package 'vega-lite' imported from /app/dist/sim/report.js"), { code: 'ERR_MODULE_NOT_FOUND' });
    await assert.rejects(
      loadSubcommand('sim', { description: '', register: () => Promise.reject(missing) }),
      /^KvgateError: kvgate sim needs vega-lite, which a production install leaves out: run it from a checkout after `npm ci`/,
    );
  });

  test('kvgate --help lists every subcommand (their modules load only when one is run)', () => {
    const r = kvgate('--help');
    assert.equal(r.status, 0);
    for (const sub of ['serve', 'try', 'status', 'demo', 'fake-worker', 'sim', 'bench']) assert.match(r.stdout, new RegExp(`^  ${sub}\\b`, 'm'));
  });

  test('a config value outside a closed set names the allowed values and the value found', () => {
    assert.throws(
      () => parseConfig({ routing: { shed_status: 430, policy: 'sesion' }, workers: [{ id: 'a', cluster: 'a' }] }),
      (err: Error) => {
        assert.match(err.message, /routing\.shed_status: must be one of 429, 503 \(got 430\)/);
        assert.match(err.message, /routing\.policy: must be one of "session", "prefix", "both", "least_loaded" \(got "sesion"\)/);
        assert.doesNotMatch(err.message, /Invalid input/);
        return true;
      },
    );
  });
});

describe('port in use', () => {
  for (const which of ['grpc', 'admin'] as const) {
    test(`the ${which} port: names the port and the flag that changes it`, async () => {
      const busy = net.createServer();
      await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
      const port = (busy.address() as net.AddressInfo).port;
      try {
        const other = which === 'grpc' ? ['--admin-port', '0'] : ['--grpc-port', '0'];
        const r = kvgate('serve', '--config', EXAMPLE, `--${which}-port`, String(port), `--${which}-host`, '127.0.0.1', ...other, '--log-level', 'error');
        assert.equal(r.status, 1);
        const flag = which === 'grpc' ? '--grpc-port' : '--admin-port';
        assert.match(r.stderr, new RegExp(`port 127\\.0\\.0\\.1:${port} is already in use .*pick a free port with ${flag} \\(or KVGATE_${which.toUpperCase()}_PORT\\)`));
        assert.doesNotMatch(r.stderr + r.stdout, /No address added/, "gRPC's own text is not shown");
      } finally {
        busy.close();
      }
    });
  }
});

describe('failures of things kvgate talks to', () => {
  test('a metrics scrape that cannot connect says why (not "fetch failed")', async () => {
    const refused = await refusedPort();
    const url = `http://127.0.0.1:${refused.port}/metrics`;
    const err = await fetch(url)
      .then(
        () => undefined,
        (e: unknown) => e,
      )
      .finally(() => refused.release());
    const msg = fetchFailure(url, 500, err);
    assert.match(msg, /nothing listening at http:\/\/127\.0\.0\.1:\d+\/metrics \(ECONNREFUSED\): is the worker up, and is its metrics_url right\?/);
    assert.match(fetchFailure(url, 500, new DOMException('x', 'TimeoutError')), /no answer from .* in 500 ms \(signals\.timeout_ms\)/);
  });

  test('the cause reaches /workers, where kvgate status shows it', async () => {
    const refused = await refusedPort();
    const g = await startTestGate({ workers: [{ id: 'w1', cluster: 'w1', metrics_url: `http://127.0.0.1:${refused.port}/metrics` }] });
    try {
      const body = (await (await fetch(`${g.admin}/workers`)).json()) as { workers: Array<{ signals?: { last_error?: string } }> };
      assert.match(String(body.workers[0]!.signals?.last_error), /nothing listening at .* \(ECONNREFUSED\)/, JSON.stringify(body.workers[0]));
    } finally {
      await g.close(100);
      await refused.release();
    }
  });

  test('OTLP export failures: the message without its stack, one component key, no request trace id, once per cause', () => {
    installTraceContext();
    const { logger, lines } = recordingLogger('warn');
    let now = 0;
    const diag = diagToPino(logger.child({ component: 'tracing' }), () => now);
    const failure = new Error('connect ECONNREFUSED 127.0.0.1:4318');
    // The SDK's global error handler passes a serialised exception, stack included.
    const serialised = JSON.stringify({ message: failure.message, stack: failure.stack, name: 'Error' });
    // kvgate installs no context manager, so this context.with is inert; were one (and a log
    // mixin reading it) ever brought back, an export would run in whatever context its timer was
    // armed in: here, a request's span, whose ids must not land on the SDK's line.
    const span = trace.wrapSpanContext({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16), traceFlags: TraceFlags.SAMPLED });
    context.with(trace.setSpan(context.active(), span), () => {
      diag.error(serialised);
      diag.error(serialised);
    });
    assert.equal(lines.length, 1, 'the repeat is not logged');
    const line = lines[0]!;
    assert.equal(line['msg'], 'opentelemetry: connect ECONNREFUSED 127.0.0.1:4318');
    assert.doesNotMatch(JSON.stringify(line), /\bat [^ ]+ \(|\\n/, 'no stack');
    assert.equal(line['component'], 'tracing');
    assert.equal(line['trace_id'], undefined, 'not the request’s trace');
    assert.match(String(line['hint']), /routing is not affected/);
    now += 31_000;
    diag.error(serialised);
    assert.equal(lines.length, 2);
    assert.equal(lines[1]!['repeats_not_logged'], 1);
    // Written as JSON, a second `component` key would appear twice in the raw line.
    assert.equal(JSON.stringify(lines[1]).match(/"component"/g)?.length, 1);
  });

  test('Redis down: the connection error is logged once, not every reconnect', async () => {
    const refused = await refusedPort();
    const { logger, lines } = recordingLogger('warn');
    const store = new RedisStore({ url: `redis://127.0.0.1:${refused.port}`, keyPrefix: 'outage', timeoutMs: 200, refreshMs: 100, leaseTtlMs: 30_000, localAffinityCacheSize: 100, logger });
    try {
      // Reconnects back off from 50 ms: over 1.5 s that is several failed attempts, which
      // a once-a-second limit would have logged twice.
      await new Promise((r) => setTimeout(r, 1500));
      const redisLines = lines.filter((l) => /^redis /.test(String(l['msg'])));
      assert.equal(redisLines.length, 1, JSON.stringify(redisLines));
    } finally {
      await store.close();
      await refused.release();
    }
  });
});
