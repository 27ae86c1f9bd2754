#!/usr/bin/env node
// The package's `kvgate` binary: runs the compiled JavaScript in dist/ (`npm run build`, which
// `npm ci` and `npm install` run as the `prepare` script). Nothing is compiled at start-up.
import { existsSync } from 'node:fs';

const main = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  process.stderr.write('kvgate: the compiled build (dist/) is missing: run `npm run build` (`npm ci` runs it)\n');
  process.exit(1);
}
await import(main.href);
