/**
 * The profiles a decision runs, built once per set of weights (the gate hands the same weights
 * object to every request of a config, so this is a lookup per request).
 *
 *   visible   filters run once on the fleet, before stickiness: a worker they drop is invisible
 *             to the whole decision, even as a session's home (adapter slots)
 *   place     below the limits: takes-new-work, class-share; then the scorers; max-score
 *   overflow  every worker at its limit (./overflow.ts): overflow-room; the same scorers, with the
 *             load counted past the limit; max-score
 *
 * Scorers: the registry (./scorers/index.ts) weighed by `weights[name]` when the request has a
 * prompt to match in a prompt-aware mode, else the in-flight count alone (./scorers/inflight.ts,
 * weight 1; the picker breaks its ties by the engine's queue); the adapter scorer in both, weighed by `weights.adapter` like the rest. A request that names no adapter gets the same
 * profiles without the adapter scorer: its term would be 0 for every worker, so, as for a weight of
 * 0, leaving it out changes no sum and saves a pass over the candidates.
 */
import { adapterSlots } from './filters/adapter.js';
import { classShare } from './filters/class-share.js';
import { overflowRoom } from './filters/overflow-room.js';
import { takesNewWork } from './filters/takes-new-work.js';
import { maxScorePicker } from './pickers/max-score.js';
import type { Filter, Profile, WeightedScorer } from './plugins.js';
import { adapterScorer } from './scorers/adapter.js';
import { SCORERS } from './scorers/index.js';
import { inflightScorer } from './scorers/inflight.js';
import type { ScoreWeights } from './types.js';

export const VISIBLE: readonly Filter[] = [adapterSlots];

/** The profiles of one kind of request. */
export interface ProfileSet {
  /** In `both` and `prefix` modes with a prompt. */
  prefix: { place: Profile; overflow: Profile };
  /** Otherwise: by load alone. */
  load: { place: Profile; overflow: Profile };
}

export interface Profiles extends ProfileSet {
  /** For a request that names a LoRA adapter: the same, with the adapter scorer. */
  adapter: ProfileSet;
}

/** Weights from a config section by scorer name: `<name>_weight` (the keys `scoring` has always had). */
export function weightsByName(section: Readonly<Record<string, unknown>>, names: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const n of names) {
    const v = section[`${n}_weight`];
    if (typeof v === 'number') out[n] = v;
  }
  return out;
}

export function buildProfiles(weights: ScoreWeights): Profiles {
  // A scorer of weight 0 adds nothing (every term is finite), so it is left out: no cost per candidate.
  const prefixScorers = SCORERS.map((scorer) => ({ scorer, weight: weights[scorer.name] ?? 0 })).filter(weighed);
  // By load alone: the gate's in-flight count (./scorers/inflight.ts says why not the load term),
  // at weight 1 whatever `load_weight` is, since it is the whole choice; ties go to the shorter queue.
  const loadScorers = [{ scorer: inflightScorer, weight: 1 }, { scorer: adapterScorer, weight: weights[adapterScorer.name] ?? 0 }].filter(weighed);
  const withAdapter = profileSet(prefixScorers, loadScorers);
  return { ...profileSet(prefixScorers.filter(notAdapter), loadScorers.filter(notAdapter)), adapter: withAdapter };
}

function profileSet(prefixScorers: readonly WeightedScorer[], loadScorers: readonly WeightedScorer[]): ProfileSet {
  const place = [takesNewWork, classShare];
  const overflow = [overflowRoom];
  return {
    prefix: {
      place: { name: 'prefix-place', filters: place, scorers: prefixScorers, picker: maxScorePicker },
      overflow: { name: 'prefix-overflow', filters: overflow, scorers: prefixScorers, picker: maxScorePicker },
    },
    load: {
      place: { name: 'load-place', filters: place, scorers: loadScorers, picker: maxScorePicker },
      overflow: { name: 'load-overflow', filters: overflow, scorers: loadScorers, picker: maxScorePicker },
    },
  };
}

function weighed(s: WeightedScorer): boolean {
  return s.weight !== 0;
}

/** The adapter scorer's term is 0 for every worker when the request names no adapter. */
function notAdapter(s: WeightedScorer): boolean {
  return s.scorer !== adapterScorer;
}

const cache = new WeakMap<ScoreWeights, Profiles>();

/** The profiles for these weights, built on first use. */
export function profilesFor(weights: ScoreWeights): Profiles {
  let p = cache.get(weights);
  if (!p) cache.set(weights, (p = buildProfiles(weights)));
  return p;
}
