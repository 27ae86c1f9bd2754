/**
 * A simulated engine's LoRA adapter slots, as vLLM keeps them: at most `maxLoras` adapters are
 * resident on the GPU (`--max-loras`), a batch may only hold requests of resident adapters, and
 * an adapter whose requests have all finished stays resident (least recently used first out)
 * until a request for another adapter needs its slot. A request whose adapter is not resident
 * costs `loadS` to load it; when every slot is held by an adapter with requests in the batch, the
 * request waits (vLLM's scheduler skips it and admits later requests whose adapters fit).
 *
 * Only used when the fleet has adapters (SimOptions `lora`): the worker without it is unchanged.
 */

export interface LoraOptions {
  /** Adapters resident at once per worker (vLLM `--max-loras`). */
  maxLoras: number;
  /**
   * Seconds to load an adapter that is not resident, added to its request's prefill: the copy of
   * its weights into a GPU slot (an assumption sized in docs/BENCHMARKS.md, "LoRA adapters").
   */
  loadS: number;
  /** The adapter a request names, or undefined for the base model. */
  adapterOf(index: number): string | undefined;
}

interface Slot {
  /** Requests of this adapter admitted and not finished (prefilling or decoding). */
  active: number;
  /** When it was last admitted or finished: the LRU order among idle slots. */
  usedAt: number;
}

export class LoraSlots {
  private readonly slots = new Map<string, Slot>();
  /** Adapters of waiting requests, with counts (for `waiting_lora_adapters`). */
  private readonly waitingCounts = new Map<string, number>();
  /** Admissions that found the adapter resident, and those that loaded it. */
  hits = 0;
  loads = 0;
  /** Loads that first evicted an idle resident adapter. */
  evictions = 0;

  constructor(readonly maxLoras: number) {
    if (!(Number.isInteger(maxLoras) && maxLoras >= 1)) throw new Error(`max_loras must be a positive integer, got ${maxLoras}`);
  }

  /** Whether a request of `adapter` could be admitted now (resident, a free slot, or an idle one to evict). */
  admissible(adapter: string): boolean {
    if (this.slots.has(adapter) || this.slots.size < this.maxLoras) return true;
    for (const s of this.slots.values()) if (s.active === 0) return true;
    return false;
  }

  /** Admits a request of `adapter` (admissible() must hold); true when it had to be loaded. */
  admit(adapter: string, now: number): boolean {
    const slot = this.slots.get(adapter);
    if (slot) {
      slot.active++;
      slot.usedAt = now;
      this.hits++;
      return false;
    }
    if (this.slots.size >= this.maxLoras) {
      let victim: string | undefined;
      let oldest = Infinity;
      for (const [name, s] of this.slots) {
        if (s.active === 0 && s.usedAt < oldest) {
          victim = name;
          oldest = s.usedAt;
        }
      }
      if (victim === undefined) throw new Error(`adapter ${adapter} admitted with every slot busy`);
      this.slots.delete(victim);
      this.evictions++;
    }
    this.slots.set(adapter, { active: 1, usedAt: now });
    this.loads++;
    return true;
  }

  /** One of its requests finished. */
  finished(adapter: string, now: number): void {
    const s = this.slots.get(adapter);
    if (!s) return;
    s.active--;
    s.usedAt = now;
  }

  enqueued(adapter: string): void {
    this.waitingCounts.set(adapter, (this.waitingCounts.get(adapter) ?? 0) + 1);
  }

  dequeued(adapter: string): void {
    const n = (this.waitingCounts.get(adapter) ?? 0) - 1;
    if (n > 0) this.waitingCounts.set(adapter, n);
    else this.waitingCounts.delete(adapter);
  }

  /** Resident adapter names (for tests). */
  resident(): string[] {
    return [...this.slots.keys()];
  }

  /**
   * What vLLM's `vllm:lora_requests_info` says: adapters of running requests, of waiting ones, and
   * the slot count. Idle resident adapters are in neither list, as in vLLM.
   */
  observe(): { running: string[]; waiting: string[]; maxLora: number } {
    const running: string[] = [];
    for (const [name, s] of this.slots) if (s.active > 0) running.push(name);
    return { running, waiting: [...this.waitingCounts.keys()], maxLora: this.maxLoras };
  }
}
