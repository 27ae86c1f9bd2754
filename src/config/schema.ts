/**
 * The schema of kvgate's YAML config. One zod schema is the source of both validation and the
 * `Config` type. Unknown keys are rejected so a typo never silently falls back to a default.
 */
import { z } from 'zod';
import { ENGINES } from '../signals/metric-names.js';
import { DEFAULTS } from './defaults.js';

const headerName = z
  .string()
  .min(1)
  .regex(/^[a-z0-9!#$%&'*+.^_`|~-]+$/, 'must be a lower-case HTTP header name');

const workerSchema = z.strictObject({
  /** Stable id used for affinity; renaming a worker drops its sessions' affinity. */
  id: z.string().min(1).regex(/^[A-Za-z0-9._:-]+$/, 'letters, digits and . _ : - only'),
  /** The Envoy cluster name that kvgate puts in the routing header. */
  cluster: z.string().min(1),
  max_inflight: z.number().int().positive().optional(),
  /** KV tokens the worker holds; sizes its share of the prefix index. */
  kv_capacity_tokens: z.number().int().positive().optional(),
  /** The model server's Prometheus endpoint; without it the worker is judged by in-flight counts alone. */
  metrics_url: z.url({ protocol: /^https?$/ }).optional(),
  /** Which metric names the endpoint uses. */
  engine: z.enum(ENGINES).default('vllm'),
  /** A DCGM exporter endpoint for this worker's GPU (framebuffer, temperature), if any. */
  dcgm_url: z.url({ protocol: /^https?$/ }).optional(),
  /** Count raw GPU framebuffer use as memory pressure (off: vLLM preallocates most of the GPU). */
  memory_pressure_from_framebuffer: z.boolean().default(false),
});

export const configSchema = z.strictObject({
  routing: z
    .strictObject({
      header: headerName.default(DEFAULTS.routingHeader),
      shed_status: z.union([z.literal(429), z.literal(503)]).default(DEFAULTS.shedStatus),
      retry_after_s: z.number().int().nonnegative().default(DEFAULTS.retryAfterS),
      request_body_mode: z.enum(['buffered', 'streamed', 'none']).default(DEFAULTS.requestBodyMode),
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
      block_chars: z.number().int().min(16).max(65536).default(DEFAULTS.prefixBlockChars),
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
    })
    .prefault({}),
  affinity: z
    .strictObject({
      ttl_s: z.number().int().positive().default(DEFAULTS.affinityTtlS),
      max_inflight_per_session: z.number().int().positive().default(DEFAULTS.maxInflightPerSession),
    })
    .prefault({}),
  limits: z
    .strictObject({
      max_body_bytes: z.number().int().positive().default(DEFAULTS.maxBodyBytes),
      malformed_body: z.enum(['forward', 'reject']).default(DEFAULTS.malformedBody),
      max_inflight: z.number().int().positive().default(DEFAULTS.maxInflight),
      stream_idle_s: z.number().positive().default(DEFAULTS.streamIdleS),
    })
    .prefault({}),
  leases: z.strictObject({ ttl_s: z.number().int().min(3).default(DEFAULTS.leaseTtlS) }).prefault({}),
  store: z
    .strictObject({
      timeout_ms: z.number().int().positive().default(DEFAULTS.storeTimeoutMs),
      refresh_ms: z.number().int().positive().default(DEFAULTS.storeRefreshMs),
      key_prefix: z.string().min(1).regex(/^[A-Za-z0-9_.:-]+$/).default(DEFAULTS.storeKeyPrefix),
    })
    .prefault({}),
  signals: z
    .strictObject({
      interval_ms: z.number().int().min(10).default(DEFAULTS.scrapeIntervalMs),
      timeout_ms: z.number().int().positive().default(DEFAULTS.scrapeTimeoutMs),
      stale_after_ms: z.number().int().positive().default(DEFAULTS.staleAfterMs),
      failures_down: z.number().int().positive().default(DEFAULTS.scrapeFailuresDown),
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
      enabled: z.boolean().default(true),
      interval_ms: z.number().int().positive().default(DEFAULTS.migrationIntervalMs),
      fraction: z.number().gt(0).max(1).default(DEFAULTS.migrationFraction),
      max_sessions: z.number().int().positive().default(DEFAULTS.migrationMaxSessions),
      stream_maxlen: z.number().int().positive().default(DEFAULTS.offloadStreamMaxLen),
    })
    .prefault({}),
  workers: z
    .array(workerSchema)
    .min(1, 'at least one worker is required')
    .superRefine((workers, ctx) => {
      const seen = new Set<string>();
      for (const [i, w] of workers.entries()) {
        if (seen.has(w.id)) ctx.addIssue({ code: 'custom', path: [i, 'id'], message: `duplicate worker id "${w.id}"` });
        seen.add(w.id);
      }
    }),
});

export type Config = z.infer<typeof configSchema>;
export type WorkerConfig = z.infer<typeof workerSchema>;
