/**
 * The schema of kvgate's YAML config. One zod schema is the source of both validation and the
 * `Config` type. Unknown keys are rejected so a typo never silently falls back to a default.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { ENGINES } from './vocabulary.js';
import { DEFAULTS } from './defaults.js';
import { canonicalEndpoint } from '../util/endpoint-address.js';

/**
 * The longest a setting that becomes a timer may be: one day. Node clamps a timer past 2^31-1 ms
 * (24.8 days) to 1 ms, so a huge value would fire at once (a stream idle limit cutting every
 * stream, a refresh loop spinning) rather than never; a day is past any sensible value and far
 * from that edge even after the code's arithmetic on it.
 */
const MAX_TIMER_MS = 86_400_000;
const MAX_TIMER_S = MAX_TIMER_MS / 1000;

/** `ip:port` as the endpoint-picker protocol and Envoy's ORIGINAL_DST cluster need it (no host names). */
export function isEndpointAddress(s: string): boolean {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(s);
  if (!m) return false;
  const port = Number(m[3]);
  const ip = m[1] ?? m[2] ?? '';
  return port > 0 && port <= 65535 && isIP(ip) === (m[1] !== undefined ? 6 : 4);
}

export const headerName = z
  .string()
  .min(1)
  .regex(/^[a-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a lower-case HTTP header name');

/**
 * Headers Envoy's ext_proc filter will not let kvgate set under its default mutation rules
 * (Envoy's mutation_rules.cc, Checker::isAllowed): the routing headers `host`, `:authority`,
 * `:method` and `:scheme` (unless allow_all_routing), and anything under the `x-envoy` prefix
 * (unless allow_envoy). Envoy drops such a mutation silently, so the route would never follow
 * kvgate's answer: refused here, where the operator sees why.
 */
export const ENVOY_REFUSED_ROUTING_HEADERS: readonly string[] = ['host', ':authority', ':method', ':scheme'];
export const ENVOY_RESERVED_PREFIX = 'x-envoy';

/** The header kvgate names the cluster in: an ordinary header Envoy lets ext_proc set. */
export const routingHeaderName = z.string().superRefine((name, ctx) => {
  const lower = name.toLowerCase();
  if (ENVOY_REFUSED_ROUTING_HEADERS.includes(lower)) {
    ctx.addIssue({
      code: 'custom',
      message: `"${name}" cannot be the routing header: Envoy's default ext_proc mutation rules refuse to let kvgate set ${lower} (a header Envoy itself routes on), so the route would never follow kvgate's answer; use an ordinary header such as ${DEFAULTS.routingHeader}`,
      abort: true,
    });
    return;
  }
  if (lower.startsWith(ENVOY_RESERVED_PREFIX)) {
    ctx.addIssue({
      code: 'custom',
      message: `"${name}" cannot be the routing header: Envoy's default ext_proc mutation rules refuse x-envoy-* headers, so the route would never follow kvgate's answer; use an ordinary header such as ${DEFAULTS.routingHeader}`,
      abort: true,
    });
    return;
  }
  const parsed = headerName.safeParse(name);
  if (!parsed.success) ctx.addIssue({ code: 'custom', message: parsed.error.issues[0]?.message ?? 'must be a lower-case HTTP header name' });
});

/** Prefix block size in characters: below 16 the index explodes, above 64k a block never completes. */
export const blockChars = z.number().int().min(16).max(65536);

const workerSchema = z.strictObject({
  /** Stable id used for affinity; renaming a worker drops its sessions' affinity. */
  id: z.string().min(1).regex(/^[A-Za-z0-9._:-]+$/, 'letters, digits and . _ : - only'),
  /** The Envoy cluster name that kvgate puts in the routing header (cluster_header protocol). */
  cluster: z.string().min(1).optional(),
  /** The worker's `ip:port` (endpoint_picker protocol): what Envoy's ORIGINAL_DST cluster connects to. */
  // Stored in one spelling (util/endpoint-address.ts), so a proxy's report of it is recognised.
  address: z.string().refine(isEndpointAddress, 'must be ip:port (IPv4, or [IPv6]:port)').transform(canonicalEndpoint).optional(),
  max_inflight: z.number().int().positive().optional(),
  /** KV tokens the worker holds; sizes its share of the prefix index. */
  kv_capacity_tokens: z.number().int().positive().optional(),
  /** The model server's Prometheus endpoint; without it the worker is judged by in-flight counts alone. */
  metrics_url: z.url({ protocol: /^https?$/ }).optional(),
  /** Which metric names the endpoint uses. */
  engine: z.enum(ENGINES).default('vllm'),
  /** A DCGM exporter endpoint for this worker's GPU (framebuffer, temperature), if any. */
  dcgm_url: z.url({ protocol: /^https?$/ }).optional(),
  /**
   * Which GPUs on the DCGM exporter's page are this worker's: `all`, or a list of indices (the
   * exporter's `gpu` label) and UUIDs (its `UUID` label). An exporter covers its whole node.
   */
  dcgm_gpus: z
    .union([z.literal('all'), z.array(z.union([z.number().int().nonnegative(), z.string().min(1).max(128)])).min(1).max(1024)])
    .transform((v) => (v === 'all' ? v : v.map(String)))
    .default(DEFAULTS.dcgmGpus),
  /** Count raw GPU framebuffer use as memory pressure (off: vLLM preallocates most of the GPU). */
  memory_pressure_from_framebuffer: z.boolean().default(false),
});

/** Adapter names as requests give them in `model` (vLLM's `--lora-modules name=path`). */
const adapterList = z.array(z.string().min(1).max(256)).min(1).max(4096);

/** Pool names go into Redis hash tags (`{<pool>}`) and logs: no braces, no spaces. */
export const POOL_NAME = /^[A-Za-z0-9._:-]+$/;

const workersSchema = z
  .array(workerSchema)
  .min(1, 'at least one worker is required')
  .superRefine((workers, ctx) => {
    const seen = new Set<string>();
    for (const [i, w] of workers.entries()) {
      if (seen.has(w.id)) ctx.addIssue({ code: 'custom', path: [i, 'id'], message: `duplicate worker id "${w.id}"` });
      seen.add(w.id);
      // A worker is judged on its engine's figures; DCGM's GPU memory and temperature are read
      // beside them. Without metrics_url they would be scraped and never used: said, not ignored.
      if (w.dcgm_url !== undefined && w.metrics_url === undefined) {
        ctx.addIssue({ code: 'custom', path: [i, 'dcgm_url'], message: 'dcgm_url needs metrics_url: GPU memory and temperature are read beside the engine\'s metrics' });
      }
      // fetch refuses a URL with credentials, so they could never work; and the URL is shown in
      // every failed scrape's message (GET /workers, `kvgate status`, the log). Said without the value.
      for (const field of ['metrics_url', 'dcgm_url'] as const) {
        const url = w[field];
        if (url !== undefined && hasCredentials(url)) {
          ctx.addIssue({ code: 'custom', path: [i, field], message: `${field} must not carry credentials (user:password@): kvgate cannot send them, and would show them in every scrape error. Put the scrape behind a network policy, or pass a token in the query string` });
        }
      }
    }
  });

function hasCredentials(url: string): boolean {
  try {
    const u = new URL(url);
    return u.username !== '' || u.password !== '';
  } catch {
    return false;
  }
}

/**
 * A worker pool: GPUs serving the same models. Affinity, the prefix index and in-flight counts are
 * kept per pool, so a session or a prompt prefix never crosses from one pool to another.
 */
const poolSchema = z.strictObject({
  name: z.string().min(1).regex(POOL_NAME, 'letters, digits and . _ : - only'),
  /**
   * The `model` values (as clients send them in the body) this pool serves. A pool without
   * `models` serves every model no other pool names; at most one pool may leave it out.
   */
  models: z.array(z.string().min(1)).min(1).optional(),
  /** Per-worker in-flight limit for this pool's workers that set none (else limits.max_inflight). */
  max_inflight: z.number().int().positive().optional(),
  /**
   * LoRA adapters of this pool's base model, by the `model` value that names them in a request. A
   * request naming one is routed in this pool, preferring workers that have the adapter loaded.
   */
  adapters: adapterList.optional(),
  workers: workersSchema,
});

/** Class names go into metrics labels and the 429 body: short, plain. */
export const CLASS_NAME = /^[a-z0-9][a-z0-9_-]{0,31}$/;
const className = z.string().regex(CLASS_NAME, 'lower-case letters, digits, _ and - only (at most 32)');

/**
 * Classes of service (src/routing/filters/class-share.ts): highest first, each with the share of a
 * worker's in-flight limit its requests may fill. The top class uses the whole limit.
 */
const classesSchema = z
  .strictObject({
    levels: z
      .array(z.strictObject({ name: className, share: z.number().gt(0).max(1) }))
      .min(1)
      .default(DEFAULTS.classes.map((c) => ({ ...c }))),
    /** The class of requests that no knob or header classifies. */
    default: className.default(DEFAULTS.defaultClass),
    /** The request header naming a request's class (on routes whose `class` knob is unset). */
    header: headerName.default(DEFAULTS.classHeader),
    /** Endpoint-picker mode: InferenceObjective names (`x-gateway-inference-objective`) → class. */
    objectives: z.record(z.string().min(1).max(253), className).default({}),
  })
  .superRefine((c, ctx) => {
    const names = new Set<string>();
    for (const [i, l] of c.levels.entries()) {
      if (names.has(l.name)) ctx.addIssue({ code: 'custom', path: ['levels', i, 'name'], message: `duplicate class "${l.name}"` });
      names.add(l.name);
    }
    if (c.levels[0] && c.levels[0].share !== 1) {
      ctx.addIssue({ code: 'custom', path: ['levels', 0, 'share'], message: 'the top class uses the whole limit (share 1): it is never shed while any worker could take it' });
    }
    for (const [i, l] of c.levels.entries()) {
      const above = c.levels[i - 1];
      if (above && l.share > above.share) ctx.addIssue({ code: 'custom', path: ['levels', i, 'share'], message: `a lower class may not use more than the class above it ("${above.name}": ${above.share})` });
    }
    if (!names.has(c.default)) ctx.addIssue({ code: 'custom', path: ['default'], message: `no class named "${c.default}" (classes: ${[...names].join(', ')})` });
    for (const [objective, cls] of Object.entries(c.objectives)) {
      if (!names.has(cls)) ctx.addIssue({ code: 'custom', path: ['objectives', objective], message: `no class named "${cls}" (classes: ${[...names].join(', ')})` });
    }
  });

const configObject = z.strictObject({
  routing: z
    .strictObject({
      protocol: z.enum(['cluster_header', 'endpoint_picker']).default(DEFAULTS.routingProtocol),
      header: routingHeaderName.default(DEFAULTS.routingHeader),
      shed_status: z.union([z.literal(429), z.literal(503)]).default(DEFAULTS.shedStatus),
      retry_after_s: z.number().int().nonnegative().default(DEFAULTS.retryAfterS),
      request_body_mode: z.enum(['buffered', 'streamed', 'none', 'full_duplex']).default(DEFAULTS.requestBodyMode),
      response_body_mode: z.enum(['none', 'streamed', 'buffered', 'full_duplex']).default(DEFAULTS.responseBodyMode),
      release_on: z.enum(['response_headers', 'response_end']).default(DEFAULTS.releaseOn),
      policy: z.enum(['session', 'prefix', 'both', 'least_loaded']).default(DEFAULTS.policy),
    })
    .prefault({}),
  keys: z
    .strictObject({
      session_header: headerName.default(DEFAULTS.sessionHeader),
      session_cookie: z.string().min(1).default(DEFAULTS.sessionCookie),
      body_session_fields: z.boolean().default(true),
      session_paths: z.array(z.string().startsWith('/')).default([...DEFAULTS.sessionPaths]),
      /** Blocks of the prompt that form a sessionless request's key. */
      prefix_key_blocks: z.number().int().min(1).max(1024).default(DEFAULTS.prefixKeyBlocks),
    })
    .prefault({}),
  prefix: z
    .strictObject({
      block_chars: blockChars.default(DEFAULTS.prefixBlockChars),
      max_blocks: z.number().int().min(1).max(8192).default(DEFAULTS.prefixMaxBlocks),
      chars_per_token: z.number().positive().default(DEFAULTS.charsPerToken),
      ttl_s: z.number().int().positive().default(DEFAULTS.prefixTtlS),
    })
    .prefault({}),
  scoring: z
    .strictObject({
      prefix_weight: z.number().nonnegative().default(DEFAULTS.prefixWeight),
      load_weight: z.number().nonnegative().default(DEFAULTS.loadWeight),
      kv_weight: z.number().nonnegative().default(DEFAULTS.kvWeight),
      balance_weight: z.number().nonnegative().default(DEFAULTS.balanceWeight),
      balance_floor: z.number().nonnegative().default(DEFAULTS.balanceFloor),
      adapter_weight: z.number().nonnegative().default(DEFAULTS.adapterWeight),
      adapter_filter: z.boolean().default(DEFAULTS.adapterFilter),
      backlog_weight: z.number().nonnegative().default(DEFAULTS.backlogWeight),
      sessions_weight: z.number().nonnegative().default(DEFAULTS.sessionsWeight),
      sessions_floor: z.number().nonnegative().default(DEFAULTS.sessionsFloor),
      sessions_window_s: z.number().positive().default(DEFAULTS.sessionsWindowS),
      sessions_min_tokens: z.number().nonnegative().default(DEFAULTS.sessionsMinTokens),
    })
    .prefault({}),
  affinity: z
    .strictObject({
      ttl_s: z.number().int().positive().default(DEFAULTS.affinityTtlS),
      /** How long kvgate remembers which worker stored a Responses API response. */
      response_ttl_s: z.number().int().positive().default(DEFAULTS.responseTtlS),
      max_inflight_per_session: z.number().int().positive().default(DEFAULTS.maxInflightPerSession),
    })
    .prefault({}),
  limits: z
    .strictObject({
      max_body_bytes: z.number().int().positive().default(DEFAULTS.maxBodyBytes),
      malformed_body: z.enum(['forward', 'reject']).default(DEFAULTS.malformedBody),
      max_inflight: z.number().int().positive().default(DEFAULTS.maxInflight),
      overflow_factor: z.number().min(0).max(1000).default(DEFAULTS.overflowFactor),
      stream_idle_s: z.number().positive().max(MAX_TIMER_S).default(DEFAULTS.streamIdleS),
    })
    .prefault({}),
  classes: classesSchema.prefault({}),
  leases: z.strictObject({ ttl_s: z.number().int().min(3).max(MAX_TIMER_S).default(DEFAULTS.leaseTtlS) }).prefault({}),
  store: z
    .strictObject({
      timeout_ms: z.number().int().positive().max(MAX_TIMER_MS).default(DEFAULTS.storeTimeoutMs),
      refresh_ms: z.number().int().positive().max(MAX_TIMER_MS).default(DEFAULTS.storeRefreshMs),
      key_prefix: z.string().min(1).regex(/^[A-Za-z0-9_.:-]+$/).default(DEFAULTS.storeKeyPrefix),
      ready_when_unreachable: z.boolean().default(DEFAULTS.readyWhenStoreUnreachable),
    })
    .prefault({}),
  signals: z
    .strictObject({
      interval_ms: z.number().int().min(10).max(MAX_TIMER_MS).default(DEFAULTS.scrapeIntervalMs),
      timeout_ms: z.number().int().positive().max(MAX_TIMER_MS).default(DEFAULTS.scrapeTimeoutMs),
      stale_after_ms: z.number().int().positive().max(MAX_TIMER_MS).default(DEFAULTS.staleAfterMs),
      failures_down: z.number().int().positive().default(DEFAULTS.scrapeFailuresDown),
    })
    .superRefine((s, ctx) => {
      // A worker's figures are at least interval_ms old just before its next scrape lands: with
      // stale_after_ms no longer than that, every worker with metrics counts as down for part of
      // each interval (all of them at once, so requests are shed), however healthy it is.
      if (s.stale_after_ms <= s.interval_ms) {
        ctx.addIssue({
          code: 'custom',
          path: ['stale_after_ms'],
          message: `${s.stale_after_ms} ms is not longer than the scrape interval, interval_ms (${s.interval_ms} ms): every worker's figures would go stale between two scrapes and it would count as down; raise stale_after_ms above ${s.interval_ms} or scrape more often (a few scrapes per stale_after_ms ride out a missed one)`,
        });
      }
    })
    .prefault({}),
  thresholds: z
    .strictObject({
      kv_pressure: z.number().gt(0).max(1).default(DEFAULTS.kvPressure),
      memory_pressure: z.number().gt(0).max(1).default(DEFAULTS.kvPressure),
      max_queue: z.number().int().nonnegative().default(DEFAULTS.maxQueue),
      max_temp_c: z.number().positive().default(DEFAULTS.maxTempC),
    })
    .prefault({}),
  migration: z
    .strictObject({
      enabled: z.boolean().default(DEFAULTS.migrationEnabled),
      interval_ms: z.number().int().positive().max(MAX_TIMER_MS).default(DEFAULTS.migrationIntervalMs),
      fraction: z.number().gt(0).max(1).default(DEFAULTS.migrationFraction),
      max_sessions: z.number().int().positive().default(DEFAULTS.migrationMaxSessions),
      stream_maxlen: z.number().int().positive().default(DEFAULTS.offloadStreamMaxLen),
    })
    .prefault({}),
  /** One pool (named `default`): today's single-fleet form. Give either `workers` or `pools`. */
  workers: workersSchema.optional(),
  /** The LoRA adapters of the one pool's base model (with `workers`; each of `pools` lists its own). */
  adapters: adapterList.optional(),
  pools: z.array(poolSchema).min(1, 'at least one pool is required').superRefine(checkPools).optional(),
  /** The pool for requests that name no model and no pool; the first pool when left out. */
  default_pool: z.string().min(1).optional(),
});

/** The top-level sections of a config file (the README's examples quote some alone). */
export const CONFIG_SECTIONS: ReadonlySet<string> = new Set(Object.keys(configObject.shape));

type RawConfig = z.infer<typeof configObject>;
type RawPoolConfig = z.infer<typeof poolSchema>;

/** Each pool name, worker and model belongs to exactly one pool. */
function checkPools(pools: readonly RawPoolConfig[], ctx: z.RefinementCtx): void {
  const names = new Set<string>();
  const workerPool = new Map<string, string>();
  const modelPool = new Map<string, string>();
  let catchAll: string | undefined;
  for (const [i, p] of pools.entries()) {
    if (names.has(p.name)) ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate pool name "${p.name}"` });
    names.add(p.name);
    for (const [j, w] of p.workers.entries()) {
      const other = workerPool.get(w.id);
      // Worker ids are global: the admin API and the logs name a worker without its pool.
      if (other !== undefined && other !== p.name) {
        ctx.addIssue({ code: 'custom', path: [i, 'workers', j, 'id'], message: `worker "${w.id}" is already in pool "${other}"` });
      }
      workerPool.set(w.id, p.name);
    }
    for (const [j, m] of (p.models ?? []).entries()) {
      const other = modelPool.get(m);
      if (other !== undefined) ctx.addIssue({ code: 'custom', path: [i, 'models', j], message: `model "${m}" is already served by pool "${other}"` });
      modelPool.set(m, p.name);
    }
  }
  // After every pool's models, so an adapter named like any model is caught whatever the order.
  for (const [i, p] of pools.entries()) {
    for (const [j, a] of (p.adapters ?? []).entries()) {
      const other = modelPool.get(a);
      if (other !== undefined) ctx.addIssue({ code: 'custom', path: [i, 'adapters', j], message: `adapter "${a}" is already a model or adapter of pool "${other}"` });
      modelPool.set(a, p.name);
    }
  }
  for (const [i, p] of pools.entries()) {
    if (p.models === undefined) {
      if (catchAll !== undefined) {
        ctx.addIssue({ code: 'custom', path: [i, 'models'], message: `only one pool may leave out \`models\` (pool "${catchAll}" already does)` });
      }
      catchAll ??= p.name;
    }
  }
}

