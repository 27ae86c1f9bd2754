/**
 * The parts a decision is made of, after the Gateway API Inference Extension's endpoint picker
 * (its scheduling framework's Filter, Scorer with a weight, Picker, run as a profile):
 *
 *  - a **filter** says who may serve: it takes the candidates and returns those it keeps, in order;
 *  - a **scorer** says how well each candidate would serve, as a term in [-1, 1] (a cost is
 *    negative); its profile multiplies it by the scorer's weight from the config and adds the
 *    terms up in the order the profile lists them;
 *  - a **picker** chooses among the scored candidates.
 *
 * Unlike the extension's plugins these are pure and synchronous: no I/O, no clock, no state kept
 * between requests. Everything a plugin reads is in the worker's view and the context below.
 */
import type { FleetLoad } from './score.js';
import type { DecisionInput, WorkerView } from './types.js';

/** What filters read besides the workers: the request, and the session's own worker when it competes past its limit. */
export interface FilterContext {
  readonly input: DecisionInput;
  /** The session's worker, kept as a candidate past its in-flight limit (overflow.ts `keepsOverLimit`). */
  readonly home?: WorkerView | undefined;
  /** `queueCredit(input.workers)` (overflow.ts), when the decision has computed it: one pass a decision. */
  readonly queueCredit?: number | undefined;
}

export interface Filter {
  readonly name: string;
  /** The candidates this rule keeps, in their order; the same array when it keeps them all. */
  filter(workers: readonly WorkerView[], ctx: FilterContext): readonly WorkerView[];
}

/** What scorers read besides the candidates. */
export interface ScoreContext {
  readonly input: DecisionInput;
  /** The fleet's mean work, given only where a session is placed (the balance scorer). */
  readonly fleet: FleetLoad | undefined;
  /**
   * The request places (or moves, or keeps past its limit) a session its mode follows: sticky, and
   * not a spill-over (scored as a one-off: ../policy.ts). Its later turns go where it goes, so the
   * work queued there is weighed (the backlog scorer). Absent: false.
   */
  readonly placing?: boolean;
  /** Every candidate is at or past its limit: load terms keep counting past 1. */
  readonly overLimit: boolean;
  /**
   * The session's own worker past its limit, competing to keep the session (overflow.ts
   * `keepsOverLimit`): staying is no new placement, so it has no fair-share term and its load
   * counts past the limit.
   */
  readonly staying?: WorkerView | undefined;
}

export interface Scorer {
  readonly name: string;
  /**
   * One term per candidate, in their order: in [-1, 1] (past the limit the load term may go below
   * -1), higher is better. All candidates at once, as the extension's scorers do: each scorer's
   * loop stays a tight one of its own.
   */
  score(candidates: readonly WorkerView[], ctx: ScoreContext): readonly number[];
}

/** A scorer with the weight the config gives it. */
export interface WeightedScorer {
  readonly scorer: Scorer;
  readonly weight: number;
}

export interface Picker {
  readonly name: string;
  /** The index of the chosen candidate, or -1 when there is none. */
  pick(candidates: readonly WorkerView[], scores: ArrayLike<number>, input: DecisionInput): number;
}

/** One pass of a decision: who may serve, how well, and who is chosen. */
export interface Profile {
  readonly name: string;
  readonly filters: readonly Filter[];
  readonly scorers: readonly WeightedScorer[];
  readonly picker: Picker;
}

export function runFilters(filters: readonly Filter[], workers: readonly WorkerView[], ctx: FilterContext): readonly WorkerView[] {
  let out = workers;
  for (const f of filters) out = f.filter(out, ctx);
  return out;
}

/**
 * Each candidate's weighted sum of terms, added in the profile's order (so every sum is the same
 * to the last bit, whatever the number of scorers).
 */
export function totalScores(scorers: readonly WeightedScorer[], candidates: readonly WorkerView[], ctx: ScoreContext): number[] {
  const totals = new Array<number>(candidates.length).fill(0);
  for (const s of scorers) {
    const terms = s.scorer.score(candidates, ctx);
    const weight = s.weight;
    for (let i = 0; i < totals.length; i++) totals[i] = totals[i]! + weight * terms[i]!;
  }
  return totals;
}

export interface ProfileResult {
  best: WorkerView | undefined;
  /** Every candidate's score, for the explanation. */
  scores: Map<string, number>;
}

export function runProfile(profile: Profile, workers: readonly WorkerView[], fctx: FilterContext, sctx: ScoreContext): ProfileResult {
  const candidates = runFilters(profile.filters, workers, fctx);
  const totals = totalScores(profile.scorers, candidates, sctx);
  const scores = new Map<string, number>();
  for (let i = 0; i < candidates.length; i++) scores.set(candidates[i]!.id, totals[i]!);
  const i = profile.picker.pick(candidates, totals, fctx.input);
  return { best: i >= 0 ? candidates[i] : undefined, scores };
}
