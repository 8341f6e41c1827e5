-- sluice sliding log: exact; at most `limit` cost units admitted in any trailing `window`.
-- An entry admitted at t counts for every request at t' with t' - t < window.
-- KEYS[1]  the id's log: a sorted set, one member per admitted request.
--            score  = admission time in ms (never below the newest score, so a clock
--                     that steps back cannot reorder the log);
--            member = <len><start>[:<cost>]: `start` is how many units the log admitted
--                     before this request (contiguous, so strictly increasing: members are
--                     unique even within one ms), written as decimal digits after one
--                     letter giving their count ('a' = 1 ... 'p' = 16) so that members of
--                     equal score sort by `start`; `:<cost>` is left out when the cost is 1.
--          Units in the window = newest start + newest cost - oldest start: two rank
--          lookups (O(log n)) whatever the costs, never a scan of the log.
-- ARGV     op, now ("" = Redis TIME), cost (refund: amount), limit, window ms, refill
--          (unused), aligned (unused) (see src/algo/algorithm.h)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms}; reset_after is when the
--          newest entry leaves the window (the log is empty again), retry_after the moment
--          enough of the oldest entries have left for this request to fit.
-- Op "7" (debit, work already done): `cost` is logged as an admission whether it fits
-- or not, `used` never above twice the limit (a debt of at most one window's worth: what
-- would go further is dropped); the reply is a peek of one unit after it (remaining down
-- to -limit), so retry_after is when enough entries have left the window for one unit.
-- TTL rule: the key expires when its newest entry leaves the window. A call that adds an
-- entry or refunds sets that expiry (PEXPIRE) in the same script; a call that reads a
-- live log without writing it (refused, peek) checks it (PTTL) and sets it only when it
-- is missing (PERSIST) or more than 1 ms off (another window in force), so a refusal
-- normally writes nothing. A log whose newest entry has left the window (it lost its
-- TTL) is deleted by the call that reads it; entries that have left the window are
-- removed (ZREMRANGEBYSCORE) by any call that finds the oldest one stale. A key that is
-- not such a log (not a sorted set, or members sluice did not write) is deleted too.
-- Refused requests change nothing. Under a model clock (tests only) expiries get 60 s of
-- grace, as in fixed_window.lua.
-- Cost: admitting makes 5 redis.calls (TIME, 2 ZRANGE, ZADD, PEXPIRE), refusing 4 (PTTL
-- instead of the writes), plus 2 (ZREMRANGEBYSCORE, ZRANGE) when the oldest entry has
-- left the window. Constant arguments are passed as strings and numbers formatted with
-- '%d': Redis 7.0 turns a Lua number argument into a string with a costly '%.17g'.
local key = KEYS[1]
local op = ARGV[1]
local limit = tonumber(ARGV[4])
if op == '3' then
  redis.call('DEL', key)
  return {1, limit, 0, 0}
end
local now, grace = clock(ARGV[2]) -- src/algo/clock.lua
local cost = 1 -- most requests cost 1: skip parsing it
if ARGV[3] ~= '1' then
  cost = tonumber(ARGV[3])
end
local window = tonumber(ARGV[5])
local horizon = now - window -- entries scored at or before it have left the window

-- The live log: newest entry (score, end) and oldest entry (score, start, member).
local live = false
local last_at, last_end, first_at, first_start, first_member
local top = redis.pcall('ZRANGE', key, '-1', '-1', 'WITHSCORES')
local found = top[1] ~= nil or top.err ~= nil
if top[1] then
  last_at = tonumber(top[2])
  if last_at > horizon then
    local m = top[1]
    local sep = string.find(m, ':', 3, true)
    if sep then
      last_end = tonumber(string.sub(m, 2, sep - 1))
      local c = tonumber(string.sub(m, sep + 1))
      if last_end and c then
        last_end = last_end + c
      else
        last_end = nil
      end
    else
      last_end = tonumber(string.sub(m, 2))
      if last_end then
        last_end = last_end + 1
      end
    end
    local bottom = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    first_at = tonumber(bottom[2])
    if first_at <= horizon then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', horizon))
      bottom = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
      first_at = tonumber(bottom[2])
    end
    first_member = bottom[1]
    sep = string.find(first_member, ':', 3, true)
    first_start = tonumber(string.sub(first_member, 2, sep and sep - 1))
    live = last_end ~= nil and first_start ~= nil
  end
end
if found and not live then
  redis.call('DEL', key)
end

local used = 0
if live then
  used = last_end - first_start
end

-- A debit: charged whether it fits or not, `used` never above twice the limit (what
-- would go further is dropped: `cost` <= 0 adds no entry); written as an admission, then
-- answered as a peek of one unit.
local debit = op == '7'
if debit and cost > limit + limit - used then
  cost = limit + limit - used
end

