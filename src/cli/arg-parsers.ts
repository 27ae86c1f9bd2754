/**
 * Flag value parsers shared by every subcommand. Each throws commander's InvalidArgumentError,
 * which commander reports with the flag's name and exit status 1, so a typo fails the command at
 * once instead of running it with NaN. A blank value is never a number (`Number('')` is 0).
 */
import { InvalidArgumentError } from 'commander';

function numberOf(value: string): number {
  return value.trim() === '' ? Number.NaN : Number(value);
}

export function port(value: string): number {
  const n = numberOf(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('must be a port number (0-65535)');
  return n;
}

export function positiveInt(value: string): number {
  const n = numberOf(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

/** A positive integer no larger than `max` (a size the command allocates for, say). */
export function positiveIntUpTo(max: number): (value: string) => number {
  return (value) => {
    const n = numberOf(value);
    if (!Number.isSafeInteger(n) || n <= 0 || n > max) throw new InvalidArgumentError(`must be an integer from 1 to ${max}`);
    return n;
  };
}

export function nonNegativeInt(value: string): number {
  const n = numberOf(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError('must be a non-negative integer');
  return n;
}

export function positiveNumber(value: string): number {
  const n = numberOf(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a positive number');
  return n;
}

export function nonNegativeNumber(value: string): number {
  const n = numberOf(value);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('must be a non-negative number');
  return n;
}

export function finiteNumber(value: string): number {
  const n = numberOf(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError('must be a number');
  return n;
}

/** Seconds from 0 to `max` (unbounded by default). */
export function secondsUpTo(max = Infinity): (value: string) => number {
  const range = max === Infinity ? '>= 0' : `0-${max}`;
  return (value) => {
    const n = numberOf(value);
    if (!Number.isFinite(n) || n < 0 || n > max) throw new InvalidArgumentError(`must be a number of seconds (${range})`);
    return n;
  };
}

/** The log levels (pino's), for `.choices()`: a typo is a usage error naming them, not pino's internal text. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** An address given as host:port (a bracketed IPv6 host too), e.g. a gate's ext_proc address. */
export function hostPort(value: string): string {
  if (!/^(\[[^\]]+\]|[^:\s]+):\d{1,5}$/.test(value.trim())) throw new InvalidArgumentError('must be host:port, e.g. 127.0.0.1:9002');
  return value.trim();
}
