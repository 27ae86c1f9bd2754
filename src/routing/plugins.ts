/**
 * The parts a decision is made of, after the Gateway API Inference Extension's endpoint picker
 * (its scheduling framework's Filter, Scorer with a weight, Picker, run as a profile):
 *
 *  - a **filter** says who may serve: it takes the candidates and returns those it keeps, in order;
 *  - a **scorer** says how well one candidate would serve, as a term in [-1, 1] (a cost is
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
}

export interface Filter {
  readonly name: string;
  /** The candidates this rule keeps, in their order; the same array when it keeps them all. */
  filter(workers: readonly WorkerView[], ctx: FilterContext): readonly WorkerView[];
}

/** What scorers read besides the worker. */
export interface ScoreContext {
  readonly input: DecisionInput;
  /** The fleet's mean work, given only where a session is placed (the balance scorer). */
  readonly fleet: FleetLoad | undefined;
  /** Every candidate is at or past its limit: load terms keep counting past 1. */
  readonly overLimit: boolean;
}

export interface Scorer {
  readonly name: string;
  /** A term in [-1, 1] (past the limit the load term may go below -1): higher is better. */
  score(w: WorkerView, ctx: ScoreContext): number;
}

/** A scorer with the weight the config gives it. */
export interface WeightedScorer {
  readonly scorer: Scorer;
  readonly weight: number;
}

export interface Scored {
  readonly worker: WorkerView;
  readonly score: number;
}

export interface Picker {
  readonly name: string;
  /** The chosen candidate, or undefined when there is none. */
  pick(scored: readonly Scored[], input: DecisionInput): Scored | undefined;
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

/** The weighted sum of a candidate's terms, in the profile's order (so sums are the same to the last bit). */
export function totalScore(scorers: readonly WeightedScorer[], w: WorkerView, ctx: ScoreContext): number {
  let total = 0;
  for (const s of scorers) total += s.weight * s.scorer.score(w, ctx);
  return total;
}

export interface ProfileResult {
  best: Scored | undefined;
  /** Every candidate's score, for the explanation. */
  scores: Map<string, number>;
}

/**
 * Runs a profile over `workers`. `ctxOf` gives each candidate's score context (the session's own
 * worker past its limit is scored as staying, see policy.ts).
 */
export function runProfile(profile: Profile, workers: readonly WorkerView[], fctx: FilterContext, ctxOf: (w: WorkerView) => ScoreContext): ProfileResult {
  const candidates = runFilters(profile.filters, workers, fctx);
  const scored: Scored[] = [];
  const scores = new Map<string, number>();
  for (const w of candidates) {
    const s = totalScore(profile.scorers, w, ctxOf(w));
    scored.push({ worker: w, score: s });
    scores.set(w.id, s);
  }
  return { best: profile.picker.pick(scored, fctx.input), scores };
}
