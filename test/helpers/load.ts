/**
 * Steady load through the Envoy harness: `concurrency` clients each sending one request after
 * another until stopped, and a tally of what Envoy would have done with each. "Answered" means
 * what a client would call success: the request reached the worker kvgate named, with no message
 * timeout, failed stream or fail-open fallback on the way.
 */
import type { EnvoyHarness, Outcome } from '../harness/envoy-harness.js';
import { chat } from './envoy.js';

export const FALLBACK_CLUSTER = 'kvgate_fallback';

export interface LoadTally {
  sent: number;
  /** Reached the worker kvgate chose. */
  answered: number;
  /** Anything else, described (at most 20 kept). */
  problems: string[];
  problemCount: number;
  /** session → every cluster it was sent to, in order. */
  placements: Map<string, string[]>;
}

export interface RunningLoad {
  tally: LoadTally;
  stop(): Promise<LoadTally>;
}

/** Why an outcome is not a clean routed answer, or undefined when it is. */
export function problemWith(out: Outcome): string | undefined {
  const s = out.stats;
  if (s && (s.messageTimeouts > 0 || s.streamsFailed > 0 || s.failureModeAllowed > 0 || s.spuriousMsgsReceived > 0)) {
    return `ext_proc trouble: ${JSON.stringify(s)}`;
  }
  if (out.kind !== 'upstream') return `${out.kind} ${out.kind === 'local' ? `${out.status} ${out.details ?? ''}` : out.details}`;
  if (out.cluster === FALLBACK_CLUSTER) return 'fell back to the fail-open route';
  return undefined;
}

export function startLoad(h: EnvoyHarness, opts: { concurrency: number; session: (n: number) => string; pauseMs?: number }): RunningLoad {
  const tally: LoadTally = { sent: 0, answered: 0, problems: [], problemCount: 0, placements: new Map() };
  let running = true;
  let n = 0;
  const client = async () => {
    while (running) {
      const session = opts.session(n++);
      tally.sent++;
      try {
        const out = await h.request(chat({ session, text: `turn ${n}` }));
        const problem = problemWith(out);
        if (problem) {
          tally.problemCount++;
          if (tally.problems.length < 20) tally.problems.push(`${session}: ${problem}`);
        } else {
          tally.answered++;
          const seen = tally.placements.get(session);
          if (seen) seen.push(out.cluster!);
          else tally.placements.set(session, [out.cluster!]);
        }
      } catch (err) {
        tally.problemCount++;
        if (tally.problems.length < 20) tally.problems.push(`${session}: threw ${(err as Error).message}`);
      }
      if (opts.pauseMs) await new Promise((r) => setTimeout(r, opts.pauseMs));
    }
  };
  const clients = Array.from({ length: opts.concurrency }, () => client());
  return {
    tally,
    async stop() {
      running = false;
      await Promise.all(clients);
      return tally;
    },
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
