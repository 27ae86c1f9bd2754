/**
 * Lua run inside Redis, so that a decision's check-and-write is atomic and one round trip.
 * Times come from Redis's own clock (TIME), never from a gate's, so replicas with skewed clocks
 * agree on which leases have expired.
 *
 * The key layout, and the typed bindings that call these scripts, are in ./redis-commands.ts.
 * Every key a script touches is declared in its KEYS (test/faults/redis-script-keys.test.ts).
 */

/**
 * A decision's read, or its check-and-write. Arguments and reply are JSON with named fields; the
 * typed binding (./redis-commands.ts, `decideCall` and `DecideReply`) is the one place that builds
 * and reads them.
 *
 * KEYS (./redis-commands.ts `decideKeys`), n workers and m blocks:
 *   1          the session's affinity (unkeyed: the states hash again, never touched)
 *   2          the pool's worker states
 *   2+i        worker i's in-flight leases, i = 1..n
 *   3+n        the chosen worker's block set       } commits only; a read passes the states
 *   4+n        the chosen worker's session set     } hash in their place, never touched
 *   5+n        the expected affinity's session set (also the states hash when there is none)
 *   5+n+j      block j's holders, j = 1..m
 * Every key the script touches is among them (test/faults/redis-script-keys.test.ts), so Redis
 * Cluster and proxies route and check it by its keys. One exception, kept outside the script: a
 * commit past the chosen worker's capacity evicts its oldest blocks, which are not the request's,
 * so the script returns them (`evicted`) and the store deletes the worker from their holders with
 * plain HDELs right after. Until then (or if the gate dies first, until their TTL) the evicted
 * blocks still name the worker as a holder: a hint a little too optimistic, never a wrong lease.
 *
 * A block's id is not sent twice: it is its key less the first `spec.blockKeyPrefix` characters.
 *
 * Releases ride along (`spec.released`: lease members by worker index): this replica's leases that
 * ended since its last command to the pool are removed first, before anything is counted or the
 * deadline checked, so a commit always sees the releases its replica made before it, in order, and
 * a late commit still carries them out. Only workers of KEYS can be named, so every key is declared.
 *
 * In-flight counts are the leases lapsing after now. A commit counts them (one ZCOUNT per worker)
 * and leaves lapsed ones in place; a read (every replica's refresh among them) purges them, and
 * RENEW_LUA purges before its ZADD XX, so a lapsed lease is never counted or brought back.
 *
 * A holding refreshed less than `spec.freshMs` ago (its lapse time is within freshMs of
 * now + prefixTtlMs) is not written again: the holder's time and the block key's TTL stay as they
 * are, so the holding lapses up to freshMs earlier than a rewrite would have made it. The store
 * keeps freshMs a thousandth of the TTL and at most a second (./redis-commands.ts). The recency
 * ZADD is always made (one variadic call), so capacity evictions keep exact routing order.
 */
