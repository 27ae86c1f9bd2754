/**
 * Classes of service under overload on a simulated fleet: each class's shed rate and time to first
 * token. `npx tsx scripts/sim-classes.ts [--workload chat] [--requests 2000] [--rate-scale 3]
 * [--workers 8] [--max-inflight 16] [--seed 1]`. A rate scale above 1 overloads the default fleet.
 */
import { parseArgs } from 'node:util';
import { initHashing } from '../src/request/hashing.js';
import { classTable, runClassMix } from '../src/sim/classes.js';
import { DEFAULT_COST_MODEL, DEFAULT_FLEET } from '../src/sim/cost-model.js';
import { isSyntheticName, syntheticWorkload } from '../src/sim/workloads/synthetic.js';

const { values } = parseArgs({
  options: {
    workload: { type: 'string', default: 'chat' },
    requests: { type: 'string', default: '2000' },
    'rate-scale': { type: 'string', default: '3' },
    workers: { type: 'string', default: String(DEFAULT_FLEET.workers) },
    'max-inflight': { type: 'string', default: '16' },
    seed: { type: 'string', default: '1' },
  },
});
const name = values.workload;
if (!isSyntheticName(name)) throw new Error(`unknown synthetic workload "${name}"`);
await initHashing();
const seed = Number(values.seed);
const workload = syntheticWorkload(name, { requests: Number(values.requests), seed, rateScale: Number(values['rate-scale']) });
const rows = await runClassMix(workload, { fleet: { ...DEFAULT_FLEET, workers: Number(values.workers) }, cost: DEFAULT_COST_MODEL, maxInflight: Number(values['max-inflight']), seed });
console.log(`${workload.name}, ${workload.requests.length} requests at ${values['rate-scale']}× its rate, ${values.workers} workers, max_inflight ${values['max-inflight']}, seed ${seed}`);
console.log(classTable(rows));
