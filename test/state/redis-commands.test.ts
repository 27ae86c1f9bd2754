import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { decide, decideKeys, defineScripts, heartbeat, migrate, packBlocks, PoolKeys, readWriteBack, writeBackCall, type DecideCommit, type DecideQuery } from '../../src/state/redis-commands.js';
import { NO_PRECONDITIONS } from '../helpers/commits.js';
import { startRedis, type TestRedis } from '../helpers/redis-server.js';

/** DECIDE_LUA's KEYS as its header lists them, built the plain way (the oracle). */
function plainDecideKeys(keys: PoolKeys, q: DecideQuery, commit?: DecideCommit): string[] {
  const expected = commit?.preconditions.affinity;
  return [
    q.key === undefined ? keys.states : keys.affinity(q.key),
    keys.states,
    ...q.workers.map((w) => keys.inflight(w)),
    commit && q.blocks.length > 0 ? keys.recency(commit.worker) : keys.states,
    commit ? keys.sessions(commit.worker) : keys.states,
    expected !== undefined && commit ? keys.sessions(expected) : keys.states,
    ...(q.blocks.length > 0 ? q.workers.map((w) => keys.holdings(w)) : []),
    // Live sessions: counted by the decision, or its session weighed or moved by the commit.
    ...(q.liveWindowMs !== undefined || (commit && q.key !== undefined && (commit.live !== undefined || (expected !== undefined && expected !== commit.worker)))
      ? q.workers.map((w) => keys.live(w))
      : []),
  ];
}

function commitOn(worker: string, affinity: string | undefined): DecideCommit {
  return {
    worker,
    preconditions: { ...NO_PRECONDITIONS, affinity },
    affinityTtlMs: 1000,
    leaseMember: 'id|k',
    leaseTtlMs: 1000,
    prefixTtlMs: 1000,
    freshMs: 0,
    capacityBlocks: 10,
    notAfter: 0,
  };
}

describe('DECIDE_LUA keys', () => {
  test('decideKeys lays out the keys exactly as the script header lists them, whatever the query', () => {
    const name = fc.string({ minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(
        fc.uniqueArray(name, { minLength: 1, maxLength: 20 }),
        fc.option(name, { nil: undefined }),
        fc.array(fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 16, maxLength: 16 }), { maxLength: 300 }),
        fc.nat(),
        fc.option(fc.nat(), { nil: undefined }),
        fc.boolean(),
        fc.option(fc.constantFrom(1, 10_000), { nil: undefined }),
        fc.option(fc.boolean(), { nil: undefined }),
        (workers, key, blocks, chosen, expected, isCommit, liveWindowMs, live) => {
          const keys = new PoolKeys('kv', 'pool-a');
          const q: DecideQuery = liveWindowMs === undefined ? { workers, key, blocks } : { workers, key, blocks, liveWindowMs };
          const commit = isCommit ? commitOn(workers[chosen % workers.length]!, expected === undefined ? undefined : workers[expected % workers.length]) : undefined;
          if (commit && live !== undefined) commit.live = live;
          assert.deepEqual(decideKeys(keys, q, commit), plainDecideKeys(keys, q, commit));
        },
      ),
      { numRuns: 300 },
    );
  });

  test('the in-flight and block keys follow a changed worker list (kept per list, not per pool)', () => {
    const keys = new PoolKeys('kv', 'p');
    const a = ['w1', 'w2'];
    const b = ['w2', 'w3', 'w4'];
    const q = (workers: string[]): DecideQuery => ({ workers, key: undefined, blocks: ['b0', 'b1'] });
    assert.deepEqual(decideKeys(keys, q(a)), plainDecideKeys(keys, q(a)));
    assert.deepEqual(decideKeys(keys, q(b)), plainDecideKeys(keys, q(b)));
    assert.deepEqual(decideKeys(keys, q(a)), plainDecideKeys(keys, q(a)));
    // A new array with the same names (a config reload) gives the same keys.
    assert.deepEqual(decideKeys(keys, q([...b])), plainDecideKeys(keys, q(b)));
  });
});

/** One real redis-server for the tests of this file that run scripts. */
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

