/**
 * Who may take a request once every worker is at its in-flight limit: a worker whose engine reports
 * room, below `limits.overflow_factor` times its limit (../overflow.ts has the reasons).
 */
import { overflowLimitOf, queueCredit, takesOverflow } from '../overflow.js';
import type { Filter } from '../plugins.js';

export const overflowRoom: Filter = {
  name: 'overflow-room',
  filter(workers, ctx) {
    const input = ctx.input;
    const factor = input.overflowFactor ?? 0;
    const credit = factor > 1 ? (ctx.queueCredit ?? queueCredit(input.workers)) : 0;
    return workers.filter((w) => takesOverflow(w, overflowLimitOf(w, factor, credit)));
  },
};
