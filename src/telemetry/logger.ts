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
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export function createLogger(level: LevelWithSilent | string = 'info', destination?: pino.DestinationStream): Logger {
  return pino(
    {
      name: 'kvgate',
      level,
      redact: {
        paths: ['headers.authorization', 'headers.cookie', 'headers["x-session-id"]', 'body', 'prompt', 'messages'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

export type { Logger };
