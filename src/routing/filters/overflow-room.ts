/**
 * Who may take a request once no worker takes it below the limits (every one at its limit, or
 * pressured, or both): a worker whose engine reports room, or one past KV pressure with free KV
 * for this one-off request, below `limits.overflow_factor` times its limit (../overflow.ts has the
 * reasons).
 */
import { fitsOneOff, overflowLimitOf, queueCredit, takesOverflow } from '../overflow.js';
import type { Filter } from '../plugins.js';

export const overflowRoom: Filter = {
  name: 'overflow-room',
  filter(workers, ctx) {
    const input = ctx.input;
    const factor = input.overflowFactor ?? 0;
    const credit = factor > 1 ? (ctx.queueCredit ?? queueCredit(input.workers)) : 0;
    return workers.filter((w) => {
      const limit = overflowLimitOf(w, factor, credit);
      return takesOverflow(w, limit) || (w.inflight < limit && fitsOneOff(w, input));
    });
  },
};
