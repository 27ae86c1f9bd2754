/**
 * Decision inputs for the routing tests: what the gate hands `decide` for a request with nothing
 * special about it (a session, key `k`, no affinity, no prompt, the default weights and floor),
 * so that each test names only what it is about.
 */
import { DEFAULTS } from '../../src/config/defaults.js';
import type { DecisionInput, WorkerView } from '../../src/routing/types.js';

export function decisionInput(workers: readonly WorkerView[], fields: Partial<DecisionInput> = {}): DecisionInput {
  return {
    keyHash: 'k',
    session: true,
    affinity: undefined,
    keyInflight: 0,
    totalBlocks: 0,
    workers,
    mode: 'both',
    weights: { prefix: DEFAULTS.prefixWeight, load: DEFAULTS.loadWeight, kv: DEFAULTS.kvWeight, balance: DEFAULTS.balanceWeight },
    balanceFloor: DEFAULTS.balanceFloor,
    maxInflightPerSession: 4,
    ...fields,
  };
}