/** `workers` or `pools`, and a default pool that exists. Runs even when other keys failed, so every problem shows at once. */
function checkShape(c: Partial<RawConfig>, ctx: z.RefinementCtx): void {
  const hasWorkers = c.workers !== undefined;
  const hasPools = c.pools !== undefined;
  if (!hasWorkers && !hasPools) ctx.addIssue({ code: 'custom', path: ['workers'], message: 'give `workers` (one pool) or `pools` (several)' });
  if (hasWorkers && hasPools) ctx.addIssue({ code: 'custom', path: ['pools'], message: 'give `workers` (one pool) or `pools`, not both' });
  if (hasPools && c.adapters !== undefined) ctx.addIssue({ code: 'custom', path: ['adapters'], message: 'with `pools`, each pool lists its own `adapters`' });
  if (typeof c.default_pool !== 'string' || (hasPools && !Array.isArray(c.pools))) return;
  const known = [...new Set(Array.isArray(c.pools) ? c.pools.map((p) => (p as { name?: unknown } | null)?.name) : [DEFAULTS.pool])];
  if (!known.includes(c.default_pool)) {
    ctx.addIssue({ code: 'custom', path: ['default_pool'], message: `no pool named "${c.default_pool}" (pools: ${known.join(', ')})` });
  }
}

