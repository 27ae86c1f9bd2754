/** The `kvgate` command's entry point: bin/kvgate.js runs the compiled copy of this file. */
import { main } from './cli.js';

await main(process.argv);
