/**
 * How tests run the `kvgate` command as a process: the TypeScript sources through tsx, so a test
 * always runs the code under test whether or not dist/ has been rebuilt since. The package's
 * binary (bin/kvgate.js) runs the compiled build; test/cli/production.test.ts covers that path.
 */
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '../..');

/** Node arguments that run `kvgate`: spawn(process.execPath, [...KVGATE, 'serve', ...]). */
export const KVGATE: readonly string[] = ['--import', import.meta.resolve('tsx'), path.join(ROOT, 'src/cli/main.ts')];
