/**
 * The simulated inference engine behind the fake worker, in real time:
 *
 * - a continuous batch of at most `maxBatch` sequences and a FIFO waiting queue in front of it; a
 *   request leaves the queue when a slot is free and its KV blocks fit beside the pinned ones
 *   (head of line, as vLLM's FCFS scheduler);
 * - a prefix KV cache of `kvCapacityTokens`, block-granular with LRU eviction: the simulator's
 *   KvCache (src/sim/kv-cache.ts, vLLM's automatic prefix caching semantics), fed the chained
 *   block hashes of the prompt text (src/sim/blocks.ts, 4 characters per token);
 * - time to first token = overhead + uncached prompt tokens / prefill rate, then one token every
 *   `decodeMsPerToken`; both stretched by the `slowFactor` test hook. Prefills do not queue
 *   behind one another here (the simulator models that; this engine only has to move its gauges
 *   with load and answer at a plausible pace);
 * - a prompt's blocks become hits for other requests when its prefill ends, not when it starts;
 * - a finished turn leaves its prompt and its answer cached, so the conversation's next turn, which
 *   quotes both, hits on all of it (vLLM caches generated blocks too).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { CHARS_PER_TOKEN, textBlockIds, tokensOfText, type BlockId } from '../sim/blocks.js';
import { KvCache } from '../sim/kv-cache.js';
import { MAX_INTERNED_BLOCKS, type FakeWorkerOptions } from './defaults.js';

export type EngineOptions = Pick<
  FakeWorkerOptions,
  'kvCapacityTokens' | 'blockTokens' | 'prefillTokensPerS' | 'prefillOverheadMs' | 'decodeMsPerToken' | 'maxBatch' | 'maxWaiting'
>;

/** Why the engine refused a request before queueing it. */
export class EngineRefusal extends Error {
  constructor(
    readonly reason: 'too_long' | 'queue_full',
    message: string,
  ) {
    super(message);
  }
}

export interface GenerateRequest {
  prompt: string;
  maxTokens: number;
  signal?: AbortSignal;
  /** Called once the request is accepted into the queue (not refused). */
  onAccepted?: () => void;
  /** Called once per generated token, in order; the first call is the first token. */
  onToken?: (text: string, index: number) => void;
  /** The LoRA adapter the request runs with (its `model`, when that is one of the worker's adapters). */
  adapter?: string;
}

export interface GenerateResult {
  promptTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
  completionTokens: number;
  output: string;
  /** The client went away before the end. */
  aborted: boolean;
  /** Seconds from admission to the first token; NaN when aborted before it. */
  ttftS: number;
}

interface Waiter {
  blocks: BlockId[];
  anonymous: number;
  /** Called once the request's blocks are pinned, with its prefix hit in blocks. */
  admit: (hitBlocks: number) => void;
}

/**
 * Four-character tokens (the 4-characters-per-token estimate, exactly): the output's token count
 * and its length agree, whatever the client counts.
 */
const TOKENS = ['the ', 'and ', 'for ', 'kv, ', 'you ', 'can ', 'use ', 'its ', 'way ', 'all ', 'new ', 'one ', 'map ', 'key ', 'row ', 'set '];

export class FakeEngine {
  private cache: KvCache;
  /** Content hash of a block chain → dense id, which the cache's arrays are indexed by. */
  private ids = new Map<BlockId, number>();
  private running = 0;
  private readonly waiting: Waiter[] = [];
  /**
   * Blocks allocated to a prefill still running, with how many prefills compute each: they are
   * in memory but hold no KV yet, so they are no hit for anyone else until that prefill ends (two
   * concurrent prefills of one new prefix both compute it, as in vLLM).
   */
  private readonly computing = new Map<BlockId, number>();
  /** Requests per LoRA adapter, running and waiting (entries at zero are removed). */
  private readonly loraRunning = new Map<string, number>();
  private readonly loraWaiting = new Map<string, number>();
  /** Test hook: stretches prefill and decode (1 = normal). */
  slowFactor = 1;

