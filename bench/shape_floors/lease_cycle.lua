-- Shape floor: concurrency leases, acquire + release cycles: per key the count read, one
-- member added, the expiry set (the acquire), then the member removed (the release), in
-- one script for all keys (sluice sends acquires and releases as separate calls; this is
-- below what it can do) (bench/redis_core.sh, "shape floors").
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local score = string.format('%d', now + 120000)
local out, j = {}, 0
for i = 1, #KEYS do
  local n = redis.call('ZCARD', KEYS[i])
  redis.call('ZADD', KEYS[i], score, ARGV[i])
  redis.call('PEXPIRE', KEYS[i], '120000')
  -- the reply as the batch script gives it: a flat array, per call its width then its items
  out[j + 1] = 4
  out[j + 2] = 1
  out[j + 3] = n + 1
  out[j + 4] = now
  out[j + 5] = 0
  j = j + 5
end
for i = 1, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[i])
end
return out
