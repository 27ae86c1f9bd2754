/**
 * One simulated GPU worker (an engine instance): a FIFO waiting queue, a prefix KV cache, one
 * prefill at a time, and continuous-batching decode.
 *
 * - Admission: the head of the queue starts its prefill when no other prefill runs, the batch has
 *   room (`maxBatch` sequences) and its KV blocks fit beside the pinned ones; otherwise it waits
 *   (head of line, as vLLM's FCFS scheduler does). A request reserves blocks for its whole prompt
 *   and output up front, so nothing is ever preempted.
 * - Prefill: its prefix hit is taken when it starts (what the engine really finds then), and it
 *   lasts overhead + uncached tokens / prefill rate (+ PCIe reload of offloaded hits). Prefills
 *   run one at a time because prefill is compute-bound: batching them would not finish any sooner.
 * - Decode: processor sharing. All running sequences gain one token per step, and a step's length
 *   grows with the KV it must read (cost-model.ts). A virtual clock counts tokens per sequence, so
 *   a batch change costs one heap operation instead of a step-by-step replay.
 * - Chunked prefill: while a prefill runs, every step carries a prompt chunk plus the decoding
 *   sequences' tokens (`prefillChunkTokens`), so decoding slows to the chunk's compute time and
 *   the prefill loses the compute the decode tokens take. This is why piling long prompts onto one
 *   worker hurts its running conversations too.
 */
import { PriorityQueue } from '@datastructures-js/priority-queue';
import {
  decodeStepSeconds,
  mixedStepSeconds,
  prefillSeconds,
  prefillTokensPerS,
  type CostModel,
  type FleetOptions,
} from './cost-model.js';
import type { EventLoop } from './event-loop.js';
import type { BlockId } from './blocks.js';
import { KvCache } from './kv-cache.js';
import { LoraSlots, type LoraOptions } from './lora-slots.js';
import type { SimRequest } from './workload.js';

/** A request on a worker, and what happened to it there. */
export interface Job {
  readonly req: SimRequest;
  readonly worker: number;
  prefillStartS: number;
  firstTokenS: number;
  finishS: number;
  /** Prompt tokens served from the GPU cache or the CPU tier instead of computed. */
  cachedTokens: number;
  /** Of those, the ones reloaded from the CPU tier. */
  offloadTokens: number;
  /** Prompt tokens computed by the prefill. */
  computedTokens: number;
  anonymousBlocks: number;
  /** Virtual decode clock value at which this sequence has generated all its tokens. */
  doneAtVt: number;
  /** The LoRA adapter it runs with (only on a fleet with adapters). */
  adapter?: string;
}

export interface WorkerHooks {
  firstToken(job: Job): void | Promise<void>;
  finished(job: Job): void | Promise<void>;
}

/** Float slack when comparing the virtual clock, relative to its size (it grows through a run). */
const EPS_RELATIVE = 1e-9;

export class SimWorker {
  readonly cache: KvCache;
  private readonly waiting: Job[] = [];
  private waitingHead = 0;
  private prefilling: Job | undefined;
  private readonly running = new PriorityQueue<Job>((a, b) => a.doneAtVt - b.doneAtVt);
  /** Tokens of KV each running sequence holds (prompt + output): what a decode step reads. */
  private runningContext = 0;
  /** Virtual decode clock: tokens generated per running sequence since the start. */
  private vt = 0;
  private vtAt = 0;
  private tokensPerS = 0;
  /** Invalidates a scheduled decode completion when the batch changes first. */
  private decodeEpoch = 0;
  /** Computed prompt tokens + generated tokens: the work this worker did. */
  workTokens = 0;
  /** ∫ outstanding dt up to `areaAt`, for time-averaged load. */
  private area = 0;
  private areaAt = 0;
  private count = 0;
  /** LoRA adapter slots, on a fleet with adapters only (lora-slots.ts); otherwise nothing changes. */
  readonly lora: LoraSlots | undefined;

  constructor(
    readonly id: number,
    private readonly fleet: FleetOptions,
    private readonly cost: CostModel,
    private readonly blockTokens: number,
    private readonly loop: EventLoop,
    private readonly hooks: WorkerHooks,
    private readonly loraOptions?: LoraOptions,
  ) {
    this.lora = loraOptions ? new LoraSlots(loraOptions.maxLoras) : undefined;
    this.cache = new KvCache(
      Math.max(1, Math.floor(fleet.cacheTokens / blockTokens)),
      Math.floor(fleet.offloadTokens / blockTokens),
    );
  }

  /** What the engine's /metrics would report now. */
  observe(): { running: number; waiting: number; kvUsage: number; lora?: ReturnType<LoraSlots['observe']> } {
    const waiting = this.waiting.length - this.waitingHead;
    const obs = { running: this.count - waiting, waiting, kvUsage: Math.min(1, this.cache.pinnedBlocks / this.cache.capacityBlocks) };
    return this.lora ? { ...obs, lora: this.lora.observe() } : obs;
  }

  /**
   * A migrated session's KV leaves GPU memory (the offload event's worker-side agent); returns the
   * blocks that left. Nothing else changes: admission counts pinned blocks, and these were not.
   */
  offload(blocks: readonly BlockId[]): number {
    return this.cache.offload(blocks);
  }

  /** Requests on this worker: waiting, prefilling and decoding. */
  get outstanding(): number {
    return this.count;
  }

  /** ∫ outstanding dt from the start to now (request-seconds). */
  loadIntegral(now: number): number {
    return this.area + this.count * (now - this.areaAt);
  }

  private changeCount(delta: number): void {
    const now = this.loop.now;
    this.area = this.loadIntegral(now);
    this.areaAt = now;
    this.count += delta;
  }

