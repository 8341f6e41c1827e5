-- sluice fixed window: `limit` per `window`; the window opens at the id's first admitted
-- request, or at multiples of `window` on the clock when aligned.
-- KEYS[1]  the id's counter: a string "<count>:<window end ms>"
-- ARGV     op, now ("" = Redis TIME), cost, limit, window ms, refill (unused), aligned
--          (see src/algo/algorithm.h)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms}
-- Op "4" (sync, LimiterOptions::sync): `cost` (>= 0) units a process already admitted
-- in the window ending at ARGV[6] (ms on this clock; 0: no window known) are added to
-- that window when it is the live one, never above the limit and never refused (they
-- were admitted); units of a window that is over are dropped. A window is opened when
-- none is live (holding the units when ARGV[6] is 0), so the reply always names one:
-- {1, remaining, reset_after_ms, window end ms}.
-- TTL rule: every write is SET … PX <rest of the window>, so a created or updated key
-- always carries its expiry; a call that reads a live window without writing it gives
-- the key back an expiry if it lost one (PEXPIRE … NX, never moving an existing one).
-- A stored window that is over (lost TTL), or a value sluice did not write (of any Redis
-- type: GET's WRONGTYPE error is caught), is deleted by the call that reads it: stale
-- state is pruned on the path that already cares.
-- Limits are arguments: a stored window never ends later than a window opened now
-- would (now + window, or the aligned end when aligned), so a shortened window applies
-- at once. A call that finds a later end moves it there and writes it back, even when it
-- refuses or peeks (the count carries over; nothing is counted or given back).
-- Numbers passed to redis.call are formatted with '%d' (Redis 7.0 formats a Lua number
-- argument with a costly '%.17g').
-- Refused requests change nothing. Under a model clock (tests only) expiries get 60 s of
-- grace: model time does not pass in step with Redis's clock, and a key must not vanish
-- while its model window is open; the stored window end keeps decisions exact.
local op = ARGV[1]
local now, grace
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  grace = 0
elseif type(ARGV[2]) == 'number' then
  now, grace = ARGV[2], 0 -- Redis TIME, read once for a whole batch (src/algo/batch.lua)
else
  now = tonumber(ARGV[2])
  grace = 60000
end
local cost = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local key = KEYS[1]

local count, ends
local live = false
local v = redis.pcall('GET', key)
if v and v.err then
  redis.call('DEL', key) -- not a string (an error reply): not sluice's
  v = false
end
if v then
  local sep = string.find(v, ':', 1, true)
  if sep then
    count = tonumber(string.sub(v, 1, sep - 1))
    ends = tonumber(string.sub(v, sep + 1))
  end
  live = count ~= nil and ends ~= nil and now < ends
  if not live then
    redis.call('DEL', key)
  end
end

if op == '3' then
  if live then
    redis.call('DEL', key)
  end
  return {1, limit, 0, 0}
end

-- The end of a window opened now: a new window's end, and the latest a stored one may
-- have (a shortened window applies at once).
local window = ARGV[5] + 0
local latest
if ARGV[7] == '1' then
  latest = now - (now % window) + window
else
  latest = now + window
end

if op == '4' then
  local expected = tonumber(ARGV[6])
  if not live then
    local n = 0
    if expected == 0 then
      n = math.min(cost, limit)
    end
    redis.call('SET', key, string.format('%d:%d', n, latest), 'PX', string.format('%d', latest - now + grace))
    return {1, limit - n, latest - now, latest}
  end
  local stored = ends
  if ends > latest then
    ends = latest
  end
  if cost > 0 and count < limit and (expected == 0 or expected == stored or expected == ends) then
    count = math.min(limit, count + cost)
  end
  redis.call('SET', key, string.format('%d:%d', count, ends), 'PX', string.format('%d', ends - now + grace))
  return {1, math.max(0, limit - count), ends - now, ends}
end

if not live then
  if cost > limit and op ~= '2' then
    return {2, limit, 0, 0}
  end
  if op ~= '0' then
    return {1, limit, 0, 0}
  end
  redis.call('SET', key, string.format('%d:%d', cost, latest), 'PX', string.format('%d', latest - now + grace))
  return {1, limit - cost, latest - now, 0}
end

local moved = ends > latest
if moved then
  ends = latest
end
local ttl = ends - now
if op == '2' then
  count = count - cost
  if count <= 0 then
    redis.call('DEL', key)
    return {1, limit, 0, 0}
  end
  redis.call('SET', key, string.format('%d:%d', count, ends), 'PX', string.format('%d', ttl + grace))
  return {1, limit - count, ttl, 0}
end

local code = 1
if cost > limit then
  code = 2
elseif count + cost > limit then
  code = 0
end
if code == 1 and op == '0' then
  count = count + cost
  redis.call('SET', key, string.format('%d:%d', count, ends), 'PX', string.format('%d', ttl + grace))
  return {1, limit - count, ttl, 0}
end
if moved then
  redis.call('SET', key, string.format('%d:%d', count, ends), 'PX', string.format('%d', ttl + grace))
else
  redis.call('PEXPIRE', key, string.format('%d', ttl + grace), 'NX')
end
if code == 1 then
  return {1, limit - count, ttl, 0}
end
return {code, limit - count, ttl, ttl}
