-- sluice fixed window: `limit` per `window`; the window opens at the id's first admitted
-- request, or at multiples of `window` on the clock when aligned.
-- KEYS[1]  the id's counter (`…}:fw2`, src/core/keys.h): on Redis's clock (ARGV[2] "" or
--          a number) the plain integer count, and the window's end is the key's own
--          expiry (absolute ms, PEXPIRETIME); under a model clock (tests) a string
--          "<count>:<window end ms>". Each path deletes the other's value as foreign.
-- ARGV     op, now ("" = Redis TIME), cost, limit, window ms, refill (unused), aligned
--          (see src/algo/algorithm.h)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms}
-- Op "4" (sync, LimiterOptions::sync): `cost` (>= 0) units a process already admitted
-- in the window ending at ARGV[6] (ms on this clock; 0: no window known) are added to
-- that window when it is the live one, never above the limit and never refused (they
-- were admitted); units of a window that is over are dropped. A window is opened when
-- none is live (holding the units when ARGV[6] is 0), so the reply always names one:
-- {1, remaining, reset_after_ms, window end ms}.
-- Decisions: a window is live while now < its end; refused requests change nothing (a
-- consume over the limit is counted by INCRBY and taken back by DECRBY in the same
-- script: nobody sees it); cost > limit is refused (code 2) without a write.
-- TTL rule (Redis's clock): the window's end IS the key's expiry, set by absolute time
-- (PEXPIREAT / SET … PXAT, exact to the ms, so every call names the same end) in the
-- call that creates the key; INCRBY, DECRBY keep it. A key found without an expiry
-- (lost TTL: PERSIST, a foreign write) is given the end of a window opened now by the
-- call that reads it, its count kept: at most one window of lock-out, never a key that
-- lives for ever. A value that is not an integer (any Redis type: the WRONGTYPE, "not an
-- integer" and overflow errors of INCRBY, DECRBY and GET are caught) is not sluice's: it
-- is overwritten or deleted, and the call decides as if there were none. Any other error
-- (NOPERM, OOM …) is returned: it says nothing about the value.
-- Limits are arguments: a stored window never ends later than a window opened now
-- would (now + window, or the aligned end when aligned), so a shortened window applies
-- at once. A call that finds a later end moves the expiry there, even when it refuses
-- or peeks (the count carries over; nothing is counted or given back).
-- Op "7" (debit, work already done): `cost` is added whether it fits or not, the count
-- never above twice the limit (a debt of at most one window's worth: what would go
-- further is dropped), in the live window or in one opened now; the reply is a peek of
-- one unit after it (remaining down to -limit; refused until the window ends). The
-- window's end stays the key's expiry, as for any write.
-- Numbers passed to redis.call are formatted with '%d' (Redis 7.0 formats a Lua number
-- argument with a costly '%.17g'); the hot path passes ARGV[3], the cost as sent.
-- Under a model clock (tests only) the value keeps its window end ("count:end": Redis's
-- expiry cannot follow model time) and expiries get 60 s of grace: model time does not
-- pass in step with Redis's clock, and a key must not vanish while its model window is
-- open; the stored window end keeps decisions exact. Production pays one check for that
-- path: `now + 0 ~= now` tells the model clock's string from the batch's number without
-- a call (type() costs ~800 instructions under callgrind, the check ~100).
local op = ARGV[1]
local now = ARGV[2]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
elseif now + 0 ~= now then
  -- A string: the model clock (tests); the value holds its window end. (A number is
  -- Redis TIME, read once for a whole batch by src/algo/batch.lua.)
  now = tonumber(ARGV[2])
  local grace = 60000
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

  if op == '7' then
    if not live then
      count, ends = 0, latest
    elseif ends > latest then
      ends = latest
    end
    local add = math.min(cost, limit + limit - count)
    if add > 0 then
      count = count + add
    end
    local ttl = ends - now
    redis.call('SET', key, string.format('%d:%d', count, ends), 'PX', string.format('%d', ttl + grace))
    local left = math.max(limit - count, -limit)
    if left > 0 then
      return {1, left, ttl, 0}
    end
    return {0, left, ttl, ttl}
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
end

-- Redis's clock: the value is the count, the key's expiry the window's end. `+ 0`
-- converts a string once (tonumber converts it twice); in a batch the driver may have
-- converted limit and window already (src/algo/batch.lua's NUMERIC), never the cost,
-- which goes to INCRBY as sent. The usual cost, "1", is a string compare (Lua interns
-- strings: a pointer compare) instead of a strtod.
local key = KEYS[1]
local cost = ARGV[3] == '1' and 1 or ARGV[3] + 0
local limit = ARGV[4] + 0
-- The end of a window opened now: a new window's end, and the latest a stored one may
-- have (a shortened window applies at once).
local window = ARGV[5] + 0
local latest
if ARGV[7] == '1' then
  latest = now - (now % window) + window
else
  latest = now + window
end

local ends
if op == '0' and cost <= limit then
  -- The hot path: count first, then look at the window the count landed in.
  local n = redis.pcall('INCRBY', key, ARGV[3])
  if n == cost then
    if redis.call('PEXPIREAT', key, string.format('%d', latest), 'NX') == 1 then
      -- No key before (or one without an expiry holding 0): a new window.
      return {1, limit - cost, latest - now, 0}
    end
    -- A window a sync opened with 0 units: it keeps its end.
  elseif type(n) ~= 'number' or n < cost then
    -- Not an integer (WRONGTYPE; "not an integer", e.g. the model's "count:end"; an
    -- overflow), or a negative count sluice never writes: replaced by a new window. Any
    -- other error (NOPERM, OOM …) is the caller's, not a foreign value: returned as is.
    if type(n) == 'table' and not (string.find(n.err, 'WRONGTYPE', 1, true) or
                                   string.find(n.err, 'integer', 1, true) or
                                   string.find(n.err, 'overflow', 1, true)) then
      return n
    end
    redis.call('SET', key, ARGV[3], 'PXAT', string.format('%d', latest))
    return {1, limit - cost, latest - now, 0}
  end
  ends = redis.call('PEXPIRETIME', key)
  if ends <= now then
    if ends == -1 then
      -- Lost TTL: the count is kept, in a window opened now.
      ends = latest
      redis.call('PEXPIREAT', key, string.format('%d', latest))
    else
      -- Over on this clock, still there for Redis (its expiry check runs on the time the
      -- script started): a new window.
      redis.call('SET', key, ARGV[3], 'PXAT', string.format('%d', latest))
      return {1, limit - cost, latest - now, 0}
    end
  elseif ends > latest then
    ends = latest
    redis.call('PEXPIREAT', key, string.format('%d', latest))
  end
  local ttl = ends - now
  if n > limit then
    redis.call('DECRBY', key, ARGV[3]) -- refused: uncounted
    return {0, limit - n + cost, ttl, ttl}
  end
  return {1, limit - n, ttl, 0}
end

if op == '3' then
  redis.call('DEL', key)
  return {1, limit, 0, 0}
end

if op == '2' then
  local n = redis.pcall('DECRBY', key, ARGV[3])
  if type(n) ~= 'number' or n <= 0 then
    -- Nothing left, no window (DECRBY made a negative key), or not sluice's (as above;
    -- any other error is returned).
    if type(n) == 'table' and not (string.find(n.err, 'WRONGTYPE', 1, true) or
                                   string.find(n.err, 'integer', 1, true) or
                                   string.find(n.err, 'overflow', 1, true)) then
      return n
    end
    redis.call('DEL', key)
    return {1, limit, 0, 0}
  end
  ends = redis.call('PEXPIRETIME', key)
  if ends <= now then
    if ends ~= -1 then
      redis.call('DEL', key) -- a window over on this clock
      return {1, limit, 0, 0}
    end
    ends = latest
    redis.call('PEXPIREAT', key, string.format('%d', latest))
  elseif ends > latest then
    ends = latest
    redis.call('PEXPIREAT', key, string.format('%d', latest))
  end
  return {1, limit - n, ends - now, 0}
end

-- Peek, sync, and a consume of more than the limit: read the window without counting.
local count, stored
local v = redis.pcall('GET', key)
if v then
  if type(v) == 'table' and not string.find(v.err, 'WRONGTYPE', 1, true) then
    return v -- not a foreign value: the caller's error (NOPERM …)
  end
  if type(v) ~= 'string' or #v > 18 or not string.find(v, '^%d+$') then
    -- Not sluice's: an error reply (not a string), a negative or non-decimal value, or
    -- one out of INCRBY's range (which the hot path above takes as foreign too).
    redis.call('DEL', key)
  else
    count = tonumber(v)
    ends = redis.call('PEXPIRETIME', key)
    stored = ends
    if ends == -1 then
      ends, stored = latest, latest -- lost TTL: the count, in a window opened now
      redis.call('PEXPIREAT', key, string.format('%d', latest))
    elseif ends <= now then
      count = nil -- over on this clock; Redis deletes it within the millisecond
    elseif ends > latest then
      ends = latest
      redis.call('PEXPIREAT', key, string.format('%d', latest))
    end
  end
end

if op == '4' then
  local expected = tonumber(ARGV[6])
  if not count then
    local n = 0
    if expected == 0 then
      n = math.min(cost, limit)
    end
    redis.call('SET', key, string.format('%d', n), 'PXAT', string.format('%d', latest))
    return {1, limit - n, latest - now, latest}
  end
  if cost > 0 and count < limit and (expected == 0 or expected == stored or expected == ends) then
    local add = math.min(limit, count + cost) - count
    count = count + add
    redis.call('INCRBY', key, string.format('%d', add))
  end
  return {1, math.max(0, limit - count), ends - now, ends}
end

if op == '7' then
  -- A debit: charged whether it fits or not, up to `limit` below zero (the count never
  -- passes twice the limit); what would go further is dropped.
  local add
  if not count then
    count, ends = 0, latest
    add = math.min(cost, limit + limit)
    redis.call('SET', key, string.format('%d', add), 'PXAT', string.format('%d', latest))
  else
    add = math.min(cost, limit + limit - count)
    if add > 0 then
      redis.call('INCRBY', key, string.format('%d', add))
    end
  end
  if add > 0 then
    count = count + add
  end
  local ttl = ends - now
  local left = math.max(limit - count, -limit)
  if left > 0 then
    return {1, left, ttl, 0}
  end
  return {0, left, ttl, ttl}
end

if not count then
  if cost > limit then
    return {2, limit, 0, 0}
  end
  return {1, limit, 0, 0}
end
local ttl = ends - now
if cost > limit then
  return {2, limit - count, ttl, ttl}
elseif count + cost > limit then
  return {0, limit - count, ttl, ttl}
end
return {1, limit - count, ttl, 0}
