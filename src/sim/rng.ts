/**
 * Seeded randomness. Every random choice in the simulator (synthetic workloads, the Dynamo-style
 * tie-break) draws from one of these, so a run is a pure function of its flags and `--seed`.
 */

/** mulberry32: tiny, fast, and the same sequence on every machine and Node version. */
export class Rng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Uniform integer in [lo, hi], both inclusive. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** Exponential with the given mean (Poisson inter-arrival gaps). */
  exp(mean: number): number {
    return -mean * Math.log(1 - this.next());
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)]!;
  }

  /** A child generator with its own stream, so adding draws in one place does not shift another. */
  fork(salt: number): Rng {
    return new Rng(mix32(this.state ^ Math.imul(salt + 1, 0x9e3779b1)));
  }
}

/** Zipf(s) over ranks 0..n-1: a few documents or prompts are hot, most are cold (web-like popularity). */
export class Zipf {
  private readonly cdf: Float64Array;

  constructor(
    n: number,
    s: number,
    private readonly rng: Rng,
  ) {
    this.cdf = new Float64Array(n);
    let sum = 0;
    for (let k = 0; k < n; k++) this.cdf[k] = sum += 1 / Math.pow(k + 1, s);
    for (let k = 0; k < n; k++) this.cdf[k]! /= sum;
  }

  sample(): number {
    const u = this.rng.next();
    let lo = 0;
    let hi = this.cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** A 32-bit integer finalizer (from murmur3), to turn ids and salts into well-spread seeds. */
export function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** FNV-1a of a string, for seeding from names. */
export function hashString32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
