-- Shape floor: the whole state in one value (sliding_window, token_bucket, gcra): per key
-- a GET and a SET of a 32-byte value with its expiry, nothing decided, nothing parsed or
-- formatted (bench/redis_core.sh, "shape floors").
local v = string.rep('x', 32)
local out = {}
for i = 1, #KEYS do
  redis.call('GET', KEYS[i])
  redis.call('SET', KEYS[i], v, 'PX', '60000')
  out[i] = {1, 1, 60000, 0}
end
return out
