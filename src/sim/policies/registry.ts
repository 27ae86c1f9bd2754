/**
 * Policy names for `--policies`, and how to build each for one run. `article` is the algorithm of
 * the article kvgate started from (a web article on stateful LLM load balancing with KV-cache
 * affinity, its `StatefulLLMLoadBalancer` example: sticky sessions under a fixed load
 * threshold of 10, least-loaded fallback, refuse when every worker is at it).
 */
import { ArticlePolicy } from './article.js';
import { ConsistentHashPolicy } from './consistent-hash.js';
import { DynamoCostPolicy } from './dynamo-cost.js';
import { KvgatePolicy } from './kvgate.js';
import { LeastLoadedPolicy } from './least-loaded.js';
import { LLMD_DEFAULTS, LLMD_SESSION_WEIGHT, LlmdPolicy } from './llm-d.js';
import type { PolicyContext, RouterPolicy } from './policy.js';
import { RoundRobinPolicy } from './round-robin.js';
import { SglangCacheAwarePolicy } from './sglang-cache-aware.js';

/** Not a policy: the hit rate of one LRU cache as large as the whole fleet's (pooled-bound.ts). */
export const POOLED_BOUND = 'pooled-bound';

export const POLICY_FACTORIES: Record<string, { describe: string; create: (ctx: PolicyContext) => RouterPolicy | Promise<RouterPolicy> }> = {
  kvgate: { describe: "kvgate's real Gate and policy over a MemoryStore", create: (ctx) => KvgatePolicy.create(ctx) },
  'round-robin': { describe: 'round robin', create: (ctx) => new RoundRobinPolicy(ctx) },
  'least-loaded': { describe: 'fewest in-flight requests (router-local)', create: (ctx) => new LeastLoadedPolicy(ctx) },
  'consistent-hash': { describe: 'hash ring on the session id (vLLM production-stack `session`)', create: (ctx) => new ConsistentHashPolicy(ctx) },
  article: { describe: "the article's session stickiness, threshold 10, least-loaded fallback", create: (ctx) => new ArticlePolicy(ctx) },
  'sglang-cache-aware': { describe: "SGLang's cache-aware router (approximate tree, balance thresholds)", create: (ctx) => new SglangCacheAwarePolicy(ctx) },
  'dynamo-cost': { describe: "Dynamo's KV router cost (approximate indexer, prefill + decode blocks, no request rejection, as shipped)", create: (ctx) => new DynamoCostPolicy(ctx) },
  'llm-d': { describe: "llm-d's default profile (queue 2, KV use 2, approximate prefix 3, max-score picker)", create: (ctx) => new LlmdPolicy(ctx) },
  'llm-d-session': {
    describe: "llm-d's default profile plus its session-affinity scorer (weight 1)",
    create: (ctx) => new LlmdPolicy(ctx, { ...LLMD_DEFAULTS, sessionWeight: LLMD_SESSION_WEIGHT }, 'llm-d-session'),
  },
};

export const ALL_POLICIES = [...Object.keys(POLICY_FACTORIES), POOLED_BOUND];

export function checkPolicyNames(names: readonly string[]): void {
  const unknown = names.filter((n) => !ALL_POLICIES.includes(n));
  if (unknown.length > 0) throw new Error(`unknown policies: ${unknown.join(', ')} (known: ${ALL_POLICIES.join(', ')})`);
}
