/**
 * Lua run inside Redis, so that a decision's check-and-write is atomic and one round trip.
 * Times come from Redis's own clock (TIME), never from a gate's, so replicas with skewed clocks
 * agree on which leases have expired.
 *
 * Key layout (every key of a pool shares the hash tag `{<pool>}` so one script's keys live on one
 * Redis Cluster slot):
 *   <prefix>:{<pool>}:a:<key>      affinity: the worker id holding the session's KV cache (PX = TTL)
 *   <prefix>:{<pool>}:s            hash: worker id → state (absent = healthy)
 *   <prefix>:{<pool>}:f:<worker>   sorted set: in-flight lease "<id>|<key>" → expiry (ms, Redis clock)
 *   <prefix>:{<pool>}:b:<block>    hash: worker id → when its holding lapses (ms): who probably holds the block
 *   <prefix>:{<pool>}:bw:<worker>  sorted set: the worker's blocks by recency, trimmed to capacity
 *   <prefix>:{<pool>}:ws:<worker>  sorted set: the worker's sessions by when their affinity lapses (ms)
 *   <prefix>:{<pool>}:sig          hash: worker id → JSON of its last scrape {s: signals, t: ms, f: failures, e: error}
 *   <prefix>:{<pool>}:gates        sorted set: live gate replica ids → expiry (ms)
 *   <prefix>:{<pool>}:offload      stream: one entry per migrated session (session, from, to, reason, time)
 *   <prefix>:{<pool>}:alive        written once per pool; gone after a reconnect = Redis lost its data
 * Block keys are built inside the script from the pool's key prefix (they are too many to pass as
 * KEYS); they share the pool's hash tag, so they live on the script's own slot.
 */

/**
 * KEYS: [affinity, states, inflight(worker 1) … inflight(worker n)]
 * ARGV[1]: JSON {
 *   m: 'read'|'commit', k: 0|1 (keyed), w: [worker ids], kt: key tag of the lease members ('' none),
 *   sp: worker session-list prefix,
 *   bp: block key prefix, wp: worker block-set prefix, bl: [block hashes] (the prompt chain),
 *   -- commit only:
 *   c: chosen index (1-based), e: expected affinity ('' = none), b: [[index, limit]] below,
 *   g: [[index, limit]] at-or-above, s: [[worker, [allowed states]]], pm: deepest prefix seen (-1 = any),
 *   at: affinity TTL ms, l: lease member, lt: lease TTL ms, pt: block TTL ms, cap: chosen's block capacity }
 * Returns [ok 0|1, affinity or '', [in-flight counts], [state pairs], [worker, depth pairs], key in-flight]
 */