  /** Cumulative counters, as the engine's Prometheus counters report them. */
  readonly totals = { promptTokens: 0, generationTokens: 0, prefixQueryTokens: 0, prefixHitTokens: 0, requests: 0 };
  /** Called with each request's time to first token, in seconds. */
  onFirstToken: ((seconds: number) => void) | undefined;

  constructor(readonly opts: EngineOptions) {
    this.cache = this.freshCache();
  }

  /** Longest prompt + output accepted: the whole cache, as vLLM's max_model_len is bounded by it. */
  get maxModelLen(): number {
    return this.opts.kvCapacityTokens;
  }

  get numGpuBlocks(): number {
    return this.cache.capacityBlocks;
  }

  get requestsRunning(): number {
    return this.running;
  }

  get requestsWaiting(): number {
    return this.waiting.length;
  }

  /** Share of KV blocks held by running requests: what vLLM's usage gauge measures (cached but unreferenced blocks count as free). */
  get kvUsage(): number {
    return Math.min(1, this.cache.pinnedBlocks / this.cache.capacityBlocks);
  }

  /** Refuses at once (too long, queue full) or resolves when generation ends or is aborted. */
  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const promptTokens = tokensOfText(req.prompt);
    if (promptTokens + req.maxTokens > this.maxModelLen) {
      throw new EngineRefusal(
        'too_long',
        `This model's maximum context length is ${this.maxModelLen} tokens. However, you requested ${promptTokens + req.maxTokens} tokens ` +
          `(${promptTokens} in the messages, ${req.maxTokens} in the completion). Please reduce the length of the messages or completion.`,
      );
    }
    if (this.waiting.length >= this.opts.maxWaiting) throw new EngineRefusal('queue_full', `the waiting queue is full (${this.opts.maxWaiting} requests)`);

    const bt = this.opts.blockTokens;
    const blocks = this.intern(textBlockIds(req.prompt, bt));
    // The prompt's partial last block and the output get private blocks; whole prompt blocks are shared.
    const anonymous = Math.ceil((Math.max(0, promptTokens - blocks.length * bt) + req.maxTokens) / bt);
    const result: GenerateResult = { promptTokens, cachedTokens: 0, completionTokens: 0, output: '', aborted: false, ttftS: NaN };
    const signal = req.signal;
    req.onAccepted?.();
    const adapter = req.adapter;
    if (adapter !== undefined) bump(this.loraWaiting, adapter, 1);

