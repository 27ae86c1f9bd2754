/**
 * The Redis store's key layout and its typed script calls: the one place that knows where each
 * fact lives in Redis, and how each script's KEYS and arguments are laid out and its reply read.
 * The Lua itself is in ./redis-scripts.ts.
 *
 * Key layout. Every key of a pool shares the hash tag `{<pool>}`, so one script's keys live on one
 * Redis Cluster slot:
 *   <prefix>:{<pool>}:a:<key>      affinity: the worker id holding the session's KV cache (PX = TTL)
 *   <prefix>:{<pool>}:s            hash: worker id → state (absent = healthy)
 *   <prefix>:{<pool>}:f:<worker>   sorted set: in-flight lease "<id>|<key>" → expiry (ms, Redis clock)
 *   <prefix>:{<pool>}:bh:<worker>  hash: block id → when the worker's holding of it lapses (ms), and
 *                                  one field `~encoding` that keeps it a hash table and says whether
 *                                  a match may search it (DECIDE_LUA)
 *   <prefix>:{<pool>}:br:<worker>  sorted set: the same blocks by recency, trimmed (both) to capacity
 *   <prefix>:{<pool>}:ws:<worker>  sorted set: the worker's sessions → when their affinity lapses (ms)
 *   <prefix>:{<pool>}:sig          hash: worker id → JSON of its last scrape (`StoredScrape`)
 *   <prefix>:{<pool>}:gates        sorted set: live gate replica ids → expiry (ms)
 *   <prefix>:{<pool>}:offload      stream: one entry per migrated session (session, from, to, reason, time)
 *   <prefix>:{<pool>}:alive        written once per pool; gone after a reconnect = Redis lost its data
 *   <prefix>:{<pool>}:lock:<name>  a lapsing lock (SET NX PX)
 *   <prefix>:{<pool>}:r:<hash>     the worker that produced a stored response (Responses API; PX = TTL)
 *   <prefix>:readiness-probe       never written: one server's readiness check DELs it (RedisStore.ping)
 *
 * Prompt blocks were once a hash per block (`b:<block>`: worker → lapse time) beside the recency
 * set (then `bw:<worker>`). Now the holdings are a hash per worker: a decision passes n worker keys
 * instead of m block keys, finds each worker's leading run with a few HMGETs instead of m
 * HGETALLs, and a commit writes one variadic HSET instead of an HSET and a PEXPIRE per block; a
 * trim past capacity deletes from the worker's own hash inside the script, not with HDELs on block
 * keys afterwards. Both keys got new names, so replicas of the two layouts never touch each
 * other's prefix keys (a shared recency set would leave holdings no trim ever removes): during a
 * rolling upgrade they still share affinities, leases, states and signals, but not prefix hints,
 * and the old keys lapse within `prefix.ttl_s`.
 */
import type { Result } from 'ioredis';
import type { Preconditions } from '../routing/types.js';
import type { RedisClient } from './redis-connection.js';
import { COLD_SESSIONS_LUA, DECIDE_LUA, HEARTBEAT_LUA, MIGRATE_LUA, PUBLISH_SIGNALS_LUA, READ_SIGNALS_LUA, RENEW_LUA, RESTORE_LEASES_LUA, WRITE_BACK_LUA } from './redis-scripts.js';

