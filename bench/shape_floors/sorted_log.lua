-- Shape floor: a log in a sorted set (sliding_log): per key the newest and the oldest
-- entry read, one entry added, the expiry moved (bench/redis_core.sh, "shape floors").
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local at = string.format('%d', now)
local out = {}
for i = 1, #KEYS do
  redis.call('ZRANGE', KEYS[i], '-1', '-1', 'WITHSCORES')
  redis.call('ZRANGE', KEYS[i], '0', '0', 'WITHSCORES')
  redis.call('ZADD', KEYS[i], at, ARGV[i])
  redis.call('PEXPIRE', KEYS[i], '60000')
  out[i] = {1, 1, 60000, 0}
end
return out
