/** The flag parsers every subcommand shares: a bad value is refused with a message, never NaN. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidArgumentError } from 'commander';
import * as p from '../../src/cli/arg-parsers.js';

test('flag parsers accept their range and refuse the rest, blanks included', () => {
  const cases: Array<[(v: string) => number, string[], string[]]> = [
    [p.port, ['0', '9002', '65535'], ['', ' ', '-1', '65536', '1.5', 'http']],
    [p.positiveInt, ['1', '64'], ['', '0', '-3', '2.5', 'x']],
    [p.positiveIntUpTo(32), ['1', '32'], ['', '0', '33']],
    [p.nonNegativeInt, ['0', '7'], ['', '-1', '0.5']],
    [p.positiveNumber, ['0.1', '3'], ['', '0', '-1', 'Infinity']],
    [p.nonNegativeNumber, ['0', '0.5'], ['', '-0.1', 'NaN']],
    [p.finiteNumber, ['-2', '0', '1e3'], ['', 'high', 'Infinity']],
    [p.secondsUpTo(), ['0', '86400'], ['', '-1']],
    [p.secondsUpTo(3600), ['0', '3600'], ['3601']],
  ];
  for (const [parse, good, bad] of cases) {
    for (const v of good) assert.equal(parse(v), Number(v), `${parse.name} ${JSON.stringify(v)}`);
    for (const v of bad) assert.throws(() => parse(v), InvalidArgumentError, `${parse.name} ${JSON.stringify(v)}`);
  }
});
