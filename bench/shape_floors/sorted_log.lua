-- Shape floor: a log in a sorted set (sliding_log): per key the newest and the oldest
-- entry read, one entry added, the expiry moved (bench/redis_core.sh, "shape floors").
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local at = string.format('%d', now)
local out, j = {}, 0
for i = 1, #KEYS do
  redis.call('ZRANGE', KEYS[i], '-1', '-1', 'WITHSCORES')
  redis.call('ZRANGE', KEYS[i], '0', '0', 'WITHSCORES')
  redis.call('ZADD', KEYS[i], at, ARGV[i])
  redis.call('PEXPIRE', KEYS[i], '60000')
  -- the reply as the batch script gives it: a flat array, per call its width then its items
  out[j + 1] = 4
  out[j + 2] = 1
  out[j + 3] = 1
  out[j + 4] = 60000
  out[j + 5] = 0
  j = j + 5
end
return out