-- Admit.
if (op == '0' and used + cost <= limit) or (debit and cost > 0) then
  local at, start = now, 0
  if live then
    start = last_end
    if last_at > now then
      at = last_at
    end
    -- Keep starts far below 2^53 (exact in Lua's doubles): renumber from 0 once they pass
    -- 2^50. A live log holds at most kMaxLimit = 2^40 units, so this O(n) step runs at
    -- most once per 2^50 - 2^40 units admitted.
    if start + cost > 1125899906842624 then
      local all = redis.call('ZRANGE', key, '0', '-1', 'WITHSCORES')
      redis.call('DEL', key)
      for j = 1, #all, 2 do
        local m = all[j]
        local sep = string.find(m, ':', 3, true)
        local s = tonumber(string.sub(m, 2, sep and sep - 1)) - first_start
        local digits = string.format('%d', s)
        m = string.char(96 + #digits) .. digits
        if sep then
          m = m .. string.sub(all[j], sep)
        end
        redis.call('ZADD', key, all[j + 1], m)
      end
      start = start - first_start
      first_start = 0
    end
  end
  local digits = string.format('%d', start)
  local member = string.char(96 + #digits) .. digits
  if cost ~= 1 then
    member = member .. ':' .. string.format('%d', cost)
  end
  if at ~= now then
    redis.call('ZADD', key, string.format('%d', at), member)
    redis.call('PEXPIRE', key, string.format('%d', at + window - now + grace))
  elseif grace == 0 then
    redis.call('ZADD', key, string.format('%d', now), member)
    redis.call('PEXPIRE', key, ARGV[5])
  else
    redis.call('ZADD', key, ARGV[2], member)
    redis.call('PEXPIRE', key, string.format('%d', window + grace))
  end
  if not debit then
    return {1, limit - used - cost, at + window - now, 0}
  end
  if not live then
    live, first_at, first_start, first_member = true, at, start, member
  end
  last_at, last_end, used = at, start + cost, used + cost
end
if debit then
  op, cost = '1', 1
end

if not live then
  if cost > limit and op ~= '2' then
    return {2, limit, 0, 0}
  end
  return {1, limit, 0, 0} -- peek that fits, refund of nothing
end

-- Units of the oldest entry, and whether this call must search the log by rank: a
-- refund, or a refusal that waits for more than the oldest entry to leave.
local first_cost = 1
local sep = string.find(first_member, ':', 3, true)
if sep then
  first_cost = tonumber(string.sub(first_member, sep + 1))
end
local first_rank
if op == '2' or (cost <= limit and used + cost - limit > first_cost) then
  -- The smallest rank in [lo, hi] whose entry starts at or after `target`; hi + 1 when
  -- none does. Starts grow with the rank, and the log holds only live entries here.
  -- (Made only when needed: a closure per call costs Redis measurable time.)
  first_rank = function(lo, hi, target)
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      local m = redis.call('ZRANGE', key, mid, mid)[1]
      local ms = string.find(m, ':', 3, true)
      if tonumber(string.sub(m, 2, ms and ms - 1)) >= target then
        hi = mid - 1
      else
        lo = mid + 1
      end
    end
    return lo
  end
end

if op == '2' then
  local target = last_end - cost -- units from `target` on are given back
  if target <= first_start then
    redis.call('DEL', key)
    return {1, limit, 0, 0}
  end
  -- Entries at ranks >= i lie wholly at or above `target`: at most `cost` of them.
  local n = redis.call('ZCARD', key)
  local i = first_rank(math.max(1, n - cost), n - 1, target)
  if i < n then
    redis.call('ZREMRANGEBYRANK', key, i, -1)
  end
  local kept = redis.call('ZRANGE', key, i - 1, i - 1, 'WITHSCORES')
  local m = kept[1]
  local at = tonumber(kept[2])
  local ks = string.find(m, ':', 3, true)
  if ks then
    local s = tonumber(string.sub(m, 2, ks - 1))
    if s + tonumber(string.sub(m, ks + 1)) > target then
      -- The kept entry reaches above `target`: it keeps only the units below it.
      local digits = string.format('%d', s)
      local kept_member = string.char(96 + #digits) .. digits
      if target - s ~= 1 then
        kept_member = kept_member .. ':' .. string.format('%d', target - s)
      end
      redis.call('ZREM', key, m)
      redis.call('ZADD', key, kept[2], kept_member)
    end
  end
  redis.call('PEXPIRE', key, string.format('%d', at + window - now + grace))
  return {1, limit - (target - first_start), at + window - now, 0}
end

-- A live log read without writing it: give it back its expiry if it lost it.
local reset_after = last_at + window - now
local off = redis.call('PTTL', key) - reset_after - grace
if off > 1 or off < -1 then
  redis.call('PEXPIRE', key, string.format('%d', reset_after + grace))
end
if cost > limit then
  return {2, limit - used, reset_after, reset_after}
end
if used + cost <= limit then
  return {1, limit - used, reset_after, 0} -- peek
end
-- Refused (cost <= limit < used + cost). The request fits once the oldest entries holding
-- `need` units have left: up to entry i - 1, the first whose units reach `need`.
local need = used + cost - limit
local leaves = first_at
if need > first_cost then
  local n = redis.call('ZCARD', key)
  local i = first_rank(2, math.min(need, n - 1), first_start + need)
  leaves = tonumber(redis.call('ZRANGE', key, i - 1, i - 1, 'WITHSCORES')[2])
end
return {0, limit - used, reset_after, leaves + window - now}
