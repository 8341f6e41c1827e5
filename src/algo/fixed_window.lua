-- sluice fixed window.
-- KEYS[1]  the id's counter: a string "<count>:<window end ms>" (clock ms, see below).
-- ARGV[1]  limit (integer ≥ 1)
-- ARGV[2]  window length in ms (integer ≥ 1)
-- ARGV[3]  cost (integer ≥ 1)
-- ARGV[4]  "1" for windows aligned to multiples of the window on the clock, else "0"
-- ARGV[5]  model clock ms, or "" to read Redis TIME (the default; models are for tests)
-- Returns  {code, count, ttl_ms}: code 1 admitted, 0 refused (over limit), 2 refused
--          (cost > limit, can never pass); count is the window's count after the call;
--          ttl_ms is the time left in the window.
-- TTL rule: the only write is SET … PX <rest of window>, so a created or updated key
-- always carries its expiry. A refusal that touches an existing key gives it back an
-- expiry if it lost one (PEXPIRE … NX), without moving an existing one.
-- Refused requests change no count. The window end is stored in the value, so a key that
-- outlived its window (lost TTL, or a model clock) is read as an empty window.
-- Under a model clock (tests only) the expiry is the rest of the window plus 60 s: model
-- time does not pass in step with Redis's own clock, and a key must not vanish (in real
-- time) while its model window is still open; the stored window end keeps it exact.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now
local grace = 0
if ARGV[5] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[5])
  grace = 60000
end

local count, ends
local v = redis.call('GET', KEYS[1])
if v then
  local sep = string.find(v, ':', 1, true)
  if sep then
    count = tonumber(string.sub(v, 1, sep - 1))
    ends = tonumber(string.sub(v, sep + 1))
  end
end
-- No key, a value sluice did not write, or a window that is over: a fresh window.
if not count or not ends or now >= ends then
  count = 0
  if ARGV[4] == '1' then
    ends = now - (now % window) + window
  else
    ends = now + window
  end
end
local ttl = ends - now

if cost > limit or count + cost > limit then
  if v then
    redis.call('PEXPIRE', KEYS[1], ttl + grace, 'NX')
  end
  if cost > limit then
    return {2, count, ttl}
  end
  return {0, count, ttl}
end
count = count + cost
redis.call('SET', KEYS[1], string.format('%d:%d', count, ends), 'PX', ttl + grace)
return {1, count, ttl}