    const hit = await this.waitForSlot(blocks, anonymous, signal);
    if (adapter !== undefined) bump(this.loraWaiting, adapter, -1);
    if (hit === undefined) {
      result.aborted = true;
      return result;
    }
    if (adapter !== undefined) bump(this.loraRunning, adapter, 1);
    // The engine always computes at least the last prompt token (it needs its logits).
    result.cachedTokens = Math.min(hit * bt, promptTokens - 1);
    this.totals.requests++;
    this.totals.promptTokens += promptTokens;
    this.totals.prefixQueryTokens += promptTokens;
    this.totals.prefixHitTokens += result.cachedTokens;
    const start = performance.now();
    const out: string[] = [];
    let computing: BlockId[] | undefined = blocks.slice(hit);
    try {
      const prefillMs = this.opts.prefillOverheadMs + ((promptTokens - result.cachedTokens) / this.opts.prefillTokensPerS) * 1000;
      await sleep(prefillMs * this.slowFactor, undefined, signal ? { signal } : undefined);
      this.computed(computing);
      computing = undefined;
      result.ttftS = (performance.now() - start) / 1000;
      this.onFirstToken?.(result.ttftS);
      let seed = promptTokens;
      for (let i = 0; i < req.maxTokens; i++) {
        if (i > 0) await sleep(this.opts.decodeMsPerToken * this.slowFactor, undefined, signal ? { signal } : undefined);
        seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
        const token = TOKENS[(seed >>> 16) % TOKENS.length]!;
        out.push(token);
        result.completionTokens++;
        this.totals.generationTokens++;
        req.onToken?.(token, i);
      }
    } catch (err) {
      if (!signal?.aborted) throw err;
      result.aborted = true;
    } finally {
      result.output = out.join('');
      if (computing) this.computed(computing);
      this.cache.release(blocks, anonymous);
      if (!result.aborted && result.output.length >= CHARS_PER_TOKEN) this.cache.touch(this.intern(textBlockIds(req.prompt + result.output, bt)));
      this.running--;
      if (adapter !== undefined) bump(this.loraRunning, adapter, -1);
      this.pump();
    }
    return result;
  }

  /** Adapters of running requests (vLLM's `running_lora_adapters`). */
  get adaptersRunning(): string[] {
    return [...this.loraRunning.keys()];
  }

  /** Adapters of waiting requests (vLLM's `waiting_lora_adapters`). */
  get adaptersWaiting(): string[] {
    return [...this.loraWaiting.keys()];
  }

  /** Resolves with the prefix hit (in blocks) once admitted, or undefined if the signal aborts first. */
  private waitForSlot(blocks: BlockId[], anonymous: number, signal: AbortSignal | undefined): Promise<number | undefined> {
    if (signal?.aborted) return Promise.resolve(undefined);
    return new Promise<number | undefined>((resolve) => {
      const waiter: Waiter = {
        blocks,
        anonymous,
        admit: (hitBlocks) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(hitBlocks);
        },
      };
      const onAbort = () => {
        const i = this.waiting.indexOf(waiter);
        if (i >= 0) this.waiting.splice(i, 1);
        resolve(undefined);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
      this.pump();
    });
  }

  /**
   * Admits from the head of the queue while a batch slot is free and the head's blocks fit,
   * pinning its blocks here so the next admission sees them.
   */
  private pump(): void {
    if (this.running === 0 && this.waiting.length === 0 && this.ids.size > MAX_INTERNED_BLOCKS) {
      // Nothing runs, so nothing is being computed either: a fresh start loses only cached prefixes.
      this.cache = this.freshCache();
      this.ids = new Map();
    }
    while (this.waiting.length > 0 && this.running < this.opts.maxBatch) {
      const head = this.waiting[0]!;
      // An oversized request may start alone, over-committing, rather than block the queue forever.
      if (!this.cache.fits(this.cache.pinCost(head.blocks, head.anonymous)) && this.cache.pinnedBlocks > 0) return;
      this.waiting.shift();
      let hit = 0;
      while (hit < head.blocks.length && this.cache.has(head.blocks[hit]!) && !this.computing.has(head.blocks[hit]!)) hit++;
      this.cache.acquire(head.blocks, head.anonymous);
      for (let i = hit; i < head.blocks.length; i++) this.computing.set(head.blocks[i]!, (this.computing.get(head.blocks[i]!) ?? 0) + 1);
      this.running++;
      head.admit(hit);
    }
  }

  /** A prefill finished (or was abandoned): the blocks it computed can serve hits now. */
  private computed(blocks: readonly BlockId[]): void {
    for (const b of blocks) {
      const n = (this.computing.get(b) ?? 0) - 1;
      if (n > 0) this.computing.set(b, n);
      else this.computing.delete(b);
    }
  }

  private intern(hashes: readonly BlockId[]): BlockId[] {
    return hashes.map((h) => {
      let id = this.ids.get(h);
      if (id === undefined) this.ids.set(h, (id = this.ids.size));
      return id;
    });
  }

  private freshCache(): KvCache {
    return new KvCache(Math.max(1, Math.floor(this.opts.kvCapacityTokens / this.opts.blockTokens)));
  }
}

function bump(counts: Map<string, number>, key: string, by: number): void {
  const n = (counts.get(key) ?? 0) + by;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}
