#!lua flags=no-writes
-- sluice admin: the scan batch script (Admin::Scan).
-- The admin scripts. Like every sluice script they are the only copy of their code;
-- they live in src/admin/ rather than in src/algo/ because they belong to no algorithm and no
-- limiter calls them. Each runs over one SCAN batch (about AdminOptions::scan_count
-- keys), so Redis is blocked for about a millisecond per call and serves other clients
-- between batches; one call replaces thousands of pipelined commands, which is what
-- makes a scan of a million keys take seconds on the client side instead of tens.
--
-- KEYS     the keys of one SCAN batch
-- ARGV     now ms (the Redis clock when the batch was scanned), "1" to read the value of
--          keys without an expiry (else "0")
-- Returns  5 items per key: type code (0 none, 1 string, 2 list, 3 set, 4 zset, 5 hash,
--          6 stream, 7 other), PTTL, ZCARD (-1 if not a zset), leases whose expiry is
--          at or before now (`:cc` sets, live while now < score; -1 otherwise), and for a
--          key without an expiry (when asked) its value: a string's bytes, a sorted
--          set's highest score (ZRANGE -1 -1 WITHSCORES: a `:cc` set's last expiry, a
--          `:sl` log's newest entry), else false.
-- TTL rule: reads only (flags=no-writes): it creates, changes and expires nothing.
local call = redis.call
local codes = {none = 0, string = 1, list = 2, set = 3, zset = 4, hash = 5, stream = 6}
local stale_at = ARGV[1]
local values = ARGV[2] == '1'
local out = {}
local n = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local t = call('TYPE', key).ok
  local ttl = call('PTTL', key)
  local members, stale, value = -1, -1, false
  local cc = string.sub(key, -3) == ':cc'
  if t == 'zset' then
    members = call('ZCARD', key)
    if cc then stale = call('ZCOUNT', key, '-inf', stale_at) end
  end
  if values and ttl == -1 then
    if t == 'string' then
      value = call('GET', key)
    elseif t == 'zset' then
      local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if last[2] then value = last[2] end
    end
  end
  out[n + 1] = codes[t] or 7
  out[n + 2] = ttl
  out[n + 3] = members
  out[n + 4] = stale
  out[n + 5] = value
  n = n + 5
end
return out
