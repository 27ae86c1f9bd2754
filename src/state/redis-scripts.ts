/**
 * Lua run inside Redis, so that a decision's check-and-write is atomic and one round trip.
 * Times come from Redis's own clock (TIME), never from a gate's, so replicas with skewed clocks
 * agree on which leases have expired.
 *
 * The key layout, and the typed bindings that call these scripts, are in ./redis-commands.ts.
 * Every key a script touches is declared in its KEYS (test/faults/redis-script-keys.test.ts).
 */

/**
 * The one field of a worker's holdings hash that is not a block (DECIDE_LUA): its value, longer than
 * Redis's default hash-max-listpack-value (64), keeps the hash a hash table, and begins with the
 * mark that says whether the match may search the hash (`<latest lapse> <scan until> `; see the
 * script).
 */
export const HOLDINGS_ENCODING_FIELD = '~encoding';
const HOLDINGS_ENCODING_VALUE = 'a value longer than hash-max-listpack-value keeps this hash a hash table';

/**
 * Lua (a local function, put at the top of each script that uses it): makes a key last at least
 * `ttlMs` more, never less. A key that holds many entries, each lapsing on its own (a worker's
 * holdings and recency, its sessions, its leases, the live gates), must outlive its newest entry
 * without cutting any older one short: an entry written under a shorter TTL (a config reload that
 * shortened it, a replica still on the old config) must not make the key, and with it entries
 * recorded under the longer TTL, vanish early. PTTL and a PEXPIRE only when that is later, not
 * `PEXPIRE … GT`: that needs Redis 7, and treats a key without expiry (one this script just
 * created) as lasting for ever, so it would never set one.
 */
const EXTEND_EXPIRY_LUA = `
local function extendExpiry(key, ttlMs)
  if redis.call('PTTL', key) < ttlMs then redis.call('PEXPIRE', key, string.format('%d', ttlMs)) end
end
`;

/**
 * A decision's read, or its check-and-write. Arguments and reply are JSON with named fields; the
 * typed binding (./redis-commands.ts, `decide` and `DecideReply`) is the one place that builds
 * and reads them.
 *
 * KEYS (./redis-commands.ts `decideKeys`), n workers:
 *   1          the session's affinity (unkeyed: the states hash again, never touched)
 *   2          the pool's worker states
 *   2+i        worker i's in-flight leases, i = 1..n
 *   3+n        the chosen worker's block recency    } commits only; a read passes the states
 *   4+n        the chosen worker's session set      } hash in their place, never touched
 *   5+n        the expected affinity's session set (also the states hash when there is none)
 *   5+n+i      worker i's block holdings, i = 1..n (only when the prompt has blocks)
 *   then i     worker i's live sessions, i = 1..n, after the holdings (only when `spec.liveKeys`:
 *              the decision counts them or its commit weighs or moves its session)
 * ARGV: [spec JSON, then the prompt's block ids, m of them, in order: when they all have one length
 * (the keys layer's ids do: 16 hex digits), `spec.idWidth`, as one string, cut apart here; else one
 * argument each]. One argument instead of 128 at 32 KB: the gate's Redis client spent 20 µs a
 * decision building and measuring them, 7 µs for the joined one.
 * Every key the script touches is among them (test/faults/redis-script-keys.test.ts), so Redis
 * Cluster and proxies route and check it by its keys. Capacity evictions included: the blocks
 * trimmed are the chosen worker's, in its own two keys.
 *
 * A worker's blocks are two keys with the same members, the block ids: its holdings (hash: block
 * → when the holding lapses, ms) and its recency (sorted set: base - j for a block at depth j of
 * the routing that last wrote it, base ms * 1000 + 100000 or, if higher, just above the worker's
 * newest score: each routing ranks above every earlier one, and within one routing the deepest
 * blocks are the oldest, so a trim past capacity cuts a prompt from its tail, as an engine evicts,
 * in the order the process index evicts). A read takes
 * lapse times with HMGET, which answers the stored strings; ZMSCORE on one sorted set holding both
 * facts cost twice as much at 32 KB, most of it Redis formatting each score it returns. A match
 * costs a call per worker (and a search, a few more, for a worker holding the prompt's first block),
 * where the per-block layout it replaced cost one per block up to the first nobody held: cheaper
 * for long prompts, dearer for prompts of fewer blocks than the pool has workers (docs/DESIGN.md §10).
 *
 * A commit writes each holding of the chosen worker afresh (until now + TTL, one variadic HSET and
 * one variadic ZADD), except a prefix the worker was sent less than `freshMs` ago (redis-store.ts
 * `freshWindowMs`: 1 s at the default TTL): that one stands as written, and only the blocks past
 * it are (see the commit below for why the chains stay exact).
 *
 * Releases ride along (`spec.released`: lease members by worker index): this replica's leases that
 * ended since its last command to the pool are removed first, before anything is counted or the
 * deadline checked, so a commit always sees the releases its replica made before it, in order, and
 * a late commit still carries them out. Only workers of KEYS can be named, so every key is declared.
 *
 * In-flight counts are the leases lapsing after now. A commit counts them (one ZCOUNT per worker)
 * and leaves lapsed ones in place; a read (every replica's refresh among them) purges them, and
 * RENEW_LUA purges before it renews, so a lapsed lease is never counted, and comes back only when
 * the replica holding it renews it (its request is still running).
 */