// ioredis's own typed declarations for the commands `defineScripts` adds: clients, clusters and
// pipelines all get them (RedisCommander is what each of them implements).
declare module 'ioredis' {
  interface RedisCommander<Context> {
    /**
     * DECIDE_LUA; the key count comes first (it varies with the pool and the prompt). The keys and
     * the block ids go as arrays: ioredis flattens arguments one level (Command's `args.flat()`).
     */
    kvgateDecide(numKeys: number, keys: readonly string[], spec: string, blocks: string | readonly string[]): Result<string, Context>;
    /** RENEW_LUA: the members it added back (they had lapsed or were gone). */
    kvgateRenew(inflight: string, leaseTtlMs: number, ...members: string[]): Result<string[], Context>;
    kvgateRestoreLeases(inflight: string, leaseTtlMs: number, ...members: string[]): Result<number, Context>;
    kvgatePublishSignals(signals: string, worker: string, signalsJson: string, error: string): Result<number, Context>;
    kvgateReadSignals(signals: string): Result<[number, string[]], Context>;
    kvgateHeartbeat(gates: string, gateId: string, ttlMs: number): Result<string[], Context>;
    /** MIGRATE_LUA; the key count comes first (it varies with the moves). */
    kvgateMigrate(numKeys: number, ...keysThenSpec: string[]): Result<string, Context>;
    kvgateColdSessions(sessions: string, limit: number): Result<[string[], number], Context>;
    /** WRITE_BACK_LUA; the key count comes first (two keys per affinity). */
    kvgateWriteBack(numKeys: number, keysThenArgs: readonly string[]): Result<Array<string | number>, Context>;
  }
}

/** Registers every script on a client (EVALSHA, with EVAL when Redis does not have it yet). */
export function defineScripts(redis: RedisClient): void {
  redis.defineCommand('kvgateDecide', { lua: DECIDE_LUA });
  redis.defineCommand('kvgateRenew', { numberOfKeys: 1, lua: RENEW_LUA });
  redis.defineCommand('kvgateRestoreLeases', { numberOfKeys: 1, lua: RESTORE_LEASES_LUA });
  redis.defineCommand('kvgatePublishSignals', { numberOfKeys: 1, lua: PUBLISH_SIGNALS_LUA });
  redis.defineCommand('kvgateReadSignals', { numberOfKeys: 1, lua: READ_SIGNALS_LUA });
  redis.defineCommand('kvgateHeartbeat', { numberOfKeys: 1, lua: HEARTBEAT_LUA });
  redis.defineCommand('kvgateMigrate', { lua: MIGRATE_LUA });
  redis.defineCommand('kvgateColdSessions', { numberOfKeys: 1, lua: COLD_SESSIONS_LUA });
  redis.defineCommand('kvgateWriteBack', { lua: WRITE_BACK_LUA });
}

/** The keys of one pool (see the layout above). */
export class PoolKeys {
  readonly tag: string;
  constructor(
    keyPrefix: string,
    readonly pool: string,
  ) {
    this.tag = `${keyPrefix}:{${pool}}`;
  }
  affinity(key: string): string {
    return `${this.tag}:a:${key}`;
  }
  get states(): string {
    return `${this.tag}:s`;
  }
  inflight(worker: string): string {
    return `${this.tag}:f:${worker}`;
  }
  /** `inflight` of each worker, built once per workers array (a pool's list changes rarely). */
  inflightKeys(workers: readonly string[]): readonly string[] {
    return this.workerKeys(workers).inflight;
  }
  /** `holdings` of each worker, built once per workers array. */
  holdingsKeys(workers: readonly string[]): readonly string[] {
    return this.workerKeys(workers).holdings;
  }
  /** `live` of each worker, built once per workers array. */
  liveKeys(workers: readonly string[]): readonly string[] {
    return this.workerKeys(workers).live;
  }
  private workerKeys(workers: readonly string[]): WorkerKeys {
    if (workers !== this.lastWorkers) {
      this.lastKeys = { inflight: workers.map((w) => this.inflight(w)), holdings: workers.map((w) => this.holdings(w)), live: workers.map((w) => this.live(w)) };
      this.lastWorkers = workers;
    }
    return this.lastKeys;
  }
  private lastWorkers: readonly string[] | undefined;
  private lastKeys: WorkerKeys = { inflight: [], holdings: [], live: [] };
  /** The prompt blocks the worker holds, each with when its holding lapses (see the layout above). */
  holdings(worker: string): string {
    return `${this.tag}:bh:${worker}`;
  }
  /** The worker's blocks by recency, for its capacity. */
  recency(worker: string): string {
    return `${this.tag}:br:${worker}`;
  }
  sessions(worker: string): string {
    return `${this.tag}:ws:${worker}`;
  }
  /** The worker's live sessions of long prompts (sorted set: session key → when last routed, ms). */
  live(worker: string): string {
    return `${this.tag}:lv:${worker}`;
  }
  get signals(): string {
    return `${this.tag}:sig`;
  }
  get gates(): string {
    return `${this.tag}:gates`;
  }
  get offload(): string {
    return `${this.tag}:offload`;
  }
  get alive(): string {
    return `${this.tag}:alive`;
  }
  lock(name: string): string {
    return `${this.tag}:lock:${name}`;
  }
  response(hash: string): string {
    return `${this.tag}:r:${hash}`;
  }
}

