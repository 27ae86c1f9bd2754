/**
 * Classes of service as a filter: a request of a lower class may be placed only on a worker below
 * its class's share of the in-flight limit (../class-share.ts has the rule and its reasons). The top
 * class (no share, or 1) passes everywhere.
 */
import { admitLimit } from '../class-share.js';
import type { Filter } from '../plugins.js';

export const classShare: Filter = {
  name: 'class-share',
  filter(workers, { input, home }) {
    const share = input.classShare;
    if (share === undefined || !(share < 1)) return workers;
    return workers.filter((w) => w === home || w.inflight < admitLimit(w, share));
  },
};