export const DECIDE_LUA = `
local spec = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #spec.workers
local m = #KEYS - 5 - n
local K_CHOSEN_BLOCKS, K_CHOSEN_SESSIONS, K_EXPECTED_SESSIONS = 3 + n, 4 + n, 5 + n
local function blockKey(j) return KEYS[5 + n + j] end
local bkp = spec.blockKeyPrefix

-- Releases this replica made since its last command to the pool: first, whatever happens next.
if spec.released then
  for _, r in ipairs(spec.released) do redis.call('ZREM', KEYS[2 + r[1]], unpack(r[2])) end
end

local reply = {ok = false, late = false, now = now, affinity = '', keyInflight = 0, evicted = {}}
-- A commit ioredis resent (after NOSCRIPT) or a cluster client retried can arrive after the gate
-- gave up on it and decided locally: it must write nothing then.
if spec.mode == 'commit' and spec.notAfter > 0 and now > spec.notAfter then
  reply.late = true
  return cjson.encode(reply)
end

-- Numbers handed to redis.call are formatted with %.17g, which costs more than the command at 32 KB
-- (a recency score per block): integers are passed as strings formatted with %d instead.
local nowS = string.format('%d', now)
-- In-flight counts are the leases that lapse after now. A read also purges the lapsed ones (every
-- replica's refresh reads each refresh_ms, so they do not pile up); a commit only counts them, one
-- ZCOUNT per worker instead of a ZREMRANGEBYSCORE and a ZCARD.
local live = '(' .. nowS
local counts = {}
for i = 1, n do
  local z = KEYS[2 + i]
  if spec.mode == 'commit' then
    counts[i] = redis.call('ZCOUNT', z, live, '+inf')
  else
    redis.call('ZREMRANGEBYSCORE', z, '-inf', nowS)
    counts[i] = redis.call('ZCARD', z)
  end
end
local aff = false
if spec.keyed then aff = redis.call('GET', KEYS[1]) end
local statePairs = redis.call('HGETALL', KEYS[2])
local states = {}
for i = 1, #statePairs, 2 do states[statePairs[i]] = statePairs[i + 1] end

-- Prefix match: for each configured worker, the leading blocks it holds; stop at the first block
-- none of them holds. A worker gone from the config still holds blocks until they lapse, and no
-- decision may weigh it. Each holder lapses on its own: a worker not sent the block within the
-- TTL stops holding it, even while other workers keep the block's hash alive. On the way, a commit
-- notes when the chosen worker's holding of each block lapses (to skip fresh rewrites below).
local chosenName = false
if spec.mode == 'commit' then chosenName = spec.workers[spec.chosen] end
local chosenUntil = {}
local configured = {}
for _, w in ipairs(spec.workers) do configured[w] = true end
local depth = {}
local alive = configured
for j = 1, m do
  local hs = redis.call('HGETALL', blockKey(j))
  local nxt = {}
  local any = false
  for h = 1, #hs, 2 do
    local w = hs[h]
    if alive[w] then
      local until_ = tonumber(hs[h + 1])
      if until_ > now then
        nxt[w] = true
        depth[w] = j
        any = true
      end
      if w == chosenName then chosenUntil[j] = until_ end
    elseif w == chosenName then
      chosenUntil[j] = tonumber(hs[h + 1])
    end
  end
  if not any then break end
  alive = nxt
end

-- The key's requests in flight on its affine worker (lease members end in "|<key>").
local keyInflight = 0
if aff and spec.leaseKey ~= '' then
  for i, w in ipairs(spec.workers) do
    if w == aff then
      local suffix = '|' .. spec.leaseKey
      for _, mb in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2 + i], live, '+inf')) do
        if string.sub(mb, -#suffix) == suffix then keyInflight = keyInflight + 1 end
      end
    end
  end
end

if spec.mode == 'commit' then
  local ok = (aff or '') == spec.expectedAffinity
  for _, b in ipairs(spec.below) do if counts[b.worker] >= b.limit then ok = false end end
  for _, g in ipairs(spec.atOrAbove) do if counts[g.worker] < g.limit then ok = false end end
  for _, s in ipairs(spec.states) do
    local current = states[s.worker] or 'healthy'
    local allowed = false
    for _, a in ipairs(s.allowed) do if a == current then allowed = true end end
    if not allowed then ok = false end
  end
  if spec.prefix then
    for _, i in ipairs(spec.prefix.over) do
      if (depth[spec.workers[i]] or 0) > spec.prefix.atMost then ok = false end
    end
  end
  if ok then
    local chosen = chosenName
    if spec.keyed then
      local affTtlS = string.format('%d', spec.affinityTtlMs)
      redis.call('SET', KEYS[1], chosen, 'PX', affTtlS)
      -- The worker's session list, scored by when the affinity lapses: preemptive migration
      -- moves the coldest first, and expired ones are dropped when it is read.
      if aff and aff ~= chosen then redis.call('ZREM', KEYS[K_EXPECTED_SESSIONS], spec.leaseKey) end
      redis.call('ZADD', KEYS[K_CHOSEN_SESSIONS], string.format('%d', now + spec.affinityTtlMs), spec.leaseKey)
      redis.call('PEXPIRE', KEYS[K_CHOSEN_SESSIONS], affTtlS)
      if aff ~= chosen then keyInflight = 0 end
      aff = chosen
      keyInflight = keyInflight + 1
    end
    local z = KEYS[2 + spec.chosen]
    redis.call('ZADD', z, string.format('%d', now + spec.leaseTtlMs), spec.leaseMember)
    -- An idle worker's set disappears on its own once its last lease is long gone.
    redis.call('PEXPIRE', z, string.format('%d', spec.leaseTtlMs * 2))
    counts[spec.chosen] = counts[spec.chosen] + 1
    -- The chosen worker now holds the prompt's blocks, until now + TTL. Recency scores are
    -- ms * 1000 minus the block's depth, so within one routing the deepest blocks are the oldest
    -- and go first, as an engine evicts a prefix from its tail.
    if m > 0 then
      local lru = KEYS[K_CHOSEN_BLOCKS]
      local until_ = now + spec.prefixTtlMs
      local untilS = string.format('%d', until_)
      local ttlS = string.format('%d', spec.prefixTtlMs)
      local freshFrom = until_ - spec.freshMs
      local ids = {}
      local recency = {}
      for j = 1, m do
        local bk = blockKey(j)
        ids[j] = string.sub(bk, bkp + 1)
        local held = chosenUntil[j]
        if not held or held < freshFrom then
          redis.call('HSET', bk, chosen, untilS)
          redis.call('PEXPIRE', bk, ttlS)
        end
        recency[2 * j - 1] = string.format('%d', now * 1000 + (100000 - j))
        recency[2 * j] = ids[j]
        if (depth[chosen] or 0) < j then depth[chosen] = j end
      end
      -- In slices: unpack is bounded by Lua's stack.
      for s = 1, 2 * m, 1000 do
        redis.call('ZADD', lru, unpack(recency, s, math.min(s + 999, 2 * m)))
      end
      redis.call('PEXPIRE', lru, ttlS)
      local over = redis.call('ZCARD', lru) - spec.capacityBlocks
      if over > 0 then
        reply.evicted = redis.call('ZRANGE', lru, 0, over - 1)
        redis.call('ZREMRANGEBYRANK', lru, 0, over - 1)
        -- An evicted block of this very prompt is one of ours: unhold it here.
        local mine = {}
        for j = 1, m do mine[ids[j]] = j end
        for _, b in ipairs(reply.evicted) do
          local j = mine[b]
          if j then
            redis.call('HDEL', blockKey(j), chosen)
            if (depth[chosen] or 0) >= j then depth[chosen] = j - 1 end
          end
        end
      end
    end
  end
  reply.ok = ok
end

reply.affinity = aff or ''
reply.keyInflight = keyInflight
reply.inflight = counts
reply.states = states
reply.depth = depth
return cjson.encode(reply)
`;