interface WorkerKeys {
  inflight: readonly string[];
  holdings: readonly string[];
  live: readonly string[];
}

/** What a decision reads: a pool's workers, one key, one prompt. */
export interface DecideQuery {
  workers: readonly string[];
  /** The session's store key; undefined when the request has none. */
  key: string | undefined;
  blocks: readonly string[];
  /** Count each worker's live sessions routed within this many ms (`DecideReply.live`). */
  liveWindowMs?: number;
}

/**
 * Leases of the pool this replica released, removed by the script before it counts anything:
 * lease members by worker, each worker one of the query's (so its key is declared).
 */
export type Releases = ReadonlyMap<string, readonly string[]>;

/** What a commit writes, and the facts it checks first. */
export interface DecideCommit {
  worker: string;
  preconditions: Preconditions;
  affinityTtlMs: number;
  /** The lease's member in the worker's in-flight set (./store.ts `leaseMember`). */
  leaseMember: string;
  leaseTtlMs: number;
  prefixTtlMs: number;
  /**
   * A prefix the chosen worker was sent less than this long ago (ms) is not written again, only
   * the blocks past it (DECIDE_LUA); 0: every block of every commit is written.
   */
  freshMs: number;
  capacityBlocks: number;
  /** Redis time (ms) after which the commit must write nothing (0: no limit). */
  notAfter: number;
  /**
   * The session among the workers' live sessions (./store.ts `live`): true, counted on the chosen
   * worker as routed now; false, counted nowhere. Undefined: left as it was, and a session the
   * commit moves takes its count, if any, along.
   */
  live?: boolean;
}

export interface DecideReply {
  /** The commit's checks held and it wrote (always false for a read). */
  ok: boolean;
  /** The commit reached Redis after `notAfter` and wrote nothing. */
  late: boolean;
  /** Redis's clock when the script ran (ms). */
  now: number;
  affinity: string | undefined;
  /** What the affinity has left (ms); 0 when there is none or it has no expiry. */
  affinityTtlMs: number;
  /** The key's requests in flight on its affine worker. */
  keyInflight: number;
  /** In-flight leases per worker, in the query's worker order. */
  inflight: number[];
  /** Recorded worker states (absent = healthy). */
  states: Map<string, string>;
  /**
   * Leading blocks of the prompt each configured worker holds (absent = none), as the script found
   * them before a commit wrote: what its prefix check weighed. The store learns every other
   * worker's depth from it; the chosen worker's it records itself (the whole prompt, with its capacity).
   */
  depth: Map<string, number>;
  /** Live sessions per worker, in the query's worker order, when the query asked (`liveWindowMs`). */
  live: number[] | undefined;
}

/** The script's JSON argument (DECIDE_LUA reads exactly these fields). */
interface DecideSpec {
  mode: 'read' | 'commit';
  keyed: boolean;
  workers: readonly string[];
  leaseKey: string;
  /** The length of every block id, passed joined as one argument; 0: one argument each. */
  idWidth: number;
  /** Lease members to remove first: [worker index (1-based), members]. */
  released?: Array<[number, readonly string[]]>;
  chosen?: number;
  expectedAffinity?: string;
  below?: Array<{ worker: number; limit: number }>;
  atOrAbove?: Array<{ worker: number; limit: number }>;
  states?: Array<{ worker: string; allowed: readonly string[] }>;
  prefix?: { atMost: number; over: number[] };
  affinityTtlMs?: number;
  leaseMember?: string;
  leaseTtlMs?: number;
  prefixTtlMs?: number;
  freshMs?: number;
  capacityBlocks?: number;
  notAfter?: number;
  /** The workers' live-session keys are declared (after the holdings). */
  liveKeys?: boolean;
  liveWindowMs?: number;
  live?: boolean;
}

