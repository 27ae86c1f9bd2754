/**
 * Offered load, and how a workload is brought to it.
 *
 * Capacity. A worker runs out of one of two things. Compute: prompt tokens it must compute and
 * tokens it generates (with chunked prefill every decode token rides in a step that also carries
 * prompt chunks, so under load each costs about a prompt token's compute), plus a fixed overhead
 * per request. KV memory: a request pins its prompt and output blocks from its prefill to its last
 * token (worker.ts), so at most cache_tokens / (prompt + output) requests run at once, each for
 * its prefill plus output × step time; a prefix that several sessions share (a system prompt, an
 * agent's instructions: `sharedBlocks`) is pinned once per worker and not counted. The fewest
 * prompt tokens any router can leave to compute is set by the pooled-cache bound (pooled-bound.ts:
 * one LRU cache as large as the whole fleet's). So the fleet's capacity for a workload is the
 * highest request rate λ at which, per worker,
 *
 *   compute:  λ × (overhead + (prompt × (1 − pooled_hit) + output) / prefill_tok_s) ≤ 1
 *   memory:   λ × (private prompt + output) × (prefill_s + output × step_s) ≤ cache_tokens
 *
 * with prompt and output the workload's mean tokens per request and step_s a decode step's length
 * at that rate (a mixed chunk-and-decode step for the share of time a prefill runs, a plain decode
 * step over a full cache otherwise; cost-model.ts). It is measured on the workload as replayed at
 * its natural rate (the bound is an LRU over arrival order, so it does not depend on the rate).
 * Both are estimates of where the knee is; the sweep shows where each policy's really is. Offered
 * load L means arrivals at L × capacity: at L = 1 even a router that reached the bound would be
 * saturated; a router that hits less, or balances worse, saturates earlier.
 *
 * Reaching a load. Synthetic workloads and session-less traces are re-timed (every arrival time
 * divided by the rate factor). A trace with sessions (agent traces have a few dozen) would have
 * its sessions' turns squeezed together, faster than any model answers; instead its sessions, and
 * then time-shifted copies of them under new session ids, start one after another at the steady
 * rate that brings the target request rate, each keeping its recorded turn timing (so a load is
 * reached with more concurrent agents, not faster ones). The first arrivals, up to the median
 * session's length, are warm-up and are not measured. Each copy's private content is re-salted so
 * that copies share only what the original sessions shared: a block that two or more original
 * sessions contain (an agent's instructions, a shared system prompt) stays common to every copy;
 * from a request's first block that fewer than two sessions contain, its text is overwritten in
 * place with a tag naming the copy (same length), so every later block hash differs per copy while
 * a session's turns, salted at the same place, still extend one another.
 */
import { CHARS_PER_TOKEN, textBlockIds, type BlockId } from './blocks.js';
import { decodeStepSeconds, mixedStepSeconds, type CostModel, type FleetOptions } from './cost-model.js';
import { pooledBound } from './pooled-bound.js';
import { finishWorkload, type SimRequest, type Workload } from './workload.js';

export interface Capacity {
  /** Requests/s the fleet sustains at the pooled-cache hit rate (the lower of the two limits). */
  capacityRps: number;
  /** The compute limit alone, and the KV-memory limit alone. */
  computeRps: number;
  memoryRps: number;
  /** The workload's own arrival rate: requests / arrival span. */
  naturalRps: number;
  pooledHitRate: number;
  /** Mean seconds of a worker's compute per request at that hit rate. */
  meanServiceS: number;
}

