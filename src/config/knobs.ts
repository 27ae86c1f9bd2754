/**
 * Per-route knobs: routing settings that platform teams set in Envoy's config instead of kvgate's
 * YAML. This module validates them and folds them into a request's config; src/extproc/ only
 * extracts the raw values from the ext_proc call.
 *
 * Two layers reach the gate, and the more specific one wins, knob by knob:
 *
 *  1. route: gRPC initial metadata `x-kvgate-<knob>` on the ext_proc call, from
 *     `ExtProcPerRoute.overrides.grpc_initial_metadata` on the route or its virtual host. Envoy
 *     merges those itself before the call starts (virtual host, then route, replacing by key, on
 *     top of the filter's own `grpc_service.initial_metadata`), so one value per knob arrives and
 *     it is already the route's value where the route sets one.
 *  2. host: `metadata_context.filter_metadata["kvgate"]`, dynamic metadata Envoy forwards when the
 *     filter lists `kvgate` in `metadata_options.forwarding_namespaces.untyped`. Dynamic metadata
 *     is written by filters that run for the whole listener (set_metadata has no per-route form),
 *     so it carries the wider, host-level settings.
 *  3. the gate's config: the pool's settings, then the top-level ones.
 *
 * A knob that is unknown or has an invalid value is ignored as if unset (the next layer applies)
 * and reported as a problem for the caller to log; nothing here throws on input.
 */
import { z } from 'zod';
import { DEFAULTS } from './defaults.js';
import { CLASS_NAME, POOL_NAME, blockChars, headerName, type Config } from './schema.js';
import { POLICY_MODES, type PolicyMode } from './vocabulary.js';

export interface Knobs {
  /** The worker pool (must be a pool of the config). */
  pool?: string;
  policy?: PolicyMode;
  /** The request header that carries the session id. */
  session_header?: string;
  /** Per-worker in-flight threshold for this route's requests (replaces the workers' own limits). */
  max_inflight?: number;
  shed_status?: 429 | 503;
  retry_after_s?: number;
  /** Prefix block size in characters. */
  block_chars?: number;
  /**
   * The class of service of this route's requests (a class of the config's `classes.levels`; the
   * gate checks that). Set, it wins over the request's own class headers.
   */
  class?: string;
}

export type KnobName = keyof Knobs;
export type KnobLayer = 'route' | 'host';

export interface KnobProblem {
  layer: KnobLayer;
  /** The key as it arrived (`x-kvgate-…` metadata key, or the metadata_context field). */
  key: string;
  /** The value as it arrived, shortened for logs. */
  value: string;
  reason: string;
}

export interface KnobReading {
  knobs: Knobs;
  /** Which layer each set knob came from (for logs and the debug endpoint). */
  from: Partial<Record<KnobName, KnobLayer>>;
  problems: KnobProblem[];
}

/** Metadata carries strings; YAML and Struct values may be numbers already. */
const fromDigits = (v: unknown): unknown => (typeof v === 'string' && /^\s*\d{1,9}\s*$/.test(v) ? Number(v) : v);
const integer = (min: number, max: number) => z.preprocess(fromDigits, z.number().int().min(min).max(max));

const SCHEMAS: { readonly [K in KnobName]-?: z.ZodType<NonNullable<Knobs[K]>> } = {
  pool: z.string().regex(POOL_NAME, 'letters, digits and . _ : - only'),
  policy: z.enum(POLICY_MODES as [PolicyMode, ...PolicyMode[]]),
  // Header names are case-insensitive and Envoy hands them to kvgate lower-cased.
  session_header: z.preprocess((v) => (typeof v === 'string' ? v.trim().toLowerCase() : v), headerName),
  max_inflight: integer(1, 1_000_000),
  shed_status: z.preprocess(fromDigits, z.union([z.literal(429), z.literal(503)])),
  retry_after_s: integer(0, 3600),
  block_chars: z.preprocess(fromDigits, blockChars),
  class: z.preprocess((v) => (typeof v === 'string' ? v.trim().toLowerCase() : v), z.string().regex(CLASS_NAME, 'not a class name')),
};

export const KNOB_NAMES = Object.keys(SCHEMAS) as KnobName[];

