-- sluice admin: the expire batch script (Admin::ExpireIfNone, `sluice repair`).
-- The admin scripts. Like every sluice script they are the only copy of their code;
-- they live in src/admin/ rather than in src/algo/ because they belong to no algorithm and no
-- limiter calls them. Each runs over one SCAN batch (about AdminOptions::scan_count
-- keys), so Redis is blocked for about a millisecond per call and serves other clients
-- between batches; one call replaces thousands of pipelined commands, which is what
-- makes a scan of a million keys take seconds on the client side instead of tens.
--
-- KEYS     keys to give an expiry
-- ARGV     for KEYS[i]: ARGV[2i-1] its expiry in seconds, ARGV[2i] the Redis type sluice
--          stores under its suffix ("string", "zset", "stream")
-- Returns  one integer per key: 1 it had no expiry and got one, 0 it had an expiry (left
--          as it was), -1 it does not exist, -2 it holds another type (another
--          application's value replaced sluice's since the scan: left alone).
-- TTL rule: sets an expiry only on a key of sluice's type that has none (checked in this
--          same call, so nothing can change in between); never deletes, never moves an
--          existing expiry.
local call = redis.call
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local t = call('TYPE', key).ok
  if t == 'none' then
    out[i] = -1
  elseif t ~= ARGV[2 * i] then
    out[i] = -2
  elseif call('TTL', key) ~= -1 then
    out[i] = 0
  else
    call('EXPIRE', key, ARGV[2 * i - 1])
    out[i] = 1
  end
end
return out