export const DECIDE_LUA = `
local spec = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local counts = {}
for i = 1, #spec.w do
  local z = KEYS[2 + i]
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  counts[i] = redis.call('ZCARD', z)
end
local aff = false
if spec.k == 1 then aff = redis.call('GET', KEYS[1]) end
local states = redis.call('HGETALL', KEYS[2])

-- Prefix match: for each worker, the leading blocks it holds; stop at the first block nobody holds.
-- Only the pool's configured workers count: a worker gone from the config still holds blocks
-- until they expire, and no decision may weigh it.
local configured = {}
for _, w in ipairs(spec.w) do configured[w] = true end
local depth = {}
local alive = nil
-- Each holder lapses on its own: a worker not sent the block within the TTL stops holding it, even
-- while other workers keep the block's hash alive.
for i, b in ipairs(spec.bl) do
  local hs = redis.call('HGETALL', spec.bp .. b)
  if #hs == 0 then break end
  local nxt = {}
  local any = false
  for j = 1, #hs, 2 do
    local w = hs[j]
    if tonumber(hs[j + 1]) > now and ((alive == nil and configured[w]) or (alive ~= nil and alive[w])) then
      nxt[w] = true
      depth[w] = i
      any = true
    end
  end
  if not any then break end
  alive = nxt
end

-- The key's requests in flight on its affine worker (lease members end in "|<key tag>").
local keyInflight = 0
if aff and spec.kt ~= '' then
  for i, w in ipairs(spec.w) do
    if w == aff then
      local suffix = '|' .. spec.kt
      for _, m in ipairs(redis.call('ZRANGE', KEYS[2 + i], 0, -1)) do
        if string.sub(m, -#suffix) == suffix then keyInflight = keyInflight + 1 end
      end
    end
  end
end

local ok = 0
if spec.m == 'commit' then
  ok = 1
  if (aff or '') ~= spec.e then ok = 0 end
  for _, b in ipairs(spec.b) do if counts[b[1]] >= b[2] then ok = 0 end end
  for _, g in ipairs(spec.g) do if counts[g[1]] < g[2] then ok = 0 end end
  if spec.s and #spec.s > 0 then
    local st = {}
    for i = 1, #states, 2 do st[states[i]] = states[i + 1] end
    for _, s in ipairs(spec.s) do
      local current = st[s[1]] or 'healthy'
      local allowed = false
      for _, a in ipairs(s[2]) do if a == current then allowed = true end end
      if not allowed then ok = 0 end
    end
  end
  if spec.pm >= 0 then
    for _, i in ipairs(spec.pw) do
      if (depth[spec.w[i]] or 0) > spec.pm then ok = 0 end
    end
  end
  if ok == 1 then
    local chosen = spec.w[spec.c]
    if spec.k == 1 then
      redis.call('SET', KEYS[1], chosen, 'PX', spec.at)
      -- The worker's session list, by recency: preemptive migration moves the coldest first.
      if aff and aff ~= chosen then redis.call('ZREM', spec.sp .. aff, spec.kt) end
      -- Scored by when the affinity lapses: the coldest first, and expired ones can be dropped.
      redis.call('ZADD', spec.sp .. chosen, now + spec.at, spec.kt)
      redis.call('PEXPIRE', spec.sp .. chosen, spec.at)
      if aff ~= chosen then keyInflight = 0 end
      aff = chosen
      keyInflight = keyInflight + 1
    end
    local z = KEYS[2 + spec.c]
    redis.call('ZADD', z, now + spec.lt, spec.l)
    -- An idle worker's set disappears on its own once its last lease is long gone.
    redis.call('PEXPIRE', z, spec.lt * 2)
    counts[spec.c] = counts[spec.c] + 1
    -- The chosen worker now holds the prompt's blocks. Recency scores are ms * 1000 minus the
    -- block's depth, so within one routing the deepest blocks are the oldest and go first, as an
    -- engine evicts a prefix from its tail.
    local n = #spec.bl
    if n > 0 then
      local lru = spec.wp .. chosen
      for i, b in ipairs(spec.bl) do
        local bk = spec.bp .. b
        redis.call('HSET', bk, chosen, now + spec.pt)
        redis.call('PEXPIRE', bk, spec.pt)
        redis.call('ZADD', lru, now * 1000 + (100000 - i), b)
        if (depth[chosen] or 0) < i then depth[chosen] = i end
      end
      redis.call('PEXPIRE', lru, spec.pt)
      local over = redis.call('ZCARD', lru) - spec.cap
      if over > 0 then
        for _, b in ipairs(redis.call('ZRANGE', lru, 0, over - 1)) do redis.call('HDEL', spec.bp .. b, chosen) end
        redis.call('ZREMRANGEBYRANK', lru, 0, over - 1)
      end
    end
  end
end
local dpairs = {}
for w, d in pairs(depth) do
  dpairs[#dpairs + 1] = w
  dpairs[#dpairs + 1] = d
end
return {ok, aff or '', counts, states, dpairs, keyInflight}
`;

/**
 * Extends live leases of one worker (only those still present: XX), so a running gate keeps its
 * requests counted while a dead gate's leases lapse.
 * KEYS: [inflight(worker)]; ARGV: [lease TTL ms, lease member…]
 */
export const RENEW_LUA = `
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
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
 * Moves sessions off a worker and records an offload event for each one moved.
 * KEYS: [offload stream]; ARGV[1]: JSON {from, moves: [[key, to]], reason, ap: affinity key prefix,
 * sp: session-list prefix, at: default affinity TTL ms, maxlen}. Only sessions still on `from` move
 * (another replica may have moved them). Returns [now, key, to, key, to, …] for the moved ones.
 */
export const MIGRATE_LUA = `
local spec = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {now}
for _, mv in ipairs(spec.moves) do
  local key, to = mv[1], mv[2]
  local ak = spec.ap .. key
  if redis.call('GET', ak) == spec.from then
    local ttl = redis.call('PTTL', ak)
    if ttl <= 0 then ttl = spec.at end
    redis.call('SET', ak, to, 'PX', ttl)
    redis.call('ZREM', spec.sp .. spec.from, key)
    redis.call('ZADD', spec.sp .. to, now + ttl, key)
    local session = key
    if string.sub(key, 1, 2) == 's:' then session = string.sub(key, 3) end
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', spec.maxlen, '*', 'session', session, 'from', spec.from, 'to', to, 'reason', spec.reason, 'time', tostring(now))
    out[#out + 1] = key
    out[#out + 1] = to
  else
    -- Expired or moved elsewhere: it is no longer this worker's session.
    redis.call('ZREM', spec.sp .. spec.from, key)
  end
end
return out
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