/**
 * Extends live leases of one worker (only those still present: XX), so a running gate keeps its
 * requests counted while a dead gate's leases lapse.
 * KEYS: [inflight(worker)]; ARGV: [lease TTL ms, lease member…]
 */
export const RENEW_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A lease that lapsed stays lapsed: commits count only live leases without purging the lapsed
-- ones (DECIDE_LUA), so drop them here before XX could bring one back.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
local expiry = now + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return #ARGV - 1
`;

/**
 * Records one scrape. KEYS: [signals hash]; ARGV: [worker, signals JSON or '', error or ''].
 * A failure keeps the last good signals and their time, and counts the failure.
 */
export const PUBLISH_SIGNALS_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec
if ARGV[2] ~= '' then
  rec = {s = cjson.decode(ARGV[2]), t = now, f = 0}
else
  local prev = redis.call('HGET', KEYS[1], ARGV[1])
  rec = prev and cjson.decode(prev) or {s = {}, t = -1, f = 0}
  rec.f = (rec.f or 0) + 1
  rec.e = ARGV[3]
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
return now
`;

/** KEYS: [signals hash]. Returns [now (ms, Redis clock), flat hash]. */
export const READ_SIGNALS_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('HGETALL', KEYS[1])}
`;

/** KEYS: [gates set]; ARGV: [gate id, ttl ms]. Registers the gate and returns the live ones. */
export const HEARTBEAT_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 4)
return redis.call('ZRANGE', KEYS[1], 0, -1)
`;

/**
 * Moves sessions off a worker and records an offload event for each one moved. Only sessions still
 * on `from` move (another replica may have moved them).
 * KEYS: [offload stream, from's session set, then per move i: the session's affinity
 * (KEYS[1 + 2i]) and its target's session set (KEYS[2 + 2i])].
 * ARGV[1]: JSON {from, reason, defaultTtlMs, streamMaxLen, moves: [{key, to}]}.
 * Returns JSON {now, moved: [{key, to}]}.
 */
export const MIGRATE_LUA = `
local spec = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = {}
for i, mv in ipairs(spec.moves) do
  local ak, toSessions = KEYS[1 + 2 * i], KEYS[2 + 2 * i]
  if redis.call('GET', ak) == spec.from then
    local ttl = redis.call('PTTL', ak)
    if ttl <= 0 then ttl = spec.defaultTtlMs end
    redis.call('SET', ak, mv.to, 'PX', ttl)
    redis.call('ZREM', KEYS[2], mv.key)
    redis.call('ZADD', toSessions, now + ttl, mv.key)
    redis.call('PEXPIRE', toSessions, ttl)
    local session = mv.key
    if string.sub(mv.key, 1, 2) == 's:' then session = string.sub(mv.key, 3) end
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', spec.streamMaxLen, '*', 'session', session, 'from', spec.from, 'to', mv.to, 'reason', spec.reason, 'time', tostring(now))
    moved[#moved + 1] = {key = mv.key, to = mv.to}
  else
    -- Expired or moved elsewhere: it is no longer this worker's session.
    redis.call('ZREM', KEYS[2], mv.key)
  end
end
return cjson.encode({now = now, moved = moved})
`;

/**
 * Re-adds leases this replica still holds (no XX: Redis may have restarted empty, or dropped them
 * while the replica could not renew them), with a fresh expiry on Redis's clock.
 * KEYS: [inflight(worker)]; ARGV: [lease TTL ms, lease id…]
 */
export const RESTORE_LEASES_LUA = `
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], expiry, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return #ARGV - 1
`;

/**
 * A worker's sessions, coldest first, and how many it has: expired ones are dropped first, so the
 * total counts only live affinities (as the memory store's does).
 * KEYS: [worker session set]; ARGV: [limit]. Returns [keys, total].
 */
export const COLD_SESSIONS_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[1])
local keys = {}
if limit > 0 then keys = redis.call('ZRANGE', KEYS[1], 0, limit - 1) end
return {keys, redis.call('ZCARD', KEYS[1])}
`;
