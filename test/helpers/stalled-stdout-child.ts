/**
 * Run as a child process whose stdout the parent never reads (test/telemetry/logger-buffer.test.ts):
 * logs `LINES` lines of about 1 KB through kvgate's logger on its default destination (stdout, the
 * bound given in argv[2] bytes), then reports on stderr, as one JSON line, how many it dropped and
 * how much text it still holds. Its heap growth is reported too, as a second witness of the bound.
 */
import { pino } from 'pino';
import { createLogger, droppedLogLines } from '../../src/telemetry/logger.js';

const LINES = 20_000;
const bound = Number(process.argv[2]);
const logger = createLogger('info', undefined, { maxBufferBytes: bound });
const padding = 'x'.repeat(1000);
const heapBefore = process.memoryUsage().heapUsed;
for (let i = 0; i < LINES; i++) logger.info({ i, padding }, 'line');
const stream = (logger as unknown as Record<symbol, { _len?: number }>)[pino.symbols.streamSym];
process.stderr.write(
  JSON.stringify({ lines: LINES, dropped: droppedLogLines(logger), held: stream?._len ?? -1, heapGrowth: process.memoryUsage().heapUsed - heapBefore }) + '\n',
);
// The parent kills this process: an exit would try to flush the held text into a pipe nobody reads.
setInterval(() => {}, 60_000);
