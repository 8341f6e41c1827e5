-- Shape floor: the whole state in one value (sliding_window, token_bucket, gcra): per key
-- a GET, the 32-byte value written in place (SETRANGE) and its expiry (PEXPIREAT), as
-- those scripts write; nothing decided, nothing parsed (bench/redis_core.sh, "shape
-- floors"). (One SET … PX instead costs about 1 x the INCR floor more.)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local at = string.format('%d', now + 60000)
local v = string.rep('x', 32)
local out, j = {}, 0
for i = 1, #KEYS do
  redis.call('GET', KEYS[i])
  redis.call('SETRANGE', KEYS[i], '0', v)
  redis.call('PEXPIREAT', KEYS[i], at)
  -- the reply as the batch script gives it: a flat array, per call its width then its items
  out[j + 1] = 4
  out[j + 2] = 1
  out[j + 3] = 1
  out[j + 4] = 60000
  out[j + 5] = 0
  j = j + 5
end
return out
