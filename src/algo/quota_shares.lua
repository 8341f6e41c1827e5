-- sluice quota shares: one rate R shared among the clients of a bucket in proportion to
-- their demand, the sum of the live grants never above R (sluice/quota.h). Sent alone
-- (never in a batch): one call per client and bucket per report interval.
-- KEYS[1]  the bucket: a hash, one field per client;
--            value = "<expires ms> <demand milli> <grant milli>" (the store's clock)
--          A client is live while now < expires. Expired fields are removed by the next
--          call on the bucket: no reaper.
-- ARGV[1]  op: "0" assign, "1" release (give the client's grant back)
-- ARGV[2]  model clock ms, or "" to read Redis TIME (models are tests)
-- ARGV[3]  the client: 1-64 bytes
-- ARGV[4]  assign: its demand d, milli-requests per second, 0 to 10^12
-- ARGV[5]  assign: the bucket's rate R, milli-requests per second, 1 to 10^12
-- ARGV[6]  assign: how long the grant is held, ms, 1 to 366 days
-- ARGV[7]  assign: headroom, percent, 100 to 10000
-- Rule (rates are integers, arithmetic in doubles, floored at the end): over the other live
-- clients, D_o = the sum of their demands, G_o of their grants;
--   release: the client's field goes; grant 0.
--   a new client when 1024 clients are live: grant 0, not recorded.
--   D = D_o + d; want = D > 0 ? R * d / D : 0; if D < R: want = min(want, headroom * d / 100)
--   grant = floor(min(want, max(0, R - G_o))); recorded as (now + hold, d, grant).
-- So at every instant the live grants of a bucket sum to at most R (for one R: a lowered R
-- caps the grants made from then on; the earlier ones end within their hold).
-- The sums are of at most 1024 values of at most 10^12: below 2^53, exact in any order.
-- src/algo/quota_shares.cc is the twin, with the same operations in the same order.
-- Returns  {grant, D, live clients, sum of live grants}: the bucket after the call (a
--          released or refused client is not counted).
-- TTL rule: every call that leaves fields gives the key the expiry of its latest field
-- (PEXPIRE, a lost expiry included); removing the last field deletes the key. A value of
-- another type at the key (WRONGTYPE) is not sluice's: deleted, as if there were none.
-- Under a model clock (tests only) expiries get 60 s of grace, as in fixed_window.lua.

local MAX_CLIENTS = 1024
local MAX_RATE = 1000000000000
local MAX_HOLD = 366 * 24 * 3600 * 1000

-- `text` as an integer in [low, high], or nil and an error reply.
local function integer(text, name, low, high)
  local v = tonumber(text)
  if not v or v ~= math.floor(v) or v < low or v > high then
    return nil, redis.error_reply('ERR sluice quota: ' .. name .. ' must be an integer from ' ..
      string.format('%d', low) .. ' to ' .. string.format('%d', high) .. ', got ' ..
      tostring(text))
  end
  return v
end

local key = KEYS[1]
local op = ARGV[1]
local client = ARGV[3]
if op ~= '0' and op ~= '1' then
  return redis.error_reply('ERR sluice quota: unknown op ' .. tostring(op))
end
if not client or #client < 1 or #client > 64 then
  return redis.error_reply('ERR sluice quota: client must be 1-64 bytes')
end
local d, rate, hold, headroom, bad
if op == '0' then
  d, bad = integer(ARGV[4], 'demand_milli', 0, MAX_RATE)
  if bad then return bad end
  rate, bad = integer(ARGV[5], 'rate_milli', 1, MAX_RATE)
  if bad then return bad end
  hold, bad = integer(ARGV[6], 'hold (ms)', 1, MAX_HOLD)
  if bad then return bad end
  headroom, bad = integer(ARGV[7], 'headroom_percent', 100, 10000)
  if bad then return bad end
end
local now, grace = clock(ARGV[2]) -- src/algo/clock.lua

local fields = redis.pcall('HGETALL', key)
if fields.err then
  redis.call('DEL', key) -- WRONGTYPE: not a hash, not sluice's
  fields = {}
end
-- The live clients: the others' sums, and the latest expiry among them.
local live, known, d_o, g_o, latest = 0, false, 0, 0, 0
local gone = {}
for i = 1, #fields, 2 do
  local e, fd, fg = string.match(fields[i + 1], '^(%d+) (%d+) (%d+)$')
  e = tonumber(e)
  if not e or e <= now then
    gone[#gone + 1] = fields[i] -- expired, or a value sluice never writes
  else
    live = live + 1
    if fields[i] == client then
      known = true
    else
      d_o = d_o + tonumber(fd)
      g_o = g_o + tonumber(fg)
      if e > latest then latest = e end
    end
  end
end
if op == '1' and known then
  gone[#gone + 1] = client
end
if #gone > 0 then
  redis.call('HDEL', key, unpack(gone))
end
local others = live
if known then others = live - 1 end

local grant = 0
local reply
if op == '1' then
  reply = {0, d_o, others, g_o}
elseif not known and live >= MAX_CLIENTS then
  reply = {0, d_o, live, g_o}
else
  local total = d_o + d
  local want = 0
  if total > 0 then
    want = rate * d / total
  end
  if total < rate then
    want = math.min(want, headroom * d / 100)
  end
  grant = math.floor(math.min(want, math.max(0, rate - g_o)))
  local expires = now + hold
  redis.call('HSET', key, client, string.format('%d %d %d', expires, d, grant))
  if expires > latest then latest = expires end
  reply = {grant, total, others + 1, g_o + grant}
end
-- The latest expiry: the others', and this client's new one when it was recorded (a
-- released client's field is gone, a refused one's never was).
if latest > 0 then
  redis.call('PEXPIRE', key, string.format('%d', latest - now + grace))
end
return reply