export const DECIDE_LUA = `${EXTEND_EXPIRY_LUA}
-- A variadic command on one key with all of args, in slices of 1000 (an even number: field-value
-- and score-member pairs stay whole): unpack is bounded by Lua's stack.
local function inSlices(command, key, args)
  local n = #args
  for s = 1, n, 1000 do redis.call(command, key, unpack(args, s, math.min(s + 999, n))) end
end

-- After a commit wrote holdings: the worker keeps at most capacity blocks, the least recently
-- routed dropped. Redis under maxmemory may evict one key of the two (volatile-lru, as the shipped
-- manifest sets, takes the recency set first: only commits touch it, every decision reads the
-- holdings). Holdings the recency set lost would never be trimmed, and every commit keeps the hash
-- alive: it would grow by a capacity per eviction. One HLEN notices; the rare repair drops them.
local function trimHoldings(hk, lru, capacity)
  local card = redis.call('ZCARD', lru)
  if redis.call('HLEN', hk) - 1 > card then
    local lost = {}
    for _, b in ipairs(redis.call('HKEYS', hk)) do
      if b ~= '${HOLDINGS_ENCODING_FIELD}' and not redis.call('ZSCORE', lru, b) then lost[#lost + 1] = b end
    end
    inSlices('HDEL', hk, lost)
  end
  local over = card - capacity
  if over > 0 then
    -- The lowest scores go: the least recently routed blocks, deepest first (a prompt longer
    -- than the capacity keeps its first blocks).
    local gone = redis.call('ZRANGE', lru, 0, over - 1)
    redis.call('ZREMRANGEBYRANK', lru, 0, over - 1)
    inSlices('HDEL', hk, gone)
  end
end

local spec = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #spec.workers
local ids = {}
if (spec.idWidth or 0) > 0 then
  local joined, w = ARGV[2], spec.idWidth
  for j = 1, #joined / w do ids[j] = string.sub(joined, (j - 1) * w + 1, j * w) end
else
  for j = 2, #ARGV do ids[j - 1] = ARGV[j] end
end
local m = #ids
local K_CHOSEN_RECENCY, K_CHOSEN_SESSIONS, K_EXPECTED_SESSIONS, K_HOLDINGS = 3 + n, 4 + n, 5 + n, 5 + n
-- Worker i's live sessions at K_LIVE + i, after the holdings (declared only when the prompt has blocks).
local K_LIVE = K_HOLDINGS
if m > 0 then K_LIVE = K_HOLDINGS + n end

-- Releases this replica made since its last command to the pool: first, whatever happens next.
if spec.released then
  for _, r in ipairs(spec.released) do redis.call('ZREM', KEYS[2 + r[1]], unpack(r[2])) end
end

local reply = {ok = false, late = false, now = now, affinity = '', keyInflight = 0}
-- A commit ioredis resent (after NOSCRIPT) or a cluster client retried can arrive after the gate
-- gave up on it and decided locally: it must write nothing then.
if spec.mode == 'commit' and spec.notAfter > 0 and now > spec.notAfter then
  reply.late = true
  return cjson.encode(reply)
end

-- Numbers handed to redis.call are formatted with %.17g, which costs more than the command at 32 KB
-- (a score per block): integers are passed as strings formatted with %d instead.
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
local wrote = false
if spec.keyed then aff = redis.call('GET', KEYS[1]) end
local statePairs = redis.call('HGETALL', KEYS[2])
local states = {}
for i = 1, #statePairs, 2 do states[statePairs[i]] = statePairs[i + 1] end

-- Prefix match: for each configured worker (a worker gone from the config still holds blocks
-- until they lapse, and no decision may weigh it), its leading run of live blocks. Each holding
-- lapses on its own: a worker not sent the block within the TTL stops holding it, whoever else
-- holds it. Most workers hold none of a given prompt (routing concentrates a prefix on a few), so a
-- worker is first asked for the first block alone (HGET: inside a script about a quarter of an
-- HMGET of 8 missing fields, each of whose replies is built and converted to Lua), unless the
-- worker before it held the prompt: then it likely does too (a prefix every worker holds), and the
-- probe would be one call more for each. At 2 KB, 6 of 16 workers holding each prompt, redis-server
-- CPU per decision fell 11%; with every worker holding it, within 1%. A holding still matches at
-- its lapse time itself, as the memory store's does (held while now - routed <= TTL).
-- Holdings are compared as strings: every lapse time is written as a decimal integer (%d), and two
-- of the same length order as their numbers do, with no tonumber (which cost more than the rest of
-- a 32 KB match: 0.1 us a value inside Redis's Lua, against 0.01 for the comparison). A value of
-- another length (a clock crossing a power of ten) is compared as a number. (Lua compares strings
-- with strcoll, and Redis sets LC_COLLATE from its environment: every locale's collation orders
-- the digits 0-9 ascending and never ignores them, so same-length digit strings still compare as
-- their numbers do.)
--
-- A worker holding the first block of a prompt longer than SEARCH_FROM blocks is searched for its
-- deepest live block, not read block by block: reading every block it held (8, then 32, 128, ...
-- at a time) was 134 of redis-server's 527 us a request in a 32 KB (128 blocks) profile. The search is
-- exact because "live" never has a gap along a chain in a hash whose mark (below) allows it:
--  * a block id is a chained hash: block j of a prompt names the whole prefix 1..j, so every
--    commit that wrote block j wrote blocks 1..j-1 in the same HSET with the same lapse time;
--    a later commit that rewrote j-1 alone did so later, so with one TTL for every commit and a
--    clock that never goes back, lapse(j-1) >= lapse(j);
--  * recency scores fall strictly along a chain (base - j, and every routing ranks above all
--    earlier ones), so the capacity trim (lowest first) takes block j+1 no later than block j,
--    and the repair of holdings the recency set lost keeps what commits since the loss wrote:
--    prefixes again;
--  * what breaks it is a commit whose lapse time is below one already in the hash (the prefix TTL
--    shortened by a config reload, replicas on two TTLs, Redis's clock stepping back): it can
--    write blocks 1..k to lapse before blocks k+1.. written earlier. So the hash's mark (the value
--    of its encoding field: "<latest lapse written> <scan until> ...") keeps the latest lapse time
--    any commit wrote; a commit below it sets "scan until" to it, and until that time has passed
--    (every holding written before the commit has lapsed) the worker is read block by block, as
--    before. A hash without a mark (written by a replica of an earlier release, which rewrites the
--    field to its constant) is read block by block, and the next commit that marks it waits out the
--    key's own expiry, which no holding in it outlives (extendExpiry).
-- The search: one HMGET of the mark and of positions 2, 4, 8, ..., m (and block 1 when it was not
-- probed); the last live position and the first dead one bracket the depth; then HMGETs of up to
-- 7 evenly spaced positions inside the bracket, each cutting it 8 times, until it is one block.
-- At 128 blocks a worker holding the whole prompt costs one HMGET of 8 fields, one holding a part
-- of it 2-3 HMGETs of ~20 fields in all, where the scan read up to 128. Fields, not calls, are what
-- cost here (holdings hashes of thousands of entries, each lookup a cache miss): through the gate
-- at 32 KB the HMGETs took 71-135 us of Redis's time a request with the scan and 41-124 with this
-- search (about half in five of six runs), though it makes a few more calls; a variant whose first
-- call also read blocks 2-9, and which read brackets of up to 32 whole (fewer calls than the
-- scan), took 102-123 against this one's 59-60 in the same runs; 3 points a call instead of 7 was
-- within noise. At 32 KB redis-server's CPU did not move beyond noise: the misses the search
-- saves on the worker then chosen move into the HSET that rewrites its holdings. At 400 KB (512
-- blocks) the HMGETs took 514-742 -> 127-135 us, and redis-server's CPU a request fell 12-24%. Prompts
-- shorter than SEARCH_FROM blocks (2 KB: 8) take the scan one or two HMGETs anyway.
local nowLen = #nowS
local function isLive(v)
  if not v then return false end
  if #v == nowLen then return v >= nowS end
  return tonumber(v) >= now
end
local SEARCH_FROM = 10
local depth = {}
-- The chosen worker's mark, when the match read it (a commit rewrites it, below): its first probe
-- and its search read it in the same call, which saved a commit at 2 KB its own HGET.
local chosenMark, chosenMarkRead = false, false
local markOf = -1
if spec.mode == 'commit' then markOf = spec.chosen end
if m > 0 then
  local lastHeld = false
  local probes = {}
  if m >= SEARCH_FROM then
    local p = 2
    while p < m do probes[#probes + 1] = p; p = p * 2 end
    probes[#probes + 1] = m
  end
  for i = 1, n do
    local hk = KEYS[K_HOLDINGS + i]
    local d, size = 0, 8
    local held = true
    local scan = true
    if not lastHeld then
      if i == markOf then
        local got = redis.call('HMGET', hk, ids[1], '${HOLDINGS_ENCODING_FIELD}')
        held = isLive(got[1])
        chosenMark, chosenMarkRead = got[2], true
      else
        held = isLive(redis.call('HGET', hk, ids[1]))
      end
      if held then d = 1 end
    end
    if held and m >= SEARCH_FROM then
      -- The mark, block 1 when not yet read, and the probes, in one call.
      local fields = {'${HOLDINGS_ENCODING_FIELD}'}
      local first = 2
      if d == 0 then fields[2] = ids[1]; first = 3 end
      for k = 1, #probes do fields[#fields + 1] = ids[probes[k]] end
      local got = redis.call('HMGET', hk, unpack(fields))
      if i == markOf then chosenMark, chosenMarkRead = got[1], true end
      if d == 0 then held = isLive(got[2]); if held then d = 1 end end
      local until_ = got[1] and string.match(got[1], '^%d+ (%d+) ')
      if held and until_ and tonumber(until_) < now then
        scan = false
        -- The depth is in (lo, hi]: lo is live, hi dead (m + 1: every block live).
        local lo, hi = 1, m + 1
        for k = 1, #probes do
          if isLive(got[first + k - 1]) then lo = probes[k] else hi = probes[k]; break end
        end
        while hi - lo > 1 do
          local span = hi - lo
          local k = span - 1
          if k > 7 then k = 7 end
          local at, want = {}, {}
          for t = 1, k do
            local p = lo + math.floor(t * span / (k + 1))
            at[t] = p
            want[t] = ids[p]
          end
          local vals = redis.call('HMGET', hk, unpack(want))
          local newLo, newHi = lo, hi
          for t = 1, k do
            if isLive(vals[t]) then newLo = at[t] else newHi = at[t]; break end
          end
          lo, hi = newLo, newHi
        end
        d = lo
      end
    end
    if held and scan then
      -- Block by block from d (1, or 0 when block 1 was not read), in growing chunks.
      while d < m do
        local last = d + size
        if last > m then last = m end
        local untils = redis.call('HMGET', hk, unpack(ids, d + 1, last))
        local reached = d
        for k = 1, last - d do
          if not isLive(untils[k]) then break end
          reached = d + k
        end
        local whole = reached == last
        d = reached
        if not whole then break end
        if size < 1024 then size = size * 4 end
      end
    end
    lastHeld = d > 0
    if d > 0 then depth[spec.workers[i]] = d end
  end
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
    local chosen = spec.workers[spec.chosen]
    if spec.keyed then
      local affTtlS = string.format('%d', spec.affinityTtlMs)
      redis.call('SET', KEYS[1], chosen, 'PX', affTtlS)
      -- The worker's session list, scored by when the affinity lapses: preemptive migration
      -- moves the coldest first. A session joining the list drops those that lapsed (as
      -- COLD_SESSIONS_LUA does when it reads the list): otherwise a worker taking new sessions
      -- kept every one it ever had, its key's expiry pushed on by each commit. Only joins grow
      -- the list, so a commit that keeps its session where it was does no pruning.
      if aff ~= chosen then
        if aff then redis.call('ZREM', KEYS[K_EXPECTED_SESSIONS], spec.leaseKey) end
        redis.call('ZREMRANGEBYSCORE', KEYS[K_CHOSEN_SESSIONS], '-inf', nowS)
      end
      redis.call('ZADD', KEYS[K_CHOSEN_SESSIONS], string.format('%d', now + spec.affinityTtlMs), spec.leaseKey)
      extendExpiry(KEYS[K_CHOSEN_SESSIONS], spec.affinityTtlMs)
      -- Live sessions (the sessions term): a session marked live counts on the chosen worker as
      -- routed now, one marked not live nowhere; a session moved without a mark (the proxy
      -- reported another worker serving it) takes its entry, and its time, along.
      if spec.liveKeys then
        local lk = KEYS[K_LIVE + spec.chosen]
        local keep = spec.liveWindowMs or spec.affinityTtlMs
        local was = false
        if aff and aff ~= chosen then
          for i, w in ipairs(spec.workers) do if w == aff then was = KEYS[K_LIVE + i] end end
        end
        if spec.live ~= nil then
          if was then redis.call('ZREM', was, spec.leaseKey) end
          if spec.live then
            redis.call('ZADD', lk, nowS, spec.leaseKey)
            -- Entries past the window count for nothing: a session joining drops them.
            if spec.liveWindowMs then redis.call('ZREMRANGEBYSCORE', lk, '-inf', '(' .. string.format('%d', now - spec.liveWindowMs)) end
            extendExpiry(lk, keep)
          else
            redis.call('ZREM', lk, spec.leaseKey)
          end
        elseif was then
          local at = redis.call('ZSCORE', was, spec.leaseKey)
          if at then
            redis.call('ZREM', was, spec.leaseKey)
            redis.call('ZADD', lk, at, spec.leaseKey)
            extendExpiry(lk, keep)
          end
        end
      end
      if aff ~= chosen then keyInflight = 0 end
      aff = chosen
      wrote = true
      keyInflight = keyInflight + 1
    end
    local z = KEYS[2 + spec.chosen]
    redis.call('ZADD', z, string.format('%d', now + spec.leaseTtlMs), spec.leaseMember)
    -- An idle worker's set disappears on its own once its last lease is long gone.
    extendExpiry(z, spec.leaseTtlMs * 2)
    counts[spec.chosen] = counts[spec.chosen] + 1
    -- The chosen worker now holds the prompt's blocks until now + TTL, and they are its most
    -- recent: one variadic HSET and one variadic ZADD, whatever the prompt's length.
    if m > 0 then
      local hk = KEYS[K_HOLDINGS + spec.chosen]
      local lru = KEYS[K_CHOSEN_RECENCY]
      local untilS = string.format('%d', now + spec.prefixTtlMs)
      local lapse = now + spec.prefixTtlMs
      -- The mark the match reads (see there): the latest lapse time written, and until when the
      -- worker is read block by block. A commit whose lapse time is below the latest keeps the
      -- worker scanned until the latest has passed; a hash without a mark (a replica of an earlier
      -- release wrote it) until the key's own expiry (-1, none: for good).
      local mark = chosenMark
      if not chosenMarkRead then mark = redis.call('HGET', hk, '${HOLDINGS_ENCODING_FIELD}') end
      local l, u
      if mark then l, u = string.match(mark, '^(%d+) (%d+) ') end
      -- A prefix the worker was sent less than freshMs ago is not written again: its holdings
      -- and recency stand as that commit wrote them, and only the blocks past it are written, with
      -- its lapse time and below its scores. A hot shared prompt (an app's instructions, an agent's
      -- tools, a conversation's history) was rewritten by every request routed to its worker, and
      -- rewriting existing fields is most of what a commit costs Redis: a cache miss per field in
      -- the HSET, a skip-list move per member in the ZADD. Chains stay gap-free: block d's lapse
      -- time is at least that of any deeper block of its chain already held (every commit that
      -- wrote one wrote d with it, and only later ones rewrote d), the new blocks take exactly it,
      -- and their scores fall from d's along the chain. Only while the mark allows the search (no
      -- lapse time below another in flight) and d's lapse time is one this TTL gives, so a TTL a
      -- reload changed is written in full as before. The cost: a prefix lapses and ranks up to
      -- freshMs older than its last routing made it (the replica's local index skips its own
      -- record for the same window).
      local from, keptLapse, keptBase = 0, nil, nil
      local d = depth[chosen] or 0
      if d > 0 and (spec.freshMs or 0) > 0 and u and tonumber(u) < now then
        local v = redis.call('HGET', hk, ids[d])
        local score = v and redis.call('ZSCORE', lru, ids[d])
        if score and #v == #untilS and v <= untilS and tonumber(v) >= lapse - spec.freshMs then
          from, keptLapse, keptBase = d, v, tonumber(score) + d
        end
      end
      if from > 0 then
        -- The blocks past the fresh prefix, if any. Both keys already live past keptLapse: the
        -- commit that wrote it extended them.
        if from < m then
          local held, recency = {}, {}
          for j = from + 1, m do
            local id = ids[j]
            held[#held + 1] = id
            held[#held + 1] = keptLapse
            recency[#recency + 1] = string.format('%d', keptBase - j)
            recency[#recency + 1] = id
          end
          inSlices('HSET', hk, held)
          inSlices('ZADD', lru, recency)
          trimHoldings(hk, lru, spec.capacityBlocks)
        end
      else
        local latest, scanUntil = lapse, 0
        if l then
          latest, scanUntil = tonumber(l), tonumber(u)
          if lapse < latest then
            if latest > scanUntil then scanUntil = latest end
          else
            latest = lapse
          end
        else
          local pttl = redis.call('PTTL', hk)
          if pttl == -1 then
            scanUntil = 1e15
          elseif pttl >= 0 then
            scanUntil = now + pttl
            if scanUntil > latest then latest = scanUntil end
          end
        end
        -- Every routing's blocks rank above all the worker's earlier ones, so the trim is the
        -- exact LRU the process index keeps (up to freshMs, above): the millisecond alone
        -- (× 1000) tied routings of one millisecond, and put the deep blocks of a prompt longer
        -- than 1000 blocks below the shallow ones of a routing a few milliseconds older. Only the
        -- order of scores means anything.
        local base = now * 1000 + 100000
        local top = redis.call('ZRANGE', lru, -1, -1, 'WITHSCORES')
        if top[2] then
          local above = tonumber(top[2]) + m + 1
          if above > base then base = above end
        end
        -- A hash of up to hash-max-listpack-entries (512 by default) fields is a listpack, which
        -- finds a field by scanning them all: a read of a few hundred blocks compared tens of
        -- thousands of strings. A value longer than hash-max-listpack-value (64) makes it a hash
        -- table for good (an RDB reload keeps it so); the mark's field is no block id, so no read
        -- asks for it, and written first in the same HSET, it converts the hash before the blocks go in.
        local held = {'${HOLDINGS_ENCODING_FIELD}', string.format('%d %d ', latest, scanUntil) .. '${HOLDINGS_ENCODING_VALUE}'}
        local recency = {}
        for j = 1, m do
          local id = ids[j]
          held[2 * j + 1] = id
          held[2 * j + 2] = untilS
          recency[2 * j - 1] = string.format('%d', base - j)
          recency[2 * j] = id
        end
        inSlices('HSET', hk, held)
        inSlices('ZADD', lru, recency)
        -- Both keys live as long as their longest-lived holding: a commit under a shorter TTL never
        -- cuts short the holdings recorded under a longer one. A lapsed holding stays (it no longer
        -- matches) until the worker's capacity or the keys' TTL takes it out: the two keys have the
        -- same blocks after every commit (the hash has its one field more), at most the worker's capacity.
        extendExpiry(hk, spec.prefixTtlMs)
        extendExpiry(lru, spec.prefixTtlMs)
        trimHoldings(hk, lru, spec.capacityBlocks)
      end
    end
  end
  reply.ok = ok
end

-- Each worker's live sessions: routed at or after now - window (after this commit's own).
if spec.liveWindowMs then
  local since = string.format('%d', now - spec.liveWindowMs)
  local live = {}
  for i = 1, n do live[i] = redis.call('ZCOUNT', KEYS[K_LIVE + i], since, '+inf') end
  reply.live = live
end

reply.affinity = aff or ''
-- How long the affinity has left (ms; -1: no expiry), so that the replica's copy lapses with it:
-- one it restores after Redis lost its data, or decides on while Redis is away, must not outlive
-- Redis's. A commit that wrote it knows it; otherwise one PTTL (keyed decisions that found one).
if aff then
  if wrote then reply.affinityTtl = spec.affinityTtlMs else reply.affinityTtl = redis.call('PTTL', KEYS[1]) end
end
reply.keyInflight = keyInflight
reply.inflight = counts
reply.states = states
reply.depth = depth
return cjson.encode(reply)
`;

