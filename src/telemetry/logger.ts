/**
 * The root pino logger. JSON lines on stdout; prompts and raw session ids are never passed to it
 * (keys carry only hashes), and the redact list is a second line of defence for headers that carry
 * credentials or session ids if a caller ever logs a header map.
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
