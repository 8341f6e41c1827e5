-- sluice runtime overrides (sluice/admin.h, SetOverride): one limiter's per-id limits set
-- by an operator for a stated time, which every client of the store copies and applies
-- (src/client/overrides.h). Sent alone (never in a batch). src/algo/overrides.cc is the
-- twin (the embedded store), with the same operations in the same order.
-- KEYS     one hash per limiter, `<prefix>:{overrides}:<limiter>` (one hash slot for all of
--          a prefix's limiters, so one call reads them all):
--            field ""  the change counter: a Redis-clock ms, raised on every change
--                      (max(now, counter + 1)), so it never repeats, even after the hash
--                      expired and was made again (see the TTL rule);
--            field id  "<limit> <window ms> <expires at ms> <set at ms> <#actor> <actor><reason>"
--                      (window 0: the limiter's own; #actor: the actor's length in bytes).
-- ARGV[1]  op: "s" set, "c" clear, "r" read
-- ARGV[2]  model clock ms, or "" to read Redis TIME (models are tests)
-- set:   KEYS[1]; ARGV[3] id, [4] limit (0 to 2^40), [5] window ms (0: the limiter's own),
--        [6] lifetime ms (1 to 30 days), [7] actor, [8] reason, [9] most entries (1000)
--        Returns {1, now, old value or "", new value}, or {0, now, live entries} when the
--        hash holds the most entries already and the id is not one of them (refused).
-- clear: KEYS[1]; ARGV[3] id. Returns {1, now, old value} when the id had a live
--        override, {0, now, ""} otherwise.
-- read:  KEYS[1..n]; ARGV[3..n+2] the change counter the caller holds of each hash ("-1":
--        none). Returns {now, c1, e1, c2, e2, ...}: each hash's counter (0 when it does not
--        exist) and, when it differs from the caller's, its entries {id, value, ...} (live
--        or not: the caller honours each entry's own expiry); 0 when it does not.
-- Entries whose expiry passed are removed by the next set or clear of their hash (and
-- ignored by every reader until then).
-- TTL rule: a set or clear leaves the hash expiring at its longest entry's expiry, and
-- never sooner than 10 s after the change (so a counter cannot come back while a reader
-- may still hold it); a read that finds the hash without an expiry gives it that one back.
-- Under a model clock (tests only) expiries get 60 s of grace, as in fixed_window.lua.

local MAX_LIMIT = 1099511627776
local MAX_LIFETIME = 30 * 24 * 3600 * 1000
local MAX_WINDOW = 366 * 24 * 3600 * 1000
local KEEP_COUNTER = 10000

-- The expiry a value records (its third number).
local function expires_of(value)
  local _, _, e = string.match(value, '^(%d+) (%d+) (%d+) ')
  return tonumber(e) or 0
end

-- Removes expired entries; returns the count and the longest expiry of the live entries
-- other than `skip`'s.
local function prune(key, now, skip)
  local all = redis.call('HGETALL', key)
  local live, longest = 0, 0
  for i = 1, #all, 2 do
    if all[i] ~= '' and all[i] ~= skip then
      local e = expires_of(all[i + 1])
      if e <= now then
        redis.call('HDEL', key, all[i])
      else
        live = live + 1
        if e > longest then longest = e end
      end
    end
  end
  return live, longest
end

-- Raises the change counter and sets the hash's expiry (the TTL rule).
local function changed(key, now, grace, longest)
  local counter = tonumber(redis.call('HGET', key, '') or '0') or 0
  local next_counter = now
  if next_counter <= counter then next_counter = counter + 1 end
  redis.call('HSET', key, '', string.format('%d', next_counter))
  local until_ms = now + KEEP_COUNTER
  if longest > until_ms then until_ms = longest end
  redis.call('PEXPIREAT', key, string.format('%d', until_ms + grace))
end

--[[ per call ]]
local op = ARGV[1]
local now, grace = clock(ARGV[2])

if op == 'r' then
  local out = {now}
  for i = 1, #KEYS do
    local counter = tonumber(redis.call('HGET', KEYS[i], '') or '0') or 0
    out[#out + 1] = counter
    if counter ~= 0 and redis.call('PTTL', KEYS[i]) == -1 then
      local _, longest = prune(KEYS[i], now, '')
      changed(KEYS[i], now, grace, longest)
      counter = tonumber(redis.call('HGET', KEYS[i], ''))
      out[#out] = counter
    end
    if string.format('%d', counter) == ARGV[i + 2] then
      out[#out + 1] = 0
    else
      local all = redis.call('HGETALL', KEYS[i])
      local entries = {}
      for j = 1, #all, 2 do
        if all[j] ~= '' then
          entries[#entries + 1] = all[j]
          entries[#entries + 1] = all[j + 1]
        end
      end
      out[#out + 1] = entries
    end
  end
  return out
end

local key, id = KEYS[1], ARGV[3]
if id == nil or id == '' then return redis.error_reply('ERR sluice overrides: empty id') end
local live, longest = prune(key, now, id)
local old = redis.call('HGET', key, id) or ''
if old ~= '' and expires_of(old) <= now then
  redis.call('HDEL', key, id)
  old = ''
end

if op == 'c' then
  if old == '' then return {0, now, ''} end
  redis.call('HDEL', key, id)
  -- With no entry left, only the counter stays: KEEP_COUNTER ms (the TTL rule).
  changed(key, now, grace, longest)
  return {1, now, old}
end

local limit, window, lifetime = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local most = tonumber(ARGV[9])
if not limit or limit < 0 or limit > MAX_LIMIT or limit % 1 ~= 0 then
  return redis.error_reply('ERR sluice overrides: bad limit')
end
if not window or window < 0 or window > MAX_WINDOW or window % 1 ~= 0 then
  return redis.error_reply('ERR sluice overrides: bad window')
end
if not lifetime or lifetime < 1 or lifetime > MAX_LIFETIME or lifetime % 1 ~= 0 then
  return redis.error_reply('ERR sluice overrides: bad lifetime')
end
if old == '' and live >= most then return {0, now, live} end
local expires = now + lifetime
local value = string.format('%d %d %d %d %d ', limit, window, expires, now, #ARGV[7]) ..
                  ARGV[7] .. ARGV[8]
redis.call('HSET', key, id, value)
if expires > longest then longest = expires end
changed(key, now, grace, longest)
return {1, now, old, value}