/**
 * Keeps this replica's running requests counted: every lease it names lapses `leaseTtlMs` from now,
 * whether it is still in the set or not. A dead gate names none, so its leases lapse. A lease the
 * set lost is one the replica still holds (it names only leases it has not released): it lapsed
 * because no renewal reached Redis for a whole TTL (Redis blocked, or a partition that dropped
 * packets without closing the connection, so no reconnection re-adds it), or the set was evicted.
 * Renewing only what is present (`ZADD XX`) left such a request uncounted until it ended, and the
 * worker counted short; so it is added back.
 * Lapsed members are purged first (commits count only live leases without purging them,
 * DECIDE_LUA), so a lease that lapsed counts as added back, not as renewed.
 * KEYS: [inflight(worker)]; ARGV: [lease TTL ms, lease member…]. Returns the members added back.
 */
export const RENEW_LUA = `${EXTEND_EXPIRY_LUA}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local back = {}
for i = 2, #ARGV do
  if redis.call('ZADD', KEYS[1], expiry, ARGV[i]) == 1 then back[#back + 1] = ARGV[i] end
end
extendExpiry(KEYS[1], tonumber(ARGV[1]) * 2)
return back
`;

/**
 * Records one scrape. KEYS: [signals hash]; ARGV: [worker, signals JSON or '', error or ''].
 * A failure keeps the last good signals and their time, and counts the failure. The signals are
 * kept as the JSON text they came as (`s` is a string), never decoded here: Redis's cjson cannot
 * tell an empty array from an empty object, so a round trip turned a LoRA scrape's
 * `waiting: []` into `{}` and the adapter terms read the worker's adapters as unknown.
 */