describe('DECIDE_LUA prefix match', () => {
  // Each worker's holdings of the prompt: a leading run of live blocks, then anything (live,
  // lapsed or absent). The script probes a worker's first block alone unless the worker before it
  // held the prompt, then reads in growing chunks (8, 32, ...): runs of any length, in any order of
  // holders and non-holders, with live holdings past a gap that must not count. Lapse times are
  // compared as strings when they have as many digits as Redis's clock, as numbers otherwise:
  // holdings of both kinds, on both sides of now ('soon' and 'past' have the clock's length,
  // 'far' and '1' do not).
  const holding = fc.constantFrom('live', 'soon', 'far', 'lapsed', 'past', 'absent');
  // Block ids of one ASCII length go to the script joined in one argument and are cut apart there
  // ('hex', as the keys layer makes them); others one argument each ('varying', and 'wide': one
  // length in UTF-16 units but not in bytes).
  const idStyle = fc.constantFrom('hex', 'varying', 'wide');
  const blockId = (style: string, j: number) =>
    style === 'hex' ? (j * 0x9e3779b9).toString(16).padStart(16, '0') : style === 'wide' ? `\u00fc${String(j).padStart(3, '0')}` : `blk${j}`;
  const isLive = (h: string) => h === 'live' || h === 'soon' || h === 'far';
  test("each worker's depth is its leading run of live holdings, whatever the order of holders", async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 50 }).chain((m) =>
          fc.tuple(fc.constant(m), fc.array(fc.tuple(fc.integer({ min: 0, max: m }), fc.array(holding, { minLength: m, maxLength: m })), { minLength: 1, maxLength: 8 })),
        ),
        idStyle,
        async ([m, spec], style) => {
          const keys = new PoolKeys('t', `match${run++}`);
          const workers = spec.map((_, i) => `w${i}`);
          const blocks = Array.from({ length: m }, (_, j) => blockId(style, j));
          const now = Date.now();
          const value: Record<string, string> = {
            live: String(now + 3_600_000),
            soon: String(now + 60_000),
            far: '99999999999999',
            lapsed: '1',
            past: String(now - 60_000),
          };
          const expected = new Map<string, number>();
          const p = redis.pipeline();
          spec.forEach(([lead, rest], i) => {
            const fields: string[] = ['~encoding', 'x'];
            for (let j = 0; j < m; j++) {
              const r = rest[j]!;
              const h = j < lead ? (isLive(r) ? r : 'live') : j === lead ? (isLive(r) ? 'past' : r) : r;
              if (h !== 'absent') fields.push(blocks[j]!, value[h]!);
            }
            p.hset(keys.holdings(workers[i]!), ...fields);
            if (lead > 0) expected.set(workers[i]!, lead);
          });
          await p.exec();
          const reply = await decide(redis, keys, { workers, key: undefined, blocks });
          assert.deepEqual(new Map([...reply.depth].sort()), new Map([...expected].sort()));
        },
      ),
      { numRuns: 150 },
    );
  });

  test('the reply names each state, count and depth with its own worker, whatever the names hold', async () => {
    const keys = new PoolKeys('t', 'names');
    // Separators a reader might split on, quotes JSON escapes, a name that is a number.
    const workers = ['a|b,c', 'x y:z', '"q"\\', '7', 'ü-w'];
    const blocks = Array.from({ length: 12 }, (_, j) => `nb${j}`);
    const far = String(Date.now() + 3_600_000);
    await redis.hset(keys.states, 'a|b,c', 'draining', '7', 'pressured', 'x y:z', 'down');
    await redis.hset(keys.holdings('7'), ...blocks.slice(0, 3).flatMap((b) => [b, far]));
    await redis.hset(keys.holdings('ü-w'), ...blocks.flatMap((b) => [b, far]));
    await redis.zadd(keys.inflight('x y:z'), Date.now() + 3_600_000, 'l1|k', Date.now() + 3_600_000, 'l2|k');
    const reply = await decide(redis, keys, { workers, key: undefined, blocks });
    assert.deepEqual(new Map([...reply.states].sort()), new Map([['7', 'pressured'], ['a|b,c', 'draining'], ['x y:z', 'down']]));
    assert.deepEqual(new Map([...reply.depth].sort()), new Map([['7', 3], ['ü-w', 12]]));
    assert.deepEqual(reply.inflight, [0, 2, 0, 0, 0]);
    assert.equal(reply.ok, false);
    assert.equal(reply.late, false);
  });

  test('a commit records each block id as itself, cut from one argument or passed one by one', async () => {
    for (const style of ['hex', 'varying', 'wide']) {
      const keys = new PoolKeys('t', `ids-${style}`);
      const blocks = Array.from({ length: 300 }, (_, j) => blockId(style, j));
      assert.equal(packBlocks(blocks).width, style === 'hex' ? 16 : 0, style);
      const held = await decide(redis, keys, { workers: ['w1', 'w2'], key: undefined, blocks }, { ...commitOn('w1', undefined), prefixTtlMs: 60_000, capacityBlocks: 1000 });
      assert.equal(held.ok, true);
      assert.deepEqual((await redis.hkeys(keys.holdings('w1'))).filter((f) => f !== '~encoding').sort(), [...blocks].sort(), style);
      // Recency: the prompt's blocks, deepest (lowest score) first.
      assert.deepEqual(await redis.zrange(keys.recency('w1'), '0', '-1'), [...blocks].reverse(), style);
      const read = await decide(redis, keys, { workers: ['w1', 'w2'], key: undefined, blocks });
      assert.deepEqual([...read.depth], [['w1', 300]], style);
    }
  });

  test('block ids are joined only when every one has the same length in bytes', () => {
    assert.deepEqual(packBlocks(['ab', 'cd', 'ef']), { width: 2, arg: 'abcdef' });
    assert.equal(packBlocks(['ab', 'c']).width, 0);
    assert.equal(packBlocks(['\u00fca', 'bb']).width, 0, 'same UTF-16 length, not the same bytes');
    assert.equal(packBlocks(['\ud83d\ude00', 'bb']).width, 0, 'a surrogate pair: two units, four bytes');
    assert.equal(packBlocks(['', '']).width, 0);
    assert.equal(packBlocks([]).width, 0);
  });

  test('a commit past its deadline is read as late, not held, and writes nothing', async () => {
    const keys = new PoolKeys('t', 'late');
    const workers = ['w1', 'w2'];
    const q: DecideQuery = { workers, key: 's:k', blocks: ['lb0', 'lb1'] };
    const late = await decide(redis, keys, q, { ...commitOn('w1', undefined), notAfter: 1 });
    assert.equal(late.late, true);
    assert.equal(late.ok, false);
    assert.equal(await redis.exists(keys.affinity('s:k'), keys.inflight('w1'), keys.holdings('w1')), 0);
    // The same commit without a deadline holds and writes: the deadline alone made the difference.
    const held = await decide(redis, keys, q, commitOn('w1', undefined));
    assert.equal(held.late, false);
    assert.equal(held.ok, true);
    assert.equal(held.affinity, 'w1');
    assert.deepEqual(held.inflight, [1, 0]);
    assert.equal(await redis.get(keys.affinity('s:k')), 'w1');
  });
});

