/**
 * DECIDE_LUA searches a worker's holdings for the deepest live block of the prompt instead of
 * reading them block by block. The search is exact only while "live" has no gap along a chain,
 * which commits keep true except across a lapse time below one already written (a shorter prefix
 * TTL); then the script scans until the older holdings have lapsed. These tests hold every depth
 * the script answers to the scan's: the leading run of live blocks, walked here from the worker's
 * whole holdings hash, read in the same transaction as the decision (so with the same holdings and
 * no key expiring in between), at the script's own clock (`now` of its reply).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { decide, decideKeys, defineScripts, packBlocks, PoolKeys, type DecideCommit } from '../../src/state/redis-commands.js';
import { HOLDINGS_ENCODING_FIELD } from '../../src/state/redis-scripts.js';
import { NO_PRECONDITIONS } from '../helpers/commits.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

let server: TestRedis;
let redis: Redis;
before(async () => {
  server = await startRedis();
  redis = new Redis(server.url);
  defineScripts(redis);
});
after(async () => {
  redis.disconnect();
  await server.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A small seeded generator (mulberry32), so a failing scenario can be rerun. */
function rng(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/** Chained block ids, as the keys layer's: block j's id names the whole prefix 1..j. */
function chainIds(tokens: readonly number[]): string[] {
  const ids: string[] = [];
  let prev = 'seed';
  for (const t of tokens) {
    prev = createHash('sha1').update(`${prev}:${t}`).digest('hex').slice(0, 16);
    ids.push(prev);
  }
  return ids;
}

/** `freshMs`: a prefix the worker was sent less than this long ago is not written again (0: always written). */
function commit(worker: string, prefixTtlMs: number, capacityBlocks: number, freshMs = 0): DecideCommit {
  return {
    worker,
    preconditions: NO_PRECONDITIONS,
    affinityTtlMs: 60_000,
    leaseMember: `l${worker}|k`,
    leaseTtlMs: 60_000,
    prefixTtlMs,
    freshMs,
    capacityBlocks,
    notAfter: 0,
  };
}

interface Checked {
  /** Workers whose depth was at least 1 for a prompt long enough to be searched. */
  held: number;
  /** ... of them, those whose mark allowed the search. */
  searched: number;
  /** ... of them, held part of the prompt (the search had a bracket to narrow). */
  partial: number;
  /** Workers whose mark made the script scan although they held the first block. */
  scanned: number;
}

/**
 * One read of `blocks` on `workers`, in a transaction with each worker's holdings; asserts every
 * depth equals the scan's.
 */
async function checkRead(keys: PoolKeys, workers: readonly string[], blocks: readonly string[], tally: Checked, what: string): Promise<void> {
  const packed = packBlocks(blocks);
  const spec = JSON.stringify({ mode: 'read', keyed: false, workers, leaseKey: '', idWidth: packed.width });
  const k = decideKeys(keys, { workers, key: undefined, blocks });
  const tx = redis.multi().kvgateDecide(k.length, k, spec, packed.arg);
  for (const w of workers) tx.hgetall(keys.holdings(w));
  const results = (await tx.exec())!;
  for (const [err] of results) if (err) throw err;
  const reply = JSON.parse(results[0]![1] as string) as { now: number; depth: Record<string, number> | unknown[] };
  const got = Array.isArray(reply.depth) ? {} : reply.depth;
  workers.forEach((w, i) => {
    const hash = results[i + 1]![1] as Record<string, string>;
    let d = 0;
    while (d < blocks.length && hash[blocks[d]!] !== undefined && Number(hash[blocks[d]!]) >= reply.now) d++;
    assert.equal(got[w] ?? 0, d, `${what}: worker ${w}, ${blocks.length} blocks`);
    if (d > 0 && blocks.length >= 10) {
      tally.held++;
      const mark = /^(\d+) (\d+) /.exec(hash[HOLDINGS_ENCODING_FIELD] ?? '');
      if (mark && Number(mark[2]) < reply.now) {
        tally.searched++;
        if (d < blocks.length) tally.partial++;
      } else tally.scanned++;
    }
  });
}

/** One pool's history: prompts sharing prefixes, several workers, commits under two TTLs. */
class Scenario {
  readonly keys: PoolKeys;
  readonly workers: string[];
  readonly prompts: string[][] = [];
  /** @param freshMs passed on every commit: with it, a prefix committed that recently is not written again. */
  constructor(
    readonly seed: number,
    readonly freshMs = 0,
    readonly r = rng(seed),
  ) {
    this.keys = new PoolKeys('search', `p${seed}-${freshMs}`);
    this.workers = Array.from({ length: 1 + r(5) }, (_, i) => `w${i}`);
    // Token streams: the first from scratch, each later one a prefix of an earlier one (any
    // length, none included) and its own continuation. Up to 700 blocks (past max_blocks, 512).
    const streams: number[][] = [];
    for (let p = 0; p < 8; p++) {
      const from = p === 0 ? [] : streams[r(p)]!;
      const keep = from.slice(0, r(from.length + 1));
      const long = r(4) === 0 ? 300 + r(400) : r(150);
      const extra = Array.from({ length: 1 + long }, () => r(1_000_000));
      streams.push([...keep, ...extra].slice(0, 700));
    }
    for (const s of streams) this.prompts.push(chainIds(s));
  }
  /** A prompt to route or read: one of the scenario's, or a prefix of one. */
  prompt(): string[] {
    const p = this.prompts[this.r(this.prompts.length)]!;
    return this.r(3) === 0 ? p.slice(0, 1 + this.r(p.length)) : p;
  }
  /** Each commit's worker and prompt. */
  readonly routed: Array<[string, string[]]> = [];
  async commits(count: number, ttlMs: number): Promise<void> {
    for (let c = 0; c < count; c++) {
      const w = this.workers[this.r(this.workers.length)]!;
      const capacity = [15, 60, 200, 800, 5000][this.r(5)]!;
      const blocks = this.prompt();
      const reply = await decide(redis, this.keys, { workers: this.workers, key: undefined, blocks }, commit(w, ttlMs, capacity, this.freshMs));
      assert.equal(reply.ok, true);
      this.routed.push([w, blocks]);
    }
  }
  /**
   * Prefixes of prompts routed before, on the same workers, under `ttlMs`: each pick a shorter
   * prefix of the one before it, so that when the first lapses and the second has not, a worker
   * holds blocks 1..a live, a+1..b lapsed, b+1.. live (under the longer TTL).
   */
  async shortPrefixes(count: number, ttlMs: number): Promise<Array<[string, string[]]>> {
    const done: Array<[string, string[]]> = [];
    for (let c = 0; c < count; c++) {
      const [w, p] = this.routed[this.r(this.routed.length)]!;
      if (p.length < 2) continue;
      const blocks = p.slice(0, 1 + this.r(p.length - 1));
      await decide(redis, this.keys, { workers: this.workers, key: undefined, blocks }, commit(w, ttlMs, 5000, this.freshMs));
      done.push([w, blocks]);
    }
    return done;
  }
  async shorterStill(picked: Array<[string, string[]]>, ttlMs: number): Promise<void> {
    for (const [w, p] of picked) {
      if (p.length < 2) continue;
      const blocks = p.slice(0, 1 + this.r(p.length - 1));
      await decide(redis, this.keys, { workers: this.workers, key: undefined, blocks }, commit(w, ttlMs, 5000, this.freshMs));
    }
  }
  async reads(tally: Checked, what: string): Promise<void> {
    for (const p of this.prompts) await checkRead(this.keys, this.workers, p, tally, `seed ${this.seed}, ${what}`);
    for (let k = 0; k < 4; k++) await checkRead(this.keys, this.workers, this.prompt(), tally, `seed ${this.seed}, ${what}`);
  }
}

describe('DECIDE_LUA: the search for the deepest live block answers what the scan does', () => {
  // Every commit of a test comes within milliseconds of the last: with freshMs as long as the TTL,
  // every prefix a worker holds counts as fresh, and commits write only the blocks past it.
  for (const freshMs of [0, 60_000]) {
    test(`random chains, partial holdings, capacity trims, several workers, long prompts (freshMs ${freshMs})`, async () => {
      const tally: Checked = { held: 0, searched: 0, partial: 0, scanned: 0 };
      const scenarios = Array.from({ length: 40 }, (_, i) => new Scenario(1000 + i, freshMs));
      await Promise.all(scenarios.map((s) => s.commits(12, 60_000)));
      await Promise.all(scenarios.map((s) => s.reads(tally, 'one TTL')));
      await Promise.all(scenarios.map((s) => s.commits(12, 60_000)));
      await Promise.all(scenarios.map((s) => s.reads(tally, 'one TTL, more commits')));
      // The search ran, often on part of a prompt, and nothing made the script fall back to the scan.
      assert.ok(tally.searched > 200, `searched ${tally.searched}`);
      assert.ok(tally.partial > 50, `partial ${tally.partial}`);
      assert.equal(tally.scanned, 0);
    });
  }

  for (const freshMs of [0, 60_000]) test(`a shorter prefix TTL over deeper blocks written under a longer one: scanned until they lapse, then searched (freshMs ${freshMs})`, async () => {
    const SHORT = 150;
    const LONG = 1500;
    const tally: Checked = { held: 0, searched: 0, partial: 0, scanned: 0 };
    const scenarios = Array.from({ length: 30 }, (_, i) => new Scenario(2000 + i, freshMs));
    await Promise.all(scenarios.map((s) => s.commits(10, LONG)));
    const longAt = Date.now();
    await Promise.all(scenarios.map((s) => s.reads(tally, 'long TTL')));
    // Two rounds of short-TTL commits of prefixes, 80 ms apart: once the first round has lapsed
    // and the second not, a worker can hold blocks 1..a live, a+1..b lapsed, b+1.. live again.
    const picked = await Promise.all(scenarios.map((s) => s.shortPrefixes(8, SHORT)));
    await sleep(80);
    await Promise.all(scenarios.map((s, i) => s.shorterStill(picked[i]!, SHORT)));
    await sleep(100);
    const before = tally.scanned;
    await Promise.all(scenarios.map((s) => s.reads(tally, 'first short round lapsed')));
    assert.ok(tally.scanned > before, 'the TTL change made the script scan');
    await sleep(SHORT);
    await Promise.all(scenarios.map((s) => s.reads(tally, 'both short rounds lapsed')));
    // Back to the long TTL (a longer lapse than any written: the search stays exact), then past
    // every holding written before the short commits: searched again.
    await Promise.all(scenarios.map((s) => s.commits(6, LONG)));
    await Promise.all(scenarios.map((s) => s.reads(tally, 'long TTL again')));
    await sleep(Math.max(0, longAt + LONG + 100 - Date.now()));
    const searched = tally.searched;
    await Promise.all(scenarios.map((s) => s.reads(tally, 'past the first long holdings')));
    await Promise.all(scenarios.map((s) => s.commits(6, LONG)));
    await Promise.all(scenarios.map((s) => s.reads(tally, 'past the first long holdings, more commits')));
    assert.ok(tally.searched - searched > 100, `searched again ${tally.searched - searched}`);
  });

  test('a hash without a mark (an earlier release wrote it) is scanned, and after a commit only once its older holdings lapse', async () => {
    const keys = new PoolKeys('search', 'unmarked');
    const workers = ['w1'];
    const blocks = chainIds(Array.from({ length: 40 }, (_, j) => j));
    const now = Date.now();
    const tally: Checked = { held: 0, searched: 0, partial: 0, scanned: 0 };
    // Blocks 1-5 live, 6-7 lapsed, 8-40 live: no commit of one TTL leaves this; the earlier
    // layout's constant in the encoding field.
    const fields = [HOLDINGS_ENCODING_FIELD, 'a value longer than hash-max-listpack-value keeps this hash a hash table'];
    blocks.forEach((b, j) => fields.push(b, String(j < 5 || j >= 7 ? now + 60_000 : now - 1000)));
    await redis.hset(keys.holdings('w1'), ...fields);
    await redis.pexpire(keys.holdings('w1'), 400);
    await checkRead(keys, workers, blocks, tally, 'unmarked');
    // A commit of blocks 1-3 marks the hash: scanned until the key's expiry (400 ms).
    await decide(redis, keys, { workers, key: undefined, blocks: blocks.slice(0, 3) }, commit('w1', 60_000, 1000));
    await checkRead(keys, workers, blocks, tally, 'marked by a commit');
    assert.equal(tally.searched, 0);
    assert.equal(tally.scanned, 2);
  });
});

describe('DECIDE_LUA: a prefix committed less than freshMs ago is not written again', () => {
  const workers = ['w1', 'w2'];
  const blocks = chainIds(Array.from({ length: 40 }, (_, j) => 7000 + j));
  async function holdings(keys: PoolKeys): Promise<{ lapse: string[]; score: number[]; mark: string }> {
    const lapse = await redis.hmget(keys.holdings('w1'), ...blocks);
    const score = await Promise.all(blocks.map(async (b) => Number(await redis.zscore(keys.recency('w1'), b))));
    const mark = (await redis.hget(keys.holdings('w1'), HOLDINGS_ENCODING_FIELD)) ?? '';
    return { lapse: lapse.map((v) => v ?? ''), score, mark };
  }
  const route = (keys: PoolKeys, n: number, ttlMs: number, freshMs: number, capacity = 1000) =>
    decide(redis, keys, { workers, key: undefined, blocks: blocks.slice(0, n) }, commit('w1', ttlMs, capacity, freshMs));

  test('only the blocks past a fresh prefix are written, with its lapse time and below its scores', async () => {
    const keys = new PoolKeys('search', 'fresh');
    assert.equal((await route(keys, 20, 60_000, 1000)).ok, true);
    const first = await holdings(keys);
    await sleep(5);
    // The whole prompt, its first 20 blocks routed 5 ms ago.
    assert.equal((await route(keys, 40, 60_000, 1000)).ok, true);
    const second = await holdings(keys);
    assert.deepEqual(second.lapse.slice(0, 20), first.lapse.slice(0, 20), 'the fresh prefix is not rewritten');
    assert.deepEqual(second.score.slice(0, 20), first.score.slice(0, 20));
    assert.deepEqual(second.lapse.slice(20), Array(20).fill(first.lapse[19]), 'the new blocks lapse with the prefix');
    for (let j = 1; j < 40; j++) assert.equal(second.score[j], second.score[j - 1]! - 1, `recency falls along the chain at block ${j + 1}`);
    assert.equal(second.mark, first.mark, 'the mark is unchanged: nothing lapses later than before');
    // All of it fresh now: the commit goes through and writes no holding.
    await sleep(5);
    assert.equal((await route(keys, 40, 60_000, 1000)).ok, true);
    assert.deepEqual(await holdings(keys), second);
  });

  test('without freshMs, past it, or under another TTL, every block is written afresh', async () => {
    const keys = new PoolKeys('search', 'stale');
    await route(keys, 20, 60_000, 1000);
    const first = await holdings(keys);
    await sleep(5);
    await route(keys, 40, 60_000, 0);
    const unthrottled = await holdings(keys);
    assert.ok(Number(unthrottled.lapse[0]) > Number(first.lapse[0]), 'freshMs 0: rewritten');
    assert.deepEqual(unthrottled.lapse, Array(40).fill(unthrottled.lapse[0]));
    assert.ok(unthrottled.score[0]! > first.score[0]!, 'and ranked above every earlier routing');
    await sleep(30);
    await route(keys, 40, 60_000, 20);
    const past = await holdings(keys);
    assert.ok(Number(past.lapse[0]) > Number(unthrottled.lapse[0]), 'older than freshMs: rewritten');
    // A shorter TTL (a reload): written in full, and the mark keeps the worker scanned.
    await sleep(5);
    await route(keys, 40, 30_000, 60_000);
    const shorter = await holdings(keys);
    assert.ok(Number(shorter.lapse[0]) < Number(past.lapse[0]), 'the shorter TTL is written');
    const [latest, scanUntil] = /^(\d+) (\d+) /.exec(shorter.mark)!.slice(1).map(Number);
    assert.equal(latest, Number(past.lapse[0]));
    assert.equal(scanUntil, latest);
  });

  test('a fresh prefix past the capacity: the deepest, least recent blocks go, no gap', async () => {
    const keys = new PoolKeys('search', 'trimmed');
    const other = chainIds(Array.from({ length: 10 }, (_, j) => 9000 + j));
    await decide(redis, keys, { workers, key: undefined, blocks: other }, commit('w1', 60_000, 30, 1000));
    await sleep(2);
    await route(keys, 20, 60_000, 1000, 30);
    await sleep(2);
    // 10 + 40 blocks for room for 30: the ten of the other prompt (routed first) and the ten
    // deepest of this one go.
    await route(keys, 40, 60_000, 1000, 30);
    const kept = await redis.hmget(keys.holdings('w1'), ...blocks);
    assert.deepEqual(kept.map((v) => v !== null), [...Array(30).fill(true), ...Array(10).fill(false)]);
    assert.deepEqual(await redis.hmget(keys.holdings('w1'), ...other), Array(10).fill(null));
    assert.equal(await redis.zcard(keys.recency('w1')), 30);
  });
});
