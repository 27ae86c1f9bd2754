/** A silent logger for tests, and one that records lines for tests that assert on logging. */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/telemetry/logger.js';

export function silentLogger(): Logger {
  return createLogger('silent');
}

export function recordingLogger(level = 'debug'): { logger: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString('utf8').split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  return { logger: createLogger(level, sink), lines };
}