export const PUBLISH_SIGNALS_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec
if ARGV[2] ~= '' then
  rec = {s = ARGV[2], t = now, f = 0}
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
export const HEARTBEAT_LUA = `${EXTEND_EXPIRY_LUA}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
extendExpiry(KEYS[1], tonumber(ARGV[2]) * 4)
return redis.call('ZRANGE', KEYS[1], 0, -1)
`;

/**
 * Moves sessions off a worker and records an offload event for each one moved. Only sessions still
 * on `from` move (another replica may have moved them).
 * KEYS: [offload stream, from's session set, from's live sessions, then per move i: the
 * session's affinity (KEYS[1 + 3i]), its target's session set (KEYS[2 + 3i]) and live sessions
 * (KEYS[3 + 3i])].
 * ARGV[1]: JSON {from, reason, defaultTtlMs, streamMaxLen, moves: [{key, to}]}.
 * Returns JSON {now, moved: [{key, to, ttl}]}, `ttl` what the moved affinity has left (ms).
 */
export const MIGRATE_LUA = `${EXTEND_EXPIRY_LUA}
local spec = cjson.decode(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = {}
for i, mv in ipairs(spec.moves) do
  local ak, toSessions, toLive = KEYS[1 + 3 * i], KEYS[2 + 3 * i], KEYS[3 + 3 * i]
  if redis.call('GET', ak) == spec.from then
    local ttl = redis.call('PTTL', ak)
    if ttl <= 0 then ttl = spec.defaultTtlMs end
    redis.call('SET', ak, mv.to, 'PX', ttl)
    redis.call('ZREM', KEYS[2], mv.key)
    -- Scored by when the affinity lapses, which the move does not change: the session keeps its
    -- recency (it was moved, not used; the memory store's migrate says why that is right). Joining
    -- the target's list, it drops the target's lapsed sessions, as a commit's join does
    -- (DECIDE_LUA): a worker that only ever received migrated sessions kept every one of them.
    if redis.call('ZADD', toSessions, string.format('%d', now + ttl), mv.key) == 1 then
      redis.call('ZREMRANGEBYSCORE', toSessions, '-inf', string.format('%d', now))
    end
    -- The target's other sessions may lapse later than this one.
    extendExpiry(toSessions, ttl)
    -- A live session (the sessions term's) counts on the target from now on, as last routed.
    local at = redis.call('ZSCORE', KEYS[3], mv.key)
    if at then
      local left = redis.call('PTTL', KEYS[3])
      redis.call('ZREM', KEYS[3], mv.key)
      redis.call('ZADD', toLive, at, mv.key)
      if left > 0 then extendExpiry(toLive, left) end
    end
    local session = mv.key
    if string.sub(mv.key, 1, 2) == 's:' then session = string.sub(mv.key, 3) end
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', spec.streamMaxLen, '*', 'session', session, 'from', spec.from, 'to', mv.to, 'reason', spec.reason, 'time', tostring(now))
    moved[#moved + 1] = {key = mv.key, to = mv.to, ttl = ttl}
  else
    -- Expired or moved elsewhere: it is no longer this worker's session.
    redis.call('ZREM', KEYS[2], mv.key)
    redis.call('ZREM', KEYS[3], mv.key)
  end
end
return cjson.encode({now = now, moved = moved})
`;