/**
 * A key holding many entries, each lapsing on its own, lives as long as its longest-lived entry:
 * an entry written under a shorter TTL (after a config reload lowered it, or by a replica still on
 * another config) never shortens the key's expiry, which would take the older entries with it.
 */
describe('key expiry only ever extends', () => {
  const HOUR = 3_600_000;
  const prompt = (tag: string) => Array.from({ length: 12 }, (_, j) => `${tag}${j}`);

  test('a commit under a shorter prefix TTL leaves the holdings recorded under the longer one', async () => {
    const keys = new PoolKeys('t', 'prefix-ttl');
    const workers = ['w1', 'w2'];
    const older = prompt('old');
    const long = await decide(redis, keys, { workers, key: undefined, blocks: older }, { ...commitOn('w1', undefined), prefixTtlMs: HOUR, capacityBlocks: 100 });
    assert.equal(long.ok, true);
    // A new key gets an expiry (a key without one must not be read as lasting longer).
    assert.ok((await redis.pttl(keys.holdings('w1'))) > HOUR - 60_000, "(await redis.pttl(keys.holdings('w1'))) > HOUR - 60_000");
    const short = await decide(redis, keys, { workers, key: undefined, blocks: prompt('new') }, { ...commitOn('w1', undefined), prefixTtlMs: 100, capacityBlocks: 100 });
    assert.equal(short.ok, true);
    assert.ok((await redis.pttl(keys.holdings('w1'))) > HOUR - 60_000, 'holdings key expiry cut short');
    assert.ok((await redis.pttl(keys.recency('w1'))) > HOUR - 60_000, 'recency key expiry cut short');
    // Past the short TTL, the older prompt is still held in full; the newer one has lapsed.
    await new Promise((r) => setTimeout(r, 300));
    const read = await decide(redis, keys, { workers, key: undefined, blocks: older });
    assert.equal(read.depth.get('w1'), older.length);
    assert.equal((await decide(redis, keys, { workers, key: undefined, blocks: prompt('new') })).depth.get('w1'), undefined);
  });

  test("a commit under a shorter affinity or lease TTL leaves the worker's other sessions and leases", async () => {
    const keys = new PoolKeys('t', 'session-ttl');
    const workers = ['w1', 'w2'];
    const first = await decide(redis, keys, { workers, key: 's:a', blocks: [] }, { ...commitOn('w1', undefined), leaseMember: 'l1|s:a', affinityTtlMs: HOUR, leaseTtlMs: HOUR });
    assert.equal(first.ok, true);
    const second = await decide(redis, keys, { workers, key: 's:b', blocks: [] }, { ...commitOn('w1', undefined), leaseMember: 'l2|s:b', affinityTtlMs: 100, leaseTtlMs: 100 });
    assert.equal(second.ok, true);
    assert.ok((await redis.pttl(keys.sessions('w1'))) > HOUR - 60_000, 'session set expiry cut short');
    assert.ok((await redis.pttl(keys.inflight('w1'))) > 2 * HOUR - 60_000, 'lease set expiry cut short');
  });

  test('a migration, renewal, restore or heartbeat with a shorter TTL leaves the key its longer expiry', async () => {
    const keys = new PoolKeys('t', 'other-ttl');
    const far = Date.now() + HOUR;
    // w2's session set holds a session for an hour; a session with 200 ms left moves onto it.
    await redis.zadd(keys.sessions('w2'), far, 's:long');
    await redis.pexpire(keys.sessions('w2'), HOUR);
    await redis.set(keys.affinity('s:short'), 'w1', 'PX', 200);
    await redis.zadd(keys.sessions('w1'), Date.now() + 200, 's:short');
    const moved = await migrate(redis, keys, 'w1', [{ key: 's:short', to: 'w2' }], 'test', { defaultTtlMs: 100, streamMaxLen: 10 });
    assert.deepEqual(moved.moved.map(({ key, to }) => ({ key, to })), [{ key: 's:short', to: 'w2' }]);
    assert.ok(moved.moved[0]!.ttlMs > 0 && moved.moved[0]!.ttlMs <= 200, 'the moved affinity keeps what it had left');
    assert.ok((await redis.pttl(keys.sessions('w2'))) > HOUR - 60_000, 'migration cut the target session set short');
    // Leases of one worker: one held for an hour, another renewed or restored for 100 ms.
    await redis.zadd(keys.inflight('w1'), far, 'long|k', far, 'short|k');
    await redis.pexpire(keys.inflight('w1'), 2 * HOUR);
    await redis.kvgateRenew(keys.inflight('w1'), 100, 'short|k');
    assert.ok((await redis.pttl(keys.inflight('w1'))) > 2 * HOUR - 60_000, 'renewal cut the lease set short');
    await redis.kvgateRestoreLeases(keys.inflight('w1'), 100, 'other|k');
    assert.ok((await redis.pttl(keys.inflight('w1'))) > 2 * HOUR - 60_000, 'restore cut the lease set short');
    // Gates: one with a long heartbeat TTL, then one with a short one.
    await heartbeat(redis, keys, 'slow-gate', HOUR);
    await heartbeat(redis, keys, 'fast-gate', 100);
    assert.ok((await redis.pttl(keys.gates)) > 4 * HOUR - 60_000, 'heartbeat cut the gates set short');
    assert.deepEqual((await heartbeat(redis, keys, 'fast-gate', 100)).sort(), ['fast-gate', 'slow-gate']);
  });
});