/** The gRPC metadata key of a knob: the prefix, then the name with dashes (`x-kvgate-max-inflight`). */
export function metadataKey(knob: KnobName): string {
  return `${DEFAULTS.knobMetadataPrefix}${knob.replaceAll('_', '-')}`;
}

/**
 * Whether a gRPC metadata key (lower-case) is in the knobs' namespace: the only entries the route
 * layer reads. Every other entry of the call (content-type, traceparent, …) is no knob and no problem.
 */
export function isKnobMetadataKey(key: string): boolean {
  return key.startsWith(DEFAULTS.knobMetadataPrefix);
}

const BY_METADATA_KEY = new Map(KNOB_NAMES.map((k) => [metadataKey(k), k]));
const BY_CONTEXT_KEY = new Map(KNOB_NAMES.map((k) => [k as string, k]));

/** Most entries read per layer: Envoy sends a handful; more is a flood and the rest are ignored. */
const MAX_ENTRIES = 64;

/**
 * Reads both layers. `metadata` is gRPC metadata entries of the call, any of them (only those
 * `isKnobMetadataKey` names are read); `context` is the `kvgate` namespace of metadata_context, as
 * plain values.
 */
export function readKnobs(input: { metadata?: Iterable<[string, string]>; context?: Readonly<Record<string, unknown>> }): KnobReading {
  const reading: KnobReading = { knobs: {}, from: {}, problems: [] };
  // Host first, so the route's valid values overwrite it knob by knob.
  if (input.context) readLayer(reading, 'host', Object.entries(input.context), (key) => BY_CONTEXT_KEY.get(key));
  if (input.metadata) {
    const ours = [...input.metadata].filter(([k]) => isKnobMetadataKey(k.toLowerCase()));
    readLayer(reading, 'route', ours, (key) => BY_METADATA_KEY.get(key.toLowerCase()));
  }
  return reading;
}

function readLayer(reading: KnobReading, layer: KnobLayer, entries: ReadonlyArray<[string, unknown]>, nameOf: (key: string) => KnobName | undefined): void {
  for (const [i, [key, raw]] of entries.entries()) {
    if (i >= MAX_ENTRIES) {
      reading.problems.push({ layer, key: '…', value: '', reason: `more than ${MAX_ENTRIES} entries; the rest are ignored` });
      return;
    }
    const name = nameOf(key);
    if (name === undefined) {
      reading.problems.push({ layer, key, value: show(raw), reason: `unknown knob (known: ${KNOB_NAMES.map((k) => (layer === 'route' ? metadataKey(k) : k)).join(', ')})` });
      continue;
    }
    const parsed = SCHEMAS[name].safeParse(raw);
    if (!parsed.success) {
      reading.problems.push({ layer, key, value: show(raw), reason: parsed.error.issues.map((i) => i.message).join('; ') });
      continue;
    }
    (reading.knobs as Record<KnobName, unknown>)[name] = parsed.data;
    reading.from[name] = layer;
  }
}

function show(v: unknown): string {
  let s: string;
  try {
    s = typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
  } catch {
    s = String(v);
  }
  return s.length > 64 ? `${s.slice(0, 64)}…` : s;
}

/**
 * The config one request runs under: the gate's config with this request's knobs in place
 * (policy, session header, block size, shed answer). The pool knob and the in-flight threshold
 * are applied by the gate where it picks the pool and builds the workers' views.
 */
export function applyKnobs(config: Config, knobs: Knobs): Config {
  const { policy, session_header, shed_status, retry_after_s, block_chars } = knobs;
  if (policy === undefined && session_header === undefined && shed_status === undefined && retry_after_s === undefined && block_chars === undefined) {
    return config;
  }
  return {
    ...config,
    routing: {
      ...config.routing,
      ...(policy !== undefined ? { policy } : {}),
      ...(shed_status !== undefined ? { shed_status } : {}),
      ...(retry_after_s !== undefined ? { retry_after_s } : {}),
    },
    keys: session_header !== undefined ? { ...config.keys, session_header } : config.keys,
    prefix: block_chars !== undefined ? { ...config.prefix, block_chars } : config.prefix,
  };
}
