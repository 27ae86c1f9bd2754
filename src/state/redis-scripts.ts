/**
 * Lua run inside Redis, so that a decision's check-and-write is atomic and one round trip.
 * Times come from Redis's own clock (TIME), never from a gate's, so replicas with skewed clocks
 * agree on which leases have expired.
 *
 * Key layout (every key of a pool shares the hash tag `{<pool>}` so one script's keys live on one
 * Redis Cluster slot):
 *   <prefix>:{<pool>}:a:<key>     affinity: the worker id holding the key's KV cache (PX = TTL)
 *   <prefix>:{<pool>}:s           hash: worker id → state (absent = healthy)
 *   <prefix>:{<pool>}:f:<worker>  sorted set: in-flight lease id → expiry (ms, Redis clock)
 *   <prefix>:{<pool>}:alive       written once per pool; gone after a reconnect = Redis lost its data
 */

/**
 * KEYS: [affinity, states, inflight(worker 1) … inflight(worker n)]
 * ARGV[1]: JSON {m: 'read'|'commit', k: 0|1 (keyed), w: [worker ids], c: chosen index (1-based),
 *   e: expected affinity ('' = none), b: [[index, limit]] below, g: [[index, limit]] at-or-above,
 *   s: [[worker, [allowed states]]] (a worker without a recorded state is 'healthy'),
 *   at: affinity TTL ms, l: lease id, lt: lease TTL ms}
 * Returns [ok 0|1, affinity or '', [in-flight counts], [state hash as flat pairs]]
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
  if ok == 1 then
    local chosen = spec.w[spec.c]
    if spec.k == 1 then
      redis.call('SET', KEYS[1], chosen, 'PX', spec.at)
      aff = chosen
    end
    local z = KEYS[2 + spec.c]
    redis.call('ZADD', z, now + spec.lt, spec.l)
    -- An idle worker's set disappears on its own once its last lease is long gone.
    redis.call('PEXPIRE', z, spec.lt * 2)
    counts[spec.c] = counts[spec.c] + 1
  end
end
return {ok, aff or '', counts, states}
`;

/**
 * Extends live leases of one worker (only those still present: XX), so a running gate keeps its
 * requests counted while a dead gate's leases lapse.
 * KEYS: [inflight(worker)]; ARGV: [lease TTL ms, lease id…]
 */
export const RENEW_LUA = `
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return #ARGV - 1
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
