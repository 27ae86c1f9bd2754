/**
 * Store commits for tests that call a RoutingStore directly: most assert nothing about the state
 * they commit on and differ only in the worker, the session key or the prompt's blocks.
 */
import type { Preconditions } from '../../src/routing/types.js';
import type { CommitRequest } from '../../src/state/store.js';

/** Preconditions that hold on any state: the decision saw no affinity and relied on no count or state. */
export const NO_PRECONDITIONS: Preconditions = { affinity: undefined, below: [], atOrAbove: [], states: [] };

type CommitFields = Partial<Omit<CommitRequest, 'preconditions'>> & Pick<CommitRequest, 'workers' | 'worker'> & { preconditions?: Partial<Preconditions> };

/**
 * A commit to `worker` in pool `p`: no session key, no prompt blocks, nothing asserted, affinity
 * and prefix TTLs of a minute, room for 100 blocks. `fields` replace any of these; preconditions
 * given in part are completed from NO_PRECONDITIONS.
 */
export function commitRequest(fields: CommitFields): CommitRequest {
  const { preconditions, ...rest } = fields;
  return {
    pool: 'p',
    key: undefined,
    blocks: [],
    affinityTtlMs: 60_000,
    prefixTtlMs: 60_000,
    capacityBlocks: 100,
    ...rest,
    preconditions: { ...NO_PRECONDITIONS, ...preconditions },
  };
}
