/**
 * `kvgate demo` without Docker still shows decisions as traces: with the standard OTEL_* variables
 * set, its in-process gate exports a `kvgate.route` span per request (here to the test suite's
 * OTLP receiver). A file of its own: tracing is process-wide.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Command } from 'commander';
import { registerDemoCommand } from '../../src/cli/demo-command.js';
import { OtlpReceiver } from '../telemetry/otlp-receiver.js';

let receiver: OtlpReceiver;
before(async () => {
  receiver = await new OtlpReceiver().start();
});
after(async () => {
  await receiver.close();
});

test('kvgate demo exports a kvgate.route span per request when OTEL_* is set', async () => {
  const env = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '20' };
  Object.assign(process.env, env);
  let out = '';
  try {
    const program = new Command('kvgate').exitOverride();
    registerDemoCommand(program, { write: (s) => (out += s) });
    await program.parseAsync(['node', 'kvgate', 'demo', '--workers', '2', '--sessions', '2', '--turns', '2', '--think-ms', '0', '--message-timeout-ms', '10000']);
  } finally {
    for (const k of Object.keys(env)) delete process.env[k];
  }
  assert.match(out, /^tracing: OTLP http\/json to http:\/\/127\.0\.0\.1:\d+ \(service "kvgate", span kvgate\.route\)$/m);
  // The demo flushes its spans before it returns.
  const routes = receiver.spans.filter((s) => s.name === 'kvgate.route');
  const outcomes = routes.map((s) => s.attributes['kvgate.outcome']);
  assert.ok(outcomes.filter((o) => o === 'new').length >= 2, `a span for each session's placement: ${outcomes.join(', ')}`);
  assert.ok(outcomes.filter((o) => o === 'affinity_hit').length >= 2, `and for each follow-up: ${outcomes.join(', ')}`);
  assert.ok(routes.every((s) => typeof s.attributes['kvgate.worker'] === 'string' || s.attributes['kvgate.outcome'] === 'unkeyed'), "routes.every((s) => typeof s.attributes['kvgate.worker'] === 'string' || s.attributes['kvgate.outcome'] === 'unkeyed')");
});