export function measureCapacity(w: Workload, fleet: FleetOptions, cost: CostModel): Capacity {
  const reqs = w.requests;
  const n = reqs.length;
  const bound = pooledBound(w, fleet);
  const common = sharedBlocks(w);
  let promptSum = 0;
  let outputSum = 0;
  let privateSum = 0;
  for (const r of reqs) {
    promptSum += r.promptTokens;
    outputSum += r.outputTokens;
    let k = 0;
    while (k < r.blocks.length && common.has(r.blocks[k]!)) k++;
    privateSum += r.promptTokens - k * w.blockTokens;
  }
  const prompt = n > 0 ? promptSum / n : 0;
  const output = n > 0 ? outputSum / n : 0;
  const computed = prompt * (1 - bound.hitRate);
  const meanServiceS = n > 0 ? cost.prefillOverheadS + (computed + output) / cost.prefillTokensPerS : 0;
  const computeRps = meanServiceS > 0 ? 1 / meanServiceS : 0;
  // Memory: the highest per-worker rate whose requests' KV fits (bisection; the residence time
  // grows with the rate, as prefills take more of the steps).
  // A prefix that several sessions share is pinned once per worker however many run on it.
  const perRequest = (n > 0 ? privateSum / n : 0) + output;
  const prefillS = cost.prefillOverheadS + computed / cost.prefillTokensPerS;
  const fits = (rate: number): boolean => {
    const running = Math.min(fleet.maxBatch, fleet.cacheTokens / Math.max(1, perRequest));
    const busy = Math.min(1, rate * prefillS);
    const plain = decodeStepSeconds(cost, fleet.cacheTokens);
    const mixed = fleet.prefillChunkTokens > 0 ? mixedStepSeconds(cost, fleet.prefillChunkTokens, running, fleet.cacheTokens) : plain;
    const step = busy * mixed + (1 - busy) * plain;
    return rate * perRequest * (prefillS + Math.max(0, output - 1) * step) <= fleet.cacheTokens && rate * (prefillS + Math.max(0, output - 1) * step) <= fleet.maxBatch;
  };
  let lo = 0;
  let hi = Math.max(computeRps, 1) * 4;
  for (let i = 0; i < 60; i++) {
    const mid = (lo + hi) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  const memoryRps = perRequest > 0 ? lo : computeRps;
  const span = n > 1 ? reqs[n - 1]!.arrivalS - reqs[0]!.arrivalS : 0;
  return {
    capacityRps: fleet.workers * Math.min(computeRps, memoryRps),
    computeRps: fleet.workers * computeRps,
    memoryRps: fleet.workers * memoryRps,
    naturalRps: span > 0 ? (n - 1) / span : 0,
    pooledHitRate: bound.hitRate,
    meanServiceS,
  };
}

/** True when the workload's requests carry session ids (then a trace is scaled up by copies). */
export function hasSessions(w: Workload): boolean {
  return w.requests.some((r) => r.sessionId !== undefined);
}

/** Arrivals `factor` times as dense: every arrival time divided by it. */
export function retime(w: Workload, factor: number, maxRequests?: number): Workload {
  return finishWorkload(w.name, w.description, w.blockTokens, w.requests, { rateScale: factor, ...(maxRequests !== undefined ? { maxRequests } : {}) });
}

/** Blocks that requests of two or more distinct sessions contain. */
export function sharedBlocks(w: Workload): Set<BlockId> {
  const owner = new Map<BlockId, string | null>();
  for (const r of w.requests) {
    const s = r.sessionId ?? `#${r.index}`;
    for (const b of r.blocks) {
      const o = owner.get(b);
      if (o === undefined) owner.set(b, s);
      else if (o !== null && o !== s) owner.set(b, null);
    }
  }
  const out = new Set<BlockId>();
  for (const [b, o] of owner) if (o === null) out.add(b);
  return out;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * `text` with the bytes from `at` overwritten by an ASCII tag naming copy `copy`, keeping the
 * length in bytes and every byte before `at` (the overwrite starts and ends on character bounds).
 */
export function saltText(text: string, at: number, copy: number): string {
  const bytes = encoder.encode(text);
  let start = at;
  while (start < bytes.length && (bytes[start]! & 0xc0) === 0x80) start++;
  if (start >= bytes.length) return text;
  const tag = encoder.encode(`~copy${copy}~`);
  let end = Math.min(bytes.length, start + tag.length);
  while (end < bytes.length && (bytes[end]! & 0xc0) === 0x80) end++;
  const out = bytes.slice();
  for (let i = start; i < end; i++) out[i] = i - start < tag.length ? tag[i - start]! : 0x2e; // '.'
  return decoder.decode(out);
}

export interface SessionReplay {
  workload: Workload;
  /** Copies of the original sessions replayed (1: only the originals, or fewer of them). */
  copies: number;
  /** Arrivals before this are warm-up: sessions are still starting and no copy has run its course. */
  warmupS: number;
}

/**
 * A session trace replayed at `targetRps`: its sessions, then time-shifted copies of them under
 * new session ids (re-salted as the file comment says), start one after another at a steady rate
 * whose sessions bring `targetRps` requests a second; each keeps its recorded turn timing. The
 * first arrivals, up to the median session's length, are warm-up (fewer sessions are under way
 * than in the steady state); sessions are started until `measured` requests arrive after it.
 */
export function replicateSessions(w: Workload, targetRps: number, measured: number): SessionReplay {
  const groups = new Map<string, SimRequest[]>();
  for (const r of w.requests) {
    const key = r.sessionId ?? `#${r.index}`;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = []));
    g.push(r);
  }
  const sessions = [...groups.values()];
  const durations = sessions.map((g) => g[g.length - 1]!.arrivalS - g[0]!.arrivalS).sort((a, b) => a - b);
  const warmupS = durations[Math.floor(durations.length / 2)] ?? 0;
  const perSession = w.requests.length / Math.max(1, sessions.length);
  const startGap = perSession / targetRps;

  const shared = sharedBlocks(w);
  const blockBytes = w.blockTokens * CHARS_PER_TOKEN;
  const fresh = new Map<number, number>();
  const freshId = (h: number): number => {
    let id = fresh.get(h);
    if (id === undefined) fresh.set(h, (id = w.blockCount + fresh.size));
    return id;
  };
  const raw: Array<Omit<SimRequest, 'index'>> = [];
  // Sessions keep starting through the whole measured window, so its rate holds to the end.
  const lastStart = warmupS + measured / targetRps;
  let k = 0;
  for (; k * startGap <= lastStart; k++) {
    const g = sessions[k % sessions.length]!;
    const copy = Math.floor(k / sessions.length);
    const start = k * startGap;
    const t0 = g[0]!.arrivalS;
    for (const r of g) {
      const at = start + (r.arrivalS - t0);
      if (copy === 0 || r.sessionId === undefined) {
        raw.push({ arrivalS: at, promptTokens: r.promptTokens, outputTokens: r.outputTokens, blocks: r.blocks, sessionId: r.sessionId, text: r.text });
        continue;
      }
      let keep = 0;
      while (keep < r.blocks.length && shared.has(r.blocks[keep]!)) keep++;
      const text = (): string => saltText(r.text(), keep * blockBytes, copy);
      raw.push({
        arrivalS: at,
        promptTokens: r.promptTokens,
        outputTokens: r.outputTokens,
        blocks: [...r.blocks.slice(0, keep), ...textBlockIds(text(), w.blockTokens).slice(keep).map(freshId)],
        sessionId: `${r.sessionId}#copy${copy}`,
        text,
      });
    }
  }
  // The window ends at the `measured`-th arrival after the warm-up; later turns are not replayed.
  const sorted = raw.map((r) => r.arrivalS).sort((a, b) => a - b);
  const firstMeasured = sorted.findIndex((t) => t >= warmupS);
  const cutoff = sorted[Math.min(sorted.length - 1, (firstMeasured < 0 ? sorted.length : firstMeasured) + measured - 1)] ?? 0;
  const kept = raw.filter((r) => r.arrivalS <= cutoff);
  const copies = Math.ceil(k / sessions.length);
  return {
    workload: finishWorkload(w.name, `${w.description}; sessions replayed with ${copies} time-shifted, re-salted copies`, w.blockTokens, kept),
    copies,
    warmupS,
  };
}

/**
 * The workload at `factor` times its natural arrival rate: re-timed (first `requests` arrivals),
 * or, for a trace with sessions (`copySessions`), its sessions replicated (`requests` measured
 * after the warm-up).
 */
export function atRate(w: Workload, factor: number, opts: { copySessions: boolean; requests: number }): SessionReplay {
  if (opts.copySessions && hasSessions(w)) {
    const span = w.requests.length > 1 ? w.requests[w.requests.length - 1]!.arrivalS - w.requests[0]!.arrivalS : 0;
    const natural = span > 0 ? (w.requests.length - 1) / span : 0;
    return replicateSessions(w, natural * factor, opts.requests);
  }
  return { workload: retime(w, factor, opts.requests), copies: 1, warmupS: 0 };
}