describe("a session joining a worker's session set drops the set's lapsed sessions (as a commit's join does)", () => {
  const HOUR = 3_600_000;

  /** w's session set: two sessions that lapsed a second ago and one live for an hour. */
  async function withLapsed(keys: PoolKeys, w: string): Promise<void> {
    const now = Date.now();
    await redis.zadd(keys.sessions(w), now - 1000, 's:gone-1', now - 1000, 's:gone-2', now + HOUR, 's:live');
    await redis.pexpire(keys.sessions(w), HOUR);
  }

  test('a write-back', async () => {
    const keys = new PoolKeys('t', 'write-back-prune');
    await withLapsed(keys, 'w1');
    const [n, args] = writeBackCall(keys, [{ key: 's:back', worker: 'w1', ttlMs: HOUR }]);
    assert.deepEqual(readWriteBack(await redis.kvgateWriteBack(n, args)).map((r) => r?.worker), ['w1']);
    assert.deepEqual((await redis.zrange(keys.sessions('w1'), '0', '-1')).sort(), ['s:back', 's:live'], 'only the live sessions are left');
  });

  test('a migration, onto its target', async () => {
    const keys = new PoolKeys('t', 'migrate-prune');
    await withLapsed(keys, 'w2');
    await redis.set(keys.affinity('s:moving'), 'w1', 'PX', HOUR);
    await redis.zadd(keys.sessions('w1'), Date.now() + HOUR, 's:moving');
    const moved = await migrate(redis, keys, 'w1', [{ key: 's:moving', to: 'w2' }], 'test', { defaultTtlMs: HOUR, streamMaxLen: 10 });
    assert.deepEqual(moved.moved.map((m) => m.to), ['w2']);
    assert.deepEqual((await redis.zrange(keys.sessions('w2'), '0', '-1')).sort(), ['s:live', 's:moving'], 'only the live sessions are left');
  });
});
