/**
 * The scorers of prompt-aware placement, in the order their terms are added (the order is part of
 * the result: floating-point sums are not associative, and ties between workers are decided on
 * exact scores). A new signal is a new file in this folder and one entry here; its weight is read
 * from the config as `scoring.<name>_weight` (docs/DESIGN.md "How to add a scorer").
 */
import type { Scorer } from '../plugins.js';
import { adapterScorer } from './adapter.js';
import { backlogScorer } from './backlog.js';
import { balanceScorer } from './balance.js';
import { kvScorer } from './kv.js';
import { loadScorer } from './load.js';
import { prefixScorer } from './prefix.js';
import { sessionsScorer } from './sessions.js';

export const SCORERS: readonly Scorer[] = [prefixScorer, loadScorer, kvScorer, balanceScorer, adapterScorer, backlogScorer, sessionsScorer];

/** Names of the configurable scorers, each weighed by `scoring.<name>_weight`. */
export const SCORER_NAMES: readonly string[] = SCORERS.map((s) => s.name);