/** The script's JSON reply (cjson writes an empty table as `{}`, hence the unions). */
interface RawDecideReply {
  ok: boolean;
  late: boolean;
  now: number;
  affinity: string;
  affinityTtl?: number;
  keyInflight: number;
  inflight?: number[] | Record<string, never>;
  states?: Record<string, string>;
  depth?: Record<string, number>;
  live?: number[] | Record<string, never>;
}

/** The KEYS of DECIDE_LUA, in the order its header lists them. */
export function decideKeys(keys: PoolKeys, q: DecideQuery, commit?: DecideCommit): string[] {
  const expected = commit?.preconditions.affinity;
  const inflight = keys.inflightKeys(q.workers);
  const n = inflight.length;
  // Pushed, not preallocated: a preallocated array is holey, and ioredis's `flat()` and
  // argument walk take slower paths over holey arrays.
  const k: string[] = [q.key === undefined ? keys.states : keys.affinity(q.key), keys.states];
  for (let i = 0; i < n; i++) k.push(inflight[i]!);
  k.push(commit && q.blocks.length > 0 ? keys.recency(commit.worker) : keys.states);
  k.push(commit ? keys.sessions(commit.worker) : keys.states);
  k.push(expected !== undefined && commit ? keys.sessions(expected) : keys.states);
  if (q.blocks.length > 0) {
    const holdings = keys.holdingsKeys(q.workers);
    for (let i = 0; i < n; i++) k.push(holdings[i]!);
  }
  if (declaresLive(q, commit)) {
    const live = keys.liveKeys(q.workers);
    for (let i = 0; i < n; i++) k.push(live[i]!);
  }
  return k;
}

/**
 * Whether a decision touches the workers' live sessions: it counts them, or its commit weighs its
 * session or moves it (the count goes along).
 */
function declaresLive(q: DecideQuery, commit?: DecideCommit): boolean {
  if (q.liveWindowMs !== undefined) return true;
  if (!commit || q.key === undefined) return false;
  const from = commit.preconditions.affinity;
  return commit.live !== undefined || (from !== undefined && from !== commit.worker);
}

/**
 * Reads a pool's state for one key and prompt, or (with `commit`) checks the decision's
 * preconditions and, when they hold, records affinity, lease and prompt blocks, atomically.
 * `released` leases are removed first, whatever the commit's outcome. A worker of the commit or
 * of `released` that is not in `q.workers` throws.
 */
export function decide(redis: RedisClient, keys: PoolKeys, q: DecideQuery, commit?: DecideCommit, released?: Releases): Promise<DecideReply> {
  // Not async: one promise fewer per decision. A bad argument still comes back as a rejection.
  let spec: string;
  const packed = packBlocks(q.blocks);
  try {
    spec = decideSpec(keys, q, packed.width, commit, released);
  } catch (err) {
    return Promise.reject(err as Error);
  }
  const k = decideKeys(keys, q, commit);
  // ioredis flattens its arguments (and spreads them twice on the way): keys and block ids go as arrays.
  return redis.kvgateDecide(k.length, k, spec, packed.arg).then((json) => readDecideReply(q, json));
}

const NOT_ASCII = /[^\x00-\x7f]/;

/**
 * The prompt's block ids as DECIDE_LUA takes them: joined into one argument, with `width` the
 * length in bytes of each, when they all have one length and are ASCII (Lua cuts the joined
 * string by bytes); else `width` 0 and one argument each.
 */
