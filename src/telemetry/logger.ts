/**
 * The root pino logger. JSON lines on stdout; prompts and raw session ids are never passed to it
 * (keys carry only hashes), and the redact list is a second line of defence for headers that carry
 * credentials or session ids if a caller ever logs a header map.
 *
 * Every line written while a request's span is active (see src/telemetry/request-telemetry.ts)
 * carries `trace_id` and `span_id`, read from the active OpenTelemetry context, so a log line
 * leads to its trace in Jaeger and back.
 */
import { context, isSpanContextValid, trace } from '@opentelemetry/api';
import { pino, type Logger, type LevelWithSilent } from 'pino';

function traceIds(): Record<string, string> {
  const sc = trace.getSpanContext(context.active());
  return sc && isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : {};
}

export function createLogger(level: LevelWithSilent | string = 'info', destination?: pino.DestinationStream): Logger {
  return pino(
    {
      name: 'kvgate',
      level,
      mixin: traceIds,
      redact: {
        paths: ['headers.authorization', 'headers.cookie', 'headers["x-session-id"]', 'body', 'prompt', 'messages'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

export type { Logger };
