-- Shape floor: a count in the value, the window's end in the key's own expiry
-- (fixed_window's v2 format). Per key only the commands that shape needs: INCRBY, then
-- PEXPIREAT NX for a new window or PEXPIRETIME for a live one. Every call "admitted".
-- Not sluice's code path: the least any script keeping this state must do
-- (bench/redis_core.sh, "shape floors").
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out, j = {}, 0
for i = 1, #KEYS do
  local c = redis.call('INCRBY', KEYS[i], 1)
  local e
  if c == 1 then
    e = now + 60000
    redis.call('PEXPIREAT', KEYS[i], e, 'NX')
  else
    e = redis.call('PEXPIRETIME', KEYS[i])
  end
  -- the reply as the batch script gives it: a flat array, per call its width then its items
  out[j + 1] = 4
  out[j + 2] = 1
  out[j + 3] = c
  out[j + 4] = e - now
  out[j + 5] = 0
  j = j + 5
end
return out
