/** Policy names for `--policies`, and how to build each for one run. */
import { ArticlePolicy } from './article.js';
import { ConsistentHashPolicy } from './consistent-hash.js';
import { DynamoCostPolicy } from './dynamo-cost.js';
import { KvgatePolicy } from './kvgate.js';
import { LeastLoadedPolicy } from './least-loaded.js';
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
  'dynamo-cost': { describe: "Dynamo's KV router cost (approximate indexer, prefill + decode blocks)", create: (ctx) => new DynamoCostPolicy(ctx) },
};

export const ALL_POLICIES = [...Object.keys(POLICY_FACTORIES), POOLED_BOUND];

export function checkPolicyNames(names: readonly string[]): void {
  const unknown = names.filter((n) => !ALL_POLICIES.includes(n));
  if (unknown.length > 0) throw new Error(`unknown policies: ${unknown.join(', ')} (known: ${ALL_POLICIES.join(', ')})`);
}
