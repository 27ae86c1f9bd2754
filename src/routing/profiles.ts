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
 * prompt to match in a prompt-aware mode, else the in-flight share alone; the adapter scorer in
 * both, weighed by the request's adapter weight.
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

export interface Profiles {
  /** In `both` and `prefix` modes with a prompt. */
  prefix: { place: Profile; overflow: Profile };
  /** Otherwise: by load alone. */
  load: { place: Profile; overflow: Profile };
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

export function buildProfiles(weights: ScoreWeights, adapterWeight: number): Profiles {
  const adapter: WeightedScorer = { scorer: adapterScorer, weight: adapterWeight };
  // The adapter term is the request's (its weight rides with the request); the others the config's.
  // A scorer of weight 0 adds nothing (every term is finite), so it is left out: no cost per candidate.
  const prefixScorers = SCORERS.map((scorer) => (scorer === adapterScorer ? adapter : { scorer, weight: weights[scorer.name] ?? 0 })).filter(weighed);
  const loadScorers = [{ scorer: inflightScorer, weight: 1 }, adapter].filter(weighed);
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

const cache = new WeakMap<ScoreWeights, Map<number, Profiles>>();

/** The profiles for these weights, built on first use. */
export function profilesFor(weights: ScoreWeights, adapterWeight: number): Profiles {
  let byAdapter = cache.get(weights);
  if (!byAdapter) cache.set(weights, (byAdapter = new Map()));
  let p = byAdapter.get(adapterWeight);
  if (!p) byAdapter.set(adapterWeight, (p = buildProfiles(weights, adapterWeight)));
  return p;
}
