/**
 * Micro-benchmarks of the gate's hot path, each group against a baseline measured in the same
 * run so results read as ratios (machines differ; ratios travel):
 *
 *   keying/<size>     understand() on a chat body        vs  JSON.parse of the same body
 *   hashing/<size>    chained block hashes of the prompt  vs  one xxhash64 call over the whole prompt
 *   decide/<n>        decide() over n workers             vs  a one-pass least-loaded pick
 *   store             MemoryStore commit + release        vs  the bare Map/Set operations it implies
 *   route/<size>      Gate.route + release, memory store  vs  JSON.parse of the same body
 *
 * Per KB (keying, hashing, route) and per candidate (decide) figures divide by the body size or
 * the worker count. Small operations run in batches inside one timed call, so timer resolution
 * does not swamp them; every figure is per operation.
 */
import { Bench, type Task } from 'tinybench';
import type { Config } from '../../config/schema.js';
import { Gate } from '../../gate/gate.js';
import { parseJsonBody } from '../../request/body.js';
import { chainedBlockHashes, initHashing, seedFor } from '../../request/hashing.js';
import { understand } from '../../request/keys.js';
import { canonicalPrompt } from '../../request/prompt.js';
import { promptBlocks } from '../../request/prompt-blocks.js';
import type { RequestInfo } from '../../request/request.js';
import { decide } from '../../routing/policy.js';
import { Rng } from '../../sim/rng.js';
import { MemoryStore } from '../../state/memory-store.js';
import { createLogger } from '../../telemetry/logger.js';
import { xxh } from '../../util/xxhash.js';
import { benchRequests, sizeLabel, type BenchRequest } from '../bodies.js';
import { benchConfig } from '../servers.js';
import { benchDecisionRequests, benchFleet, decisionInput, trivialLeastLoaded } from './decision-input.js';

export interface MicroOptions {
  /** Milliseconds of measuring per task (tinybench `time`). */
  timeMs: number;
  warmupMs: number;
  /** Minimum timed calls per task. */
  iterations: number;
  sizes: number[];
  candidates: number[];
  /** Only groups whose name starts with one of these (all when empty). */
  only: string[];
}

export const DEFAULT_MICRO: MicroOptions = {
  timeMs: 400,
  warmupMs: 100,
  iterations: 16,
  sizes: [2 * 1024, 32 * 1024, 400 * 1024],
  candidates: [4, 16, 64, 256],
  only: [],
};

/** A few milliseconds per task: proves the suite runs, measures nothing. */
export const QUICK_MICRO: MicroOptions = { ...DEFAULT_MICRO, timeMs: 5, warmupMs: 0, iterations: 2, sizes: [2 * 1024], candidates: [4, 16] };

export interface MicroRow {
  group: string;
  task: string;
  baseline: boolean;
  /** Median timed call divided by the operations in it. */
  ns_per_op: number;
  /** Relative margin of error of the timed calls, in percent. */
  rme_pct: number;
  samples: number;
  /** ns per KB of request body (keying, route) or of prompt text (hashing). */
  ns_per_kb: number | null;
  /** ns per worker considered (decide). */
  ns_per_candidate: number | null;
  /** ns_per_op over the group's baseline. */
  ratio: number;
}

interface TaskSpec {
  name: string;
  baseline?: boolean;
  /** Operations per call (batched small operations). */
  ops: number;
  fn: () => unknown;
}

interface GroupSpec {
  group: string;
  perKb?: number;
  perCandidate?: number;
  tasks: TaskSpec[];
}

function request(r: BenchRequest): RequestInfo {
  return { method: 'POST', path: '/v1/chat/completions', headers: new Map(r.headers), body: r.body };
}

/** A body of each key kind at this size: header session, body `user`, and none (prefix-keyed). */
function bodiesBySize(bytes: number): { header: RequestInfo; user: RequestInfo; prefix: RequestInfo; raw: Buffer } {
  const [header, user, prefix] = benchRequests(bytes, 4, 7);
  return { header: request(header!), user: request(user!), prefix: request(prefix!), raw: prefix!.body };
}

/**
 * The prefix-keyed chat body's conversation as an Anthropic Messages body (`system` + `messages`)
 * and as an OpenAI Responses body (`instructions` + `input` items): the same prompt through the
 * other two parsers, so their cost reads against chat's in the same group.
 */
function otherApis(chat: RequestInfo): { messages: RequestInfo; responses: RequestInfo } {
  const body = JSON.parse(chat.body!.toString('utf8')) as { model: string; messages: Array<{ role: string; content: string }> };
  const system = body.messages.filter((m) => m.role === 'system').map((m) => m.content).join('\n');
  const turns = body.messages.filter((m) => m.role !== 'system');
  const as = (path: string, b: object): RequestInfo => ({ ...chat, path, body: Buffer.from(JSON.stringify(b)) });
  return {
    messages: as('/v1/messages', { model: body.model, max_tokens: 256, system, messages: turns }),
    responses: as('/v1/responses', { model: body.model, instructions: system, input: turns.map((t) => ({ type: 'message', ...t })) }),
  };
}