export function packBlocks(blocks: readonly string[]): { width: number; arg: string | readonly string[] } {
  const m = blocks.length;
  const w = m > 0 ? blocks[0]!.length : 0;
  if (w === 0) return { width: 0, arg: blocks };
  for (let i = 1; i < m; i++) if (blocks[i]!.length !== w) return { width: 0, arg: blocks };
  const joined = blocks.join('');
  // One UTF-8 byte per UTF-16 unit only when every character is ASCII.
  return NOT_ASCII.test(joined) ? { width: 0, arg: blocks } : { width: w, arg: joined };
}

/** DECIDE_LUA's JSON argument. */
function decideSpec(keys: PoolKeys, q: DecideQuery, width: number, commit?: DecideCommit, released?: Releases): string {
  const spec: DecideSpec = { mode: commit ? 'commit' : 'read', keyed: q.key !== undefined, workers: q.workers, leaseKey: q.key ?? '', idWidth: width };
  if (declaresLive(q, commit)) {
    spec.liveKeys = true;
    if (q.liveWindowMs !== undefined) spec.liveWindowMs = q.liveWindowMs;
    if (commit?.live !== undefined) spec.live = commit.live;
  }
  if (released && released.size > 0) {
    spec.released = [];
    for (const [worker, members] of released) {
      const i = q.workers.indexOf(worker) + 1;
      if (i === 0) throw new Error(`released worker ${worker} is not in pool ${keys.pool}`);
      if (members.length > 0) spec.released.push([i, members]);
    }
  }
  if (commit) {
    const index = (w: string) => q.workers.indexOf(w) + 1;
    const p = commit.preconditions;
    const chosen = index(commit.worker);
    if (chosen === 0) throw new Error(`worker ${commit.worker} is not in pool ${keys.pool}`);
    Object.assign(spec, {
      chosen,
      expectedAffinity: p.affinity ?? '',
      below: p.below.filter((b) => index(b.worker) > 0).map((b) => ({ worker: index(b.worker), limit: b.limit })),
      atOrAbove: p.atOrAbove.filter((g) => index(g.worker) > 0).map((g) => ({ worker: index(g.worker), limit: g.limit })),
      states: p.states.map((s) => ({ worker: s.worker, allowed: s.in })),
      ...(p.prefix ? { prefix: { atMost: p.prefix.atMost, over: p.prefix.over.map(index).filter((i) => i > 0) } } : {}),
      affinityTtlMs: commit.affinityTtlMs,
      leaseMember: commit.leaseMember,
      leaseTtlMs: commit.leaseTtlMs,
      prefixTtlMs: commit.prefixTtlMs,
      freshMs: commit.freshMs,
      capacityBlocks: commit.capacityBlocks,
      notAfter: commit.notAfter,
    } satisfies Partial<DecideSpec>);
  }
  return JSON.stringify(spec);
}

function readDecideReply(q: DecideQuery, json: string): DecideReply {
  const raw = JSON.parse(json) as RawDecideReply;
  return {
    ok: raw.ok === true,
    late: raw.late === true,
    now: Number(raw.now),
    affinity: raw.affinity === '' ? undefined : raw.affinity,
    affinityTtlMs: Math.max(0, Number(raw.affinityTtl) || 0),
    keyInflight: Number(raw.keyInflight) || 0,
    inflight: q.workers.map((_, i) => Number((Array.isArray(raw.inflight) ? raw.inflight[i] : 0) ?? 0)),
    states: new Map(Object.entries(raw.states ?? {})),
    depth: new Map(Object.entries(raw.depth ?? {}).map(([w, d]) => [w, Number(d)])),
    // A late commit's reply counts nothing (it returned before the count).
    live: q.liveWindowMs === undefined || raw.live === undefined ? undefined : q.workers.map((_, i) => Number((Array.isArray(raw.live) ? raw.live[i] : 0) ?? 0)),
  };
}