/**
 * Re-adds leases this replica still holds (no XX: Redis may have restarted empty, or dropped them
 * while the replica could not renew them), with a fresh expiry on Redis's clock.
 * KEYS: [inflight(worker)]; ARGV: [lease TTL ms, lease id…]
 */
export const RESTORE_LEASES_LUA = `${EXTEND_EXPIRY_LUA}
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], expiry, ARGV[i]) end
extendExpiry(KEYS[1], tonumber(ARGV[1]) * 2)
return #ARGV - 1
`;

/**
 * Writes back affinities this replica knows and Redis may not (resync: those decided while Redis
 * was away; the restore after Redis lost its data: every one it has cached), each only if Redis has
 * none for the key (SET NX: a placement another replica wrote first wins), for what it has left.
 * The worker holding the key afterwards, when it is the one written back, lists the session in its
 * session set, scored by when the affinity lapses, as a commit does: preemptive migration finds a
 * worker's sessions there, and one written back without it stayed invisible to migration until its
 * next commit.
 * KEYS: per affinity i, its key (KEYS[2i - 1]) and its worker's session set (KEYS[2i]).
 * ARGV: per affinity i, the session key, the worker and the TTL left in ms (ARGV[3i - 2 .. 3i]).
 * Returns per affinity i the worker Redis holds for it ('' for none) and its PTTL.
 */
export const WRITE_BACK_LUA = `${EXTEND_EXPIRY_LUA}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS / 2 do
  local ak, sessions = KEYS[2 * i - 1], KEYS[2 * i]
  local key, worker = ARGV[3 * i - 2], ARGV[3 * i - 1]
  redis.call('SET', ak, worker, 'PX', ARGV[3 * i], 'NX')
  local held = redis.call('GET', ak)
  local left = -2
  if held then left = redis.call('PTTL', ak) end
  if held == worker and left > 0 then
    -- A session joining the list (ZADD counts it as added) drops those that lapsed, as a
    -- commit's join does (DECIDE_LUA): otherwise the lapsed ones stayed, the key's expiry pushed
    -- on by every write-back (a restore writes back a whole cache).
    if redis.call('ZADD', sessions, string.format('%d', now + left), key) == 1 then
      redis.call('ZREMRANGEBYSCORE', sessions, '-inf', string.format('%d', now))
    end
    extendExpiry(sessions, left)
  end
  out[2 * i - 1] = held or ''
  out[2 * i] = left
end
return out
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