function keyingGroups(cfg: Config, sizes: readonly number[]): GroupSpec[] {
  return sizes.map((bytes) => {
    const b = bodiesBySize(bytes);
    const other = otherApis(b.prefix);
    return {
      group: `keying/${sizeLabel(bytes)}`,
      perKb: b.raw.length / 1024,
      tasks: [
        { name: 'JSON.parse(body)', baseline: true, ops: 1, fn: () => JSON.parse(b.raw.toString('utf8')) },
        { name: 'understand: no session (prompt prefix key)', ops: 1, fn: () => understand(b.prefix, cfg) },
        { name: 'understand: session in body (user)', ops: 1, fn: () => understand(b.user, cfg) },
        { name: 'understand: session header', ops: 1, fn: () => understand(b.header, cfg) },
        { name: 'understand: the same prompt as a Messages body', ops: 1, fn: () => understand(other.messages, cfg) },
        { name: 'understand: the same prompt as a Responses body', ops: 1, fn: () => understand(other.responses, cfg) },
      ],
    };
  });
}

function hashingGroups(cfg: Config, sizes: readonly number[]): GroupSpec[] {
  return sizes.map((bytes) => {
    const parsed = parseJsonBody(bodiesBySize(bytes).raw);
    if (!parsed.ok) throw new Error('bench body does not parse');
    const text = canonicalPrompt(parsed.value) ?? '';
    const seed = seedFor('meta-llama/Llama-3.1-8B-Instruct');
    const bytesOfText = Buffer.from(text);
    const blockChars = cfg.prefix.block_chars;
    return {
      group: `hashing/${sizeLabel(bytes)}`,
      perKb: bytesOfText.length / 1024,
      tasks: [
        { name: 'xxh64 of the whole prompt, one call', baseline: true, ops: 1, fn: () => xxh().h64Raw(bytesOfText, seed) },
        { name: `chained block hashes, every ${blockChars}-char block`, ops: 1, fn: () => chainedBlockHashes(text, blockChars, Infinity, seed) },
        {
          name: `chained block hashes, first ${cfg.prefix.max_blocks} blocks (what a request matches)`,
          ops: 1,
          fn: () => chainedBlockHashes(text, blockChars, cfg.prefix.max_blocks, seed),
        },
        {
          name: `from the parsed body: canonical prompt, then its first ${cfg.prefix.max_blocks} blocks (the reference)`,
          ops: 1,
          fn: () => chainedBlockHashes(canonicalPrompt(parsed.value, blockChars * cfg.prefix.max_blocks) ?? '', blockChars, cfg.prefix.max_blocks, seed),
        },
        {
          name: `from the parsed body: one pass, no prompt text (the request path)`,
          ops: 1,
          fn: () => promptBlocks('openai', parsed.value, blockChars, cfg.prefix.max_blocks, seed),
        },
      ],
    };
  });
}

/** Results land here so the optimizer cannot drop a benchmarked call whose value is unused. */
let sink: unknown;
export function lastResult(): unknown {
  return sink;
}

/** Requests per timed call in the decision groups: enough that a call lasts well above timer resolution. */
const DECISIONS_PER_CALL = 64;

function decideGroups(counts: readonly number[]): GroupSpec[] {
  return counts.map((n) => {
    const rng = new Rng(n * 31 + 5);
    const fleet = benchFleet(n, rng);
    const reqs = benchDecisionRequests(fleet, DECISIONS_PER_CALL, rng);
    const affine = reqs.map((r) => decisionInput(fleet, { ...r, affinity: r.affinity ?? fleet[0]!.id }));
    const fresh = reqs.map((r) => decisionInput(fleet, { ...r, affinity: undefined }));
    const mixed = reqs.map((r) => decisionInput(fleet, r));
    const each = (inputs: ReturnType<typeof decisionInput>[]) => () => {
      for (const input of inputs) sink = decide(input);
    };
    return {
      group: `decide/${n} workers`,
      perCandidate: n,
      tasks: [
        {
          name: 'least-loaded pick, one pass',
          baseline: true,
          ops: DECISIONS_PER_CALL,
          fn: () => {
            for (let i = 0; i < DECISIONS_PER_CALL; i++) sink = trivialLeastLoaded(fleet);
          },
        },
        { name: 'decide: a quarter affine, the rest new', ops: DECISIONS_PER_CALL, fn: each(mixed) },
        { name: 'decide: affine key, its worker has room', ops: DECISIONS_PER_CALL, fn: each(affine) },
        { name: 'decide: new key (least loaded + tie-break)', ops: DECISIONS_PER_CALL, fn: each(fresh) },
      ],
    };
  });
}

