/**
 * Which pool a request belongs to. Pools come from the config (`pools:`, or the single `default`
 * pool of a top-level `workers:` list); a request's pool is, in order: the route's `pool` knob,
 * the pool serving the model its body names, the default pool. A named model that no pool serves
 * is refused rather than sent to a worker that does not hold it.
 */
import type { Config, PoolConfig, WorkerConfig } from '../config/schema.js';
import { KvgateError } from '../errors.js';

export interface Pool {
  readonly name: string;
  readonly config: PoolConfig;
  /** Worker ids in config order (the store's `StateQuery.workers`). */
  readonly workerIds: readonly string[];
  readonly workers: ReadonlyMap<string, WorkerConfig>;
  /** The models it serves; undefined: every model no other pool names. */
  readonly models: ReadonlySet<string> | undefined;
  /** LoRA adapters of its base model (requests name them in `model`); empty: none declared. */
  readonly adapters: ReadonlySet<string>;
}

export type PoolPick =
  | { kind: 'pool'; pool: Pool; via: 'knob' | 'model' | 'default'; unknownKnob?: string }
  | { kind: 'reject'; error: KvgateError; unknownKnob?: string };

/** Longest model name echoed back in an error message. */
const MAX_MODEL_CHARS = 128;

export class PoolTable {
  private readonly byName = new Map<string, Pool>();
  private readonly byModel = new Map<string, Pool>();
  private readonly byWorker = new Map<string, Pool>();
  private readonly catchAll: Pool | undefined;
  readonly default: Pool;

  constructor(config: Config) {
    let catchAll: Pool | undefined;
    for (const p of config.pools) {
      const pool: Pool = {
        name: p.name,
        config: p,
        workerIds: p.workers.map((w) => w.id),
        workers: new Map(p.workers.map((w) => [w.id, w])),
        models: p.models ? new Set(p.models) : undefined,
        adapters: new Set(p.adapters ?? []),
      };
      this.byName.set(p.name, pool);
      for (const m of p.models ?? []) this.byModel.set(m, pool);
      // An adapter belongs to its base model's pool: only those workers can load it.
      for (const a of p.adapters ?? []) this.byModel.set(a, pool);
      for (const w of p.workers) this.byWorker.set(w.id, pool);
      if (!p.models) catchAll ??= pool;
    }
    this.catchAll = catchAll;
    // The schema guarantees default_pool names a pool.
    this.default = this.byName.get(config.default_pool)!;
  }

  get(name: string): Pool | undefined {
    return this.byName.get(name);
  }

  all(): Pool[] {
    return [...this.byName.values()];
  }

  poolOfWorker(id: string): Pool | undefined {
    return this.byWorker.get(id);
  }

  pick(knobPool: string | undefined, model: string | undefined): PoolPick {
    const m = model === '' ? undefined : model;
    const pinned = knobPool === undefined ? undefined : this.byName.get(knobPool);
    const unknownKnob = knobPool !== undefined && !pinned ? { unknownKnob: knobPool } : {};
    if (pinned) {
      if (m !== undefined && pinned.models && !pinned.models.has(m) && !pinned.adapters.has(m)) {
        return reject(`model "${cut(m)}" is not served by pool "${pinned.name}", the pool of this route`, m, pinned.name);
      }
      return { kind: 'pool', pool: pinned, via: 'knob' };
    }
    if (m !== undefined) {
      const pool = this.byModel.get(m) ?? this.catchAll;
      if (!pool) return { ...reject(`model "${cut(m)}" is not served here`, m, undefined), ...unknownKnob };
      return knobPool === undefined ? { kind: 'pool', pool, via: 'model' } : { kind: 'pool', pool, via: 'model', unknownKnob: knobPool };
    }
    // Two literals rather than `...unknownKnob`: this runs on every request.
    return knobPool === undefined ? { kind: 'pool', pool: this.default, via: 'default' } : { kind: 'pool', pool: this.default, via: 'default', unknownKnob: knobPool };
  }
}

function reject(message: string, model: string, pool: string | undefined): PoolPick {
  return { kind: 'reject', error: new KvgateError('model_not_found', message, { details: { model: cut(model), ...(pool ? { pool } : {}) } }) };
}

function cut(model: string): string {
  return model.length > MAX_MODEL_CHARS ? `${model.slice(0, MAX_MODEL_CHARS)}…` : model;
}