/** Moves sessions still on `from` to their targets, recording an offload event each (MIGRATE_LUA). */
export async function migrate(
  redis: RedisClient,
  keys: PoolKeys,
  from: string,
  moves: ReadonlyArray<{ key: string; to: string }>,
  reason: string,
  opts: { defaultTtlMs: number; streamMaxLen: number },
): Promise<{ now: number; moved: Array<{ key: string; to: string; ttlMs: number }> }> {
  const k = [keys.offload, keys.sessions(from), keys.live(from), ...moves.flatMap((m) => [keys.affinity(m.key), keys.sessions(m.to), keys.live(m.to)])];
  const spec = { from, reason, defaultTtlMs: opts.defaultTtlMs, streamMaxLen: opts.streamMaxLen, moves: moves.map((m) => ({ key: m.key, to: m.to })) };
  const raw = JSON.parse(await redis.kvgateMigrate(k.length, ...k, JSON.stringify(spec))) as { now: number; moved: Array<{ key: string; to: string; ttl?: number }> | Record<string, never> };
  return { now: Number(raw.now), moved: (Array.isArray(raw.moved) ? raw.moved : []).map((m) => ({ key: m.key, to: m.to, ttlMs: Math.max(0, Number(m.ttl) || 0) })) };
}

/** An affinity to write back (WRITE_BACK_LUA), with what it has left. */
export interface WriteBack {
  key: string;
  worker: string;
  ttlMs: number;
}

/** WRITE_BACK_LUA's key count and its keys then arguments, to call it alone or in a pipeline. */
export function writeBackCall(keys: PoolKeys, entries: readonly WriteBack[]): [number, string[]] {
  const k: string[] = [];
  const a: string[] = [];
  for (const e of entries) {
    k.push(keys.affinity(e.key), keys.sessions(e.worker));
    a.push(e.key, e.worker, String(Math.max(1, Math.floor(e.ttlMs))));
  }
  return [k.length, [...k, ...a]];
}

/** WRITE_BACK_LUA's reply: per affinity, the worker Redis holds for it and what it has left (ms). */
export function readWriteBack(reply: ReadonlyArray<string | number>): Array<{ worker: string; ttlMs: number } | undefined> {
  const out: Array<{ worker: string; ttlMs: number } | undefined> = [];
  for (let i = 0; i + 1 < reply.length; i += 2) {
    const worker = String(reply[i]);
    out.push(worker === '' ? undefined : { worker, ttlMs: Math.max(0, Number(reply[i + 1])) });
  }
  return out;
}

/** A worker's sessions, coldest first, and how many live ones it has (expired ones dropped first). */
export async function coldSessions(redis: RedisClient, keys: PoolKeys, worker: string, limit: number): Promise<{ keys: string[]; total: number }> {
  const [list, total] = await redis.kvgateColdSessions(keys.sessions(worker), limit);
  return { keys: list, total: Number(total) };
}

/**
 * One worker's last scrape as stored in the `sig` hash. The short field names are the stored
 * format, kept so replicas of different versions read each other's records.
 */
export interface StoredScrape {
  /** The signals as the JSON text they were published in (a string); an older gate stored them decoded, where cjson wrote an empty object as an empty array. */
  s?: unknown;
  /** When they were scraped (ms, Redis clock); -1 when never. */
  t?: number;
  /** Failed scrapes since the last good one. */
  f?: number;
  /** The last failure's message. */
  e?: string;
}

export async function publishSignals(redis: RedisClient, keys: PoolKeys, worker: string, update: { signalsJson: string } | { error: string }): Promise<void> {
  await redis.kvgatePublishSignals(keys.signals, worker, 'signalsJson' in update ? update.signalsJson : '', 'error' in update ? update.error : '');
}

/** Every worker's stored scrape (unparsed) and Redis's clock when read. */
export async function readSignals(redis: RedisClient, keys: PoolKeys): Promise<{ now: number; records: Map<string, string> }> {
  const [now, pairs] = await redis.kvgateReadSignals(keys.signals);
  const records = new Map<string, string>();
  for (let i = 0; i + 1 < pairs.length; i += 2) records.set(pairs[i]!, pairs[i + 1]!);
  return { now: Number(now), records };
}

export async function heartbeat(redis: RedisClient, keys: PoolKeys, gateId: string, ttlMs: number): Promise<string[]> {
  return redis.kvgateHeartbeat(keys.gates, gateId, ttlMs);
}
