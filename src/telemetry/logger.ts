/**
 * The root pino logger. JSON lines on stdout; prompts and raw session ids are never passed to it
 * (keys carry only hashes), and the redact list is a second line of defence for headers that carry
 * credentials or session ids if a caller ever logs a header map.
 *
 * Every line about a request carries `trace_id` and `span_id`, so a log line leads to its trace in
 * Jaeger and back: the code that writes it uses a child logger with the request's ids, built when
 * the line is written (src/util/request-scope.ts `requestLogger`; the ext_proc stream's own
 * logger). They are not read from an async context: keeping one costs every request (see
 * `installTraceContext` in src/telemetry/tracing.ts).
 *
 * Lines go to stdout asynchronously (a write never holds the thread that answers Envoy), through a
 * buffer bounded at `DEFAULTS.logBufferMaxBytes`: past it, lines are dropped and counted rather
 * than held. Unbounded, a stdout nobody reads grew the process by every line until it ran out of
 * memory (test/telemetry/logger-buffer.test.ts).
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';
import { DEFAULTS } from '../config/defaults.js';

/** Lines dropped by each bounded destination this module made, keyed by that destination. */
const dropped = new WeakMap<object, { lines: number }>();

export interface LoggerOptions {
  /** The most unwritten log text held for stdout, in bytes (default `DEFAULTS.logBufferMaxBytes`). */
  maxBufferBytes?: number;
}

/**
 * A logger on `destination`, or when none is given, on stdout through a bounded buffer whose
 * drops `droppedLogLines` reports.
 */
export function createLogger(level: LevelWithSilent | string = 'info', destination?: pino.DestinationStream, opts: LoggerOptions = {}): Logger {
  return pino(
    {
      name: 'kvgate',
      level,
      redact: {
        paths: ['headers.authorization', 'headers.cookie', 'headers["x-session-id"]', 'body', 'prompt', 'messages'],
        censor: '[redacted]',
      },
    },
    destination ?? boundedStdout(opts.maxBufferBytes ?? DEFAULTS.logBufferMaxBytes),
  );
}

/**
 * Stdout as pino's own default destination is (asynchronous, flushed at exit), plus a bound on
 * what it may hold: sonic-boom drops a line that would take its buffer past `maxLength` and emits
 * `drop` for it.
 */
function boundedStdout(maxBytes: number): pino.DestinationStream {
  const stream = pino.destination({ dest: process.stdout.fd || 1, sync: false, maxLength: maxBytes });
  const count = { lines: 0 };
  dropped.set(stream, count);
  stream.on('drop', () => count.lines++);
  return stream;
}

/**
 * Log lines `logger` (or the root it is a child of) dropped because stdout did not keep up; 0
 * for a logger on a destination of the caller's. For `kvgate_log_lines_dropped_total`.
 */
export function droppedLogLines(logger: Logger): number {
  const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym];
  return typeof stream === 'object' && stream !== null ? dropped.get(stream)?.lines ?? 0 : 0;
}

export type { Logger };