/**
 * Each protocol needs its own way of naming a worker to Envoy: a cluster (cluster_header) or an
 * `ip:port` address, unique across every pool (endpoint_picker). Runs even when other keys are
 * invalid, so values may be partial here and an operator fixes the file in one pass.
 */
function checkProtocol(c: Partial<RawConfig>, ctx: z.RefinementCtx): void {
  const protocol = (c.routing as { protocol?: string } | undefined)?.protocol ?? DEFAULTS.routingProtocol;
  type Partial_ = { cluster?: unknown; address?: unknown } | undefined;
  const lists: Array<{ path: (string | number)[]; workers: unknown }> = [];
  if (Array.isArray(c.workers)) lists.push({ path: ['workers'], workers: c.workers });
  if (Array.isArray(c.pools)) {
    for (const [pi, p] of c.pools.entries()) {
      if (p && typeof p === 'object') lists.push({ path: ['pools', pi, 'workers'], workers: (p as { workers?: unknown }).workers });
    }
  }
  const addresses = new Set<unknown>();
  // Cluster names are Envoy's, global across pools. Two workers on one cluster would be one set of
  // hosts that kvgate counts as two: twice the in-flight limit, and two KV caches it believes apart
  // while Envoy spreads both over the same hosts.
  const clusterOwner = new Map<unknown, unknown>();
  for (const { path, workers } of lists) {
    if (!Array.isArray(workers)) continue;
    for (const [i, w] of (workers as Array<Partial_ & { id?: unknown }>).entries()) {
      if (!w || typeof w !== 'object') continue;
      if (protocol === 'cluster_header' && w.cluster === undefined) {
        ctx.addIssue({ code: 'custom', path: [...path, i, 'cluster'], message: 'required with routing.protocol cluster_header' });
      }
      if (protocol === 'cluster_header' && typeof w.cluster === 'string') {
        const owner = clusterOwner.get(w.cluster);
        if (owner !== undefined && owner !== w.id) {
          ctx.addIssue({
            code: 'custom',
            path: [...path, i, 'cluster'],
            message: `cluster "${w.cluster}" is already worker "${String(owner)}"'s: kvgate keeps each worker's load and KV cache apart, so give each worker its own cluster (one Envoy cluster per GPU worker)`,
          });
        }
        if (owner === undefined) clusterOwner.set(w.cluster, w.id);
      }
      if (protocol === 'endpoint_picker') {
        if (w.address === undefined) {
          ctx.addIssue({ code: 'custom', path: [...path, i, 'address'], message: 'required with routing.protocol endpoint_picker' });
        } else if (addresses.has(w.address)) {
          ctx.addIssue({ code: 'custom', path: [...path, i, 'address'], message: `duplicate address "${String(w.address)}"` });
        }
        if (w.address !== undefined) addresses.add(w.address);
      }
    }
  }
}

/**
 * Both forms become `pools`; `workers` stays as every worker of every pool, in config order. In
 * endpoint_picker mode a worker needs no Envoy cluster; its id stands in for it in traces and logs.
 */
function normalize(c: RawConfig) {
  const { workers, pools, default_pool, adapters, ...rest } = c;
  const raw: RawPoolConfig[] = pools ?? [{ name: DEFAULTS.pool, workers: workers ?? [], ...(adapters ? { adapters } : {}) }];
  const all = raw.map((p) => ({ ...p, workers: p.workers.map((w) => ({ ...w, cluster: w.cluster ?? w.id })) }));
  return {
    ...rest,
    pools: all,
    default_pool: default_pool ?? all[0]!.name,
    workers: all.flatMap((p) => p.workers),
  };
}

export const configSchema = configObject
  .superRefine(
    (c, ctx) => {
      checkShape(c, ctx);
      checkProtocol(c, ctx);
    },
    { when: (payload) => typeof payload.value === 'object' && payload.value !== null },
  )
  .transform(normalize);

export type Config = z.output<typeof configSchema>;
export type PoolConfig = Config['pools'][number];
export type WorkerConfig = PoolConfig['workers'][number];