function storeGroups(cfg: Config): GroupSpec[] {
  const store = new MemoryStore();
  const workers = cfg.workers.map((w) => w.id);
  const keys = Array.from({ length: DECISIONS_PER_CALL }, (_, i) => `p:${(i * 104729).toString(16)}`);
  const maps = { affinity: new Map<string, string>(), leases: new Map<string, Set<string>>(workers.map((w) => [w, new Set<string>()])) };
  let n = 0;
  return [
    {
      group: `store/${workers.length} workers`,
      tasks: [
        {
          name: 'Map.set affinity + Set add/delete lease',
          baseline: true,
          ops: DECISIONS_PER_CALL,
          fn: () => {
            for (const key of keys) {
              const w = workers[n++ % workers.length]!;
              maps.affinity.set(key, w);
              const id = `lease-${n}`;
              maps.leases.get(w)!.add(id);
              maps.leases.get(w)!.delete(id);
            }
          },
        },
        {
          name: 'MemoryStore commit + release',
          ops: DECISIONS_PER_CALL,
          fn: () => {
            for (const key of keys) {
              const worker = workers[n++ % workers.length]!;
              const affinity = store.cachedSnapshot({ pool: 'default', key, workers, blocks: [] }).affinity;
              const res = store.commitSync({
                pool: 'default',
                key,
                workers,
                blocks: [],
                worker,
                preconditions: { affinity, below: [{ worker, limit: 1 << 20 }], atOrAbove: [], states: [] },
                affinityTtlMs: 3_600_000,
                prefixTtlMs: 3_600_000,
                capacityBlocks: 6250,
              });
              if (res.ok) void store.release(res.lease);
            }
          },
        },
        {
          name: 'MemoryStore cachedSnapshot',
          ops: DECISIONS_PER_CALL,
          fn: () => {
            for (const key of keys) sink = store.cachedSnapshot({ pool: 'default', key, workers, blocks: [] });
          },
        },
      ],
    },
  ];
}

function routeGroups(cfg: Config, sizes: readonly number[]): GroupSpec[] {
  const gate = new Gate(cfg, new MemoryStore(), createLogger('silent'));
  return sizes.map((bytes) => {
    const reqs = benchRequests(bytes, 16, 11).map(request);
    const raw = reqs[2]!.body!;
    let i = 0;
    return {
      group: `route/${sizeLabel(bytes)}`,
      perKb: raw.length / 1024,
      tasks: [
        { name: 'JSON.parse(body)', baseline: true, ops: 1, fn: () => JSON.parse(raw.toString('utf8')) },
        {
          name: 'Gate.route + release, memory store (key mix of kvgate bench)',
          ops: 1,
          fn: async () => {
            const r = await gate.route(reqs[i++ % reqs.length]!);
            if (r.kind === 'route') await gate.release(r.lease);
          },
        },
      ],
    };
  });
}

export async function runMicro(opts: MicroOptions = DEFAULT_MICRO, progress: (group: string) => void = () => {}): Promise<MicroRow[]> {
  await initHashing();
  const cfg = benchConfig(16, 'kvgate-micro');
  const groups = [
    ...keyingGroups(cfg, opts.sizes),
    ...hashingGroups(cfg, opts.sizes),
    ...decideGroups(opts.candidates),
    ...storeGroups(cfg),
    ...routeGroups(cfg, opts.sizes),
  ].filter((g) => opts.only.length === 0 || opts.only.some((o) => g.group.startsWith(o)));
  const rows: MicroRow[] = [];
  for (const g of groups) {
    progress(g.group);
    const bench = new Bench({ time: opts.timeMs, warmupTime: opts.warmupMs, warmupIterations: Math.min(opts.iterations, 8), iterations: opts.iterations, throws: true });
    for (const t of g.tasks) bench.add(t.name, t.fn);
    await bench.run();
    const measured = g.tasks.map((t) => ({ spec: t, ...stats(bench.getTask(t.name)!, t.ops) }));
    const base = measured.find((m) => m.spec.baseline)?.nsPerOp ?? NaN;
    for (const m of measured) {
      rows.push({
        group: g.group,
        task: m.spec.name,
        baseline: m.spec.baseline === true,
        ns_per_op: round(m.nsPerOp),
        rme_pct: round(m.rme),
        samples: m.samples,
        ns_per_kb: g.perKb ? round(m.nsPerOp / g.perKb) : null,
        ns_per_candidate: g.perCandidate ? round(m.nsPerOp / g.perCandidate) : null,
        ratio: round(m.nsPerOp / base, 3),
      });
    }
  }
  return rows;
}

function stats(task: Task, ops: number): { nsPerOp: number; rme: number; samples: number } {
  const r = task.result;
  if (r.state !== 'completed') throw new Error(`micro-benchmark "${task.name}" did not complete (${r.state})`);
  // The median call, not the mean: on a shared machine a few calls land on another process's burst.
  return { nsPerOp: (r.latency.p50 * 1e6) / ops, rme: r.latency.rme, samples: r.latency.samplesCount };
}

function round(x: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
