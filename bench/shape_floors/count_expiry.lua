-- Shape floor: a count in the value, the window's end in the key's own expiry
-- (fixed_window's v2 format). Per key only the commands that shape needs: INCRBY, then
-- PEXPIREAT NX for a new window or PEXPIRETIME for a live one. Every call "admitted".
-- Not sluice's code path: the least any script keeping this state must do
-- (bench/redis_core.sh, "shape floors").
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {}
for i = 1, #KEYS do
  local c = redis.call('INCRBY', KEYS[i], 1)
  local e
  if c == 1 then
    e = now + 60000
    redis.call('PEXPIREAT', KEYS[i], e, 'NX')
  else
    e = redis.call('PEXPIRETIME', KEYS[i])
  end
  out[i] = {1, c, e - now, 0}
end
return out