  submit(req: SimRequest): void {
    this.changeCount(1);
    const adapter = this.loraOptions?.adapterOf(req.index);
    if (adapter !== undefined) this.lora!.enqueued(adapter);
    this.waiting.push({
      req,
      worker: this.id,
      prefillStartS: NaN,
      firstTokenS: NaN,
      finishS: NaN,
      cachedTokens: 0,
      offloadTokens: 0,
      computedTokens: 0,
      anonymousBlocks: 0,
      doneAtVt: 0,
      ...(adapter !== undefined ? { adapter } : {}),
    });
    this.tryStartPrefill();
  }

  private tryStartPrefill(): void {
    if (this.prefilling || this.waitingHead >= this.waiting.length) return;
    if (this.running.size() + 1 > this.fleet.maxBatch) return;
    // With adapters, the first waiting request whose adapter can be placed (vLLM skips the others).
    const at = this.lora ? this.firstAdmissible() : this.waitingHead;
    if (at < 0) return;
    const job = this.waiting[at]!;
    const req = job.req;
    // The prompt's partial tail and the output get private blocks; whole prompt blocks are shared.
    const tailTokens = req.promptTokens - req.blocks.length * this.blockTokens;
    const anonymous = Math.ceil((Math.max(0, tailTokens) + req.outputTokens) / this.blockTokens);
    const need = this.cache.pinCost(req.blocks, anonymous);
    // An oversized request may start alone, over-committing, rather than block the queue forever.
    if (!this.cache.fits(need) && this.cache.pinnedBlocks > 0) return;

    if (at !== this.waitingHead) this.waiting.splice(at, 1);
    else this.waitingHead++;
    if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waiting.length) {
      this.waiting.splice(0, this.waitingHead);
      this.waitingHead = 0;
    }
    const now = this.loop.now;
    const hit = this.cache.match(req.blocks);
    // The engine always computes at least the last prompt token (it needs its logits).
    const cached = Math.min((hit.gpu + hit.offload) * this.blockTokens, req.promptTokens - 1);
    const reloaded = Math.min(hit.offload * this.blockTokens, cached);
    job.prefillStartS = now;
    job.cachedTokens = cached;
    job.offloadTokens = reloaded;
    job.computedTokens = req.promptTokens - cached;
    job.anonymousBlocks = anonymous;
    this.cache.acquire(req.blocks, anonymous);
    let adapterLoadS = 0;
    if (job.adapter !== undefined) {
      this.lora!.dequeued(job.adapter);
      if (this.lora!.admit(job.adapter, now)) adapterLoadS = this.loraOptions!.loadS;
    }
    const rate = prefillTokensPerS(this.cost, this.fleet.prefillChunkTokens, this.running.size(), this.runningContext);
    this.advanceDecodeClock(now);
    this.prefilling = job;
    this.rescheduleDecode(now); // decode steps now share the GPU with the chunks
    // Blocks are cached from the moment the prefill starts: prefills on a worker run one at a time,
    // so no later request can look them up before they are computed.
    this.loop.at(now + adapterLoadS + prefillSeconds(this.cost, job.computedTokens, reloaded, rate), () => this.prefillDone(job));
  }

  /** Index of the first waiting job whose adapter (if any) can be placed now, or -1. */
  private firstAdmissible(): number {
    for (let i = this.waitingHead; i < this.waiting.length; i++) {
      const a = this.waiting[i]!.adapter;
      if (a === undefined || this.lora!.admissible(a)) return i;
    }
    return -1;
  }

  private prefillDone(job: Job): void {
    const now = this.loop.now;
    this.advanceDecodeClock(now);
    this.prefilling = undefined;
    job.firstTokenS = now;
    this.workTokens += job.computedTokens + 1;
    this.loop.settle(this.hooks.firstToken(job));
    if (job.req.outputTokens <= 1) this.finish(job);
    else {
      job.doneAtVt = this.vt + (job.req.outputTokens - 1);
      this.running.enqueue(job);
      this.runningContext += job.req.promptTokens + job.req.outputTokens;
    }
    this.rescheduleDecode(now);
    this.tryStartPrefill();
  }

  private advanceDecodeClock(now: number): void {
    this.vt += (now - this.vtAt) * this.tokensPerS;
    this.vtAt = now;
  }

  private rescheduleDecode(now: number): void {
    const epoch = ++this.decodeEpoch;
    const next = this.running.front();
    if (next === null) {
      this.tokensPerS = 0;
      return;
    }
    const chunk = this.fleet.prefillChunkTokens;
    const step =
      this.prefilling && chunk > 0
        ? mixedStepSeconds(this.cost, chunk, this.running.size(), this.runningContext)
        : decodeStepSeconds(this.cost, this.runningContext);
    this.tokensPerS = 1 / step;
    const at = now + Math.max(0, next.doneAtVt - this.vt) / this.tokensPerS;
    this.loop.at(at, () => {
      if (epoch === this.decodeEpoch) this.decodeDone();
    });
  }

  private decodeDone(): void {
    const now = this.loop.now;
    this.advanceDecodeClock(now);
    for (let j = this.running.front(); j !== null && j.doneAtVt <= this.vt + EPS_RELATIVE * Math.max(1, this.vt); j = this.running.front()) {
      this.running.dequeue();
      this.runningContext -= j.req.promptTokens + j.req.outputTokens;
      this.workTokens += j.req.outputTokens - 1;
      this.finish(j);
    }
    this.rescheduleDecode(now);
    this.tryStartPrefill();
  }

  private finish(job: Job): void {
    job.finishS = this.loop.now;
    this.changeCount(-1);
    this.cache.release(job.req.blocks, job.anonymousBlocks);
    if (job.adapter !== undefined) this.lora!.finished(job.adapter, this.loop.now);
    this.loop.settle(this.hooks.finished(job));
  }
}
