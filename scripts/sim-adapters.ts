/**
 * LoRA adapter affinity on a simulated fleet: each conversation names one of N adapters (Zipf),
 * engines hold `--max-loras` adapters and pay a load for one that is not resident. Compares kvgate
 * with adapter affinity, kvgate without it, round robin and least loaded.
 * `npx tsx scripts/sim-adapters.ts [--workload chat] [--requests 2000] [--rate-scale 1]
 * [--workers 8] [--max-inflight 16] [--adapters 16] [--zipf 1] [--max-loras 4] [--load-ms 50] [--seed 1]`.
 */
import { parseArgs } from 'node:util';
import { initHashing } from '../src/request/hashing.js';
import { adapterTable, runAdapterComparison } from '../src/sim/adapters.js';
import { DEFAULT_COST_MODEL, DEFAULT_FLEET } from '../src/sim/cost-model.js';
import { isSyntheticName, syntheticWorkload } from '../src/sim/workloads/synthetic.js';

const { values } = parseArgs({
  options: {
    workload: { type: 'string', default: 'chat' },
    requests: { type: 'string', default: '2000' },
    'rate-scale': { type: 'string', default: '1' },
    workers: { type: 'string', default: String(DEFAULT_FLEET.workers) },
    'max-inflight': { type: 'string', default: '16' },
    adapters: { type: 'string', default: '16' },
    zipf: { type: 'string', default: '1' },
    'base-share': { type: 'string', default: '0' },
    'max-loras': { type: 'string', default: '4' },
    'load-ms': { type: 'string', default: '50' },
    seed: { type: 'string', default: '1' },
  },
});
const name = values.workload;
if (!isSyntheticName(name)) throw new Error(`unknown synthetic workload "${name}"`);
await initHashing();
const seed = Number(values.seed);
const workload = syntheticWorkload(name, { requests: Number(values.requests), seed, rateScale: Number(values['rate-scale']) });
const rows = await runAdapterComparison(workload, {
  fleet: { ...DEFAULT_FLEET, workers: Number(values.workers) },
  cost: DEFAULT_COST_MODEL,
  maxInflight: Number(values['max-inflight']),
  seed,
  mix: { adapters: Number(values.adapters), zipfS: Number(values.zipf), baseShare: Number(values['base-share']) },
  maxLoras: Number(values['max-loras']),
  loadS: Number(values['load-ms']) / 1000,
});
console.log(
  `${workload.name}, ${workload.requests.length} requests at ${values['rate-scale']}× its rate, ${values.workers} workers, max_inflight ${values['max-inflight']}, ` +
    `${values.adapters} adapters (Zipf ${values.zipf}, base share ${values['base-share']}), max_loras ${values['max-loras']}, load ${values['load-ms']} ms, seed ${seed}`,
);
console.log(adapterTable(rows));
