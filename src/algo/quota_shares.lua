-- sluice quota shares: one rate R shared among the clients of a bucket in proportion to
-- their demand, the sum of the recorded grants never above R (sluice/quota.h). Sent alone
-- (never in a batch): one call per client and bucket per report interval. Its cost does
-- not grow with the bucket's clients: the sums are kept in the bucket, updated by each
-- call, and clients whose hold ran out are folded out a few at a time.
-- KEYS[1]  the bucket: a hash, one field per client,
--            value = "<expires ms> <demand milli> <grant milli>" (the store's clock),
--          and the field "" (never a client: clients are 1-64 bytes) holding the sums
--            "<D> <G> <n> <bytes>": the recorded clients' demands, their grants, their
--            number and what they count against the budget (160 + 2 * #client each).
-- KEYS[2]  the bucket's expiry index: a sorted set, client -> expires (same hash slot).
-- ARGV[1]  op: "0" assign, "1" release (give the client's grant back)
-- ARGV[2]  model clock ms, or "" to read Redis TIME (models are tests)
-- ARGV[3]  the client: 1-64 bytes
-- ARGV[4]  assign: its demand d, milli-requests per second, 0 to 10^12 (recorded as at
--          most 10^10: see DEMAND_CAP)
-- ARGV[5]  assign: the bucket's rate R, milli-requests per second, 1 to 10^12
-- ARGV[6]  assign: how long the grant is held, ms, 1 to 366 days
-- ARGV[7]  assign: headroom, percent, 100 to 10000
-- ARGV[8]  assign: the bucket's budget, bytes, 1 to 32 MiB
-- Every call first folds out at most FOLD clients whose hold ran out (expires <= now),
-- earliest expiry first (ties in byte order of the client), subtracting them from the
-- sums. Until folded out a client counts as recorded: its grant still counts against R
-- (so the bound below holds all the more) and its demand in D.
-- Rule (rates are integers, arithmetic in doubles, floored at the end): the reserve
-- V = floor(R / 64) is kept for clients that hold nothing; S = R - V; over the other
-- recorded clients D_o = the sum of their demands, G_o of their grants;
--   release: the client's field goes; grant 0.
--   a new client that does not fit the budget: grant 0, not recorded, and the reply says
--     so (full = 1).
--   D = D_o + d; want = D > 0 ? S * d / D : 0; if D < S: want = min(want, headroom * d / 100)
--   room = R - G_o for a client that holds nothing (new, or its recorded grant is 0);
--          for the others max(S - G_o, min(R - G_o, floor(g / 2))), g its recorded grant:
--          S - G_o, but a client squeezed back to S (newcomers took the reserve) keeps
--          at least half of what it held, so no holder drops to 0 at once;
--   grant = floor(min(want, max(0, room))); recorded as (now + hold, d, grant).
-- So at every instant the recorded grants of a bucket sum to at most R (for one R: a
-- lowered R caps the grants made from then on; the earlier ones end within their hold),
-- and a newcomer finds the reserve free unless other newcomers took it since the holders'
-- last renewals (each gives back what is above S, at most half its grant a renewal).
-- Numbers go to Redis as string.format('%d') text: Lua's own conversion keeps 14 digits.
-- Exactness: at most 32 MiB / 162 clients of at most 10^10 demand: D < 2^53; G <= 10^12.
-- So every sum is an exact integer in a double, in any order of updates.
-- src/algo/quota_shares.cc is the twin, with the same operations in the same order.
-- Returns  {grant, D, n, G, full}: the bucket after the call (a released or refused client
--          is not counted).
-- Drift: the sums are checked against the keys on every call (n = ZCARD, HLEN = n + 1):
-- when they disagree (a key lost, a field sluice never writes, the format of an earlier
-- release) both are rebuilt from the hash, once, at the cost of reading it whole.
-- TTL rule: every call that leaves clients gives both keys the expiry of the latest
-- client's (PEXPIRE, a lost expiry included); a bucket left without clients is deleted.
-- A value of another type at either key (WRONGTYPE) is not sluice's: deleted, as if
-- there were none. Any other error of reading them (an ACL refusal) is the call's reply,
-- with nothing written.
-- Under a model clock (tests only) expiries get 60 s of grace, as in fixed_window.lua.

local MAX_RATE = 1000000000000
local MAX_HOLD = 366 * 24 * 3600 * 1000
local MAX_BUDGET = 33554432
local DEMAND_CAP = 10000000000
local RESERVE_PART = 64
local FOLD = 8

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

local hkey, zkey = KEYS[1], KEYS[2]
local op = ARGV[1]
local client = ARGV[3]
if op ~= '0' and op ~= '1' then
  return redis.error_reply('ERR sluice quota: unknown op ' .. tostring(op))
end
if not client or #client < 1 or #client > 64 then
  return redis.error_reply('ERR sluice quota: client must be 1-64 bytes')
end
local d, rate, hold, headroom, budget, bad
if op == '0' then
  d, bad = integer(ARGV[4], 'demand_milli', 0, MAX_RATE)
  if bad then return bad end
  rate, bad = integer(ARGV[5], 'rate_milli', 1, MAX_RATE)
  if bad then return bad end
  hold, bad = integer(ARGV[6], 'hold (ms)', 1, MAX_HOLD)
  if bad then return bad end
  headroom, bad = integer(ARGV[7], 'headroom_percent', 100, 10000)
  if bad then return bad end
  budget, bad = integer(ARGV[8], 'budget (bytes)', 1, MAX_BUDGET)
  if bad then return bad end
  if d > DEMAND_CAP then d = DEMAND_CAP end
end
local now, grace = clock(ARGV[2]) -- src/algo/clock.lua

-- `command` on `key`: its reply; for a value of another type, deleted, `empty`; for any
-- other error, nil and the error (the call's reply).
local function read(command, key, arg, empty)
  local r
  if arg then r = redis.pcall(command, key, arg) else r = redis.pcall(command, key) end
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'WRONGTYPE', 1, true) then return nil, r end
    redis.call('DEL', key)
    return empty
  end
  return r
end

local function cost(c) return 160 + 2 * #c end

local function parse(v)
  local e, fd, fg = string.match(v, '^(%d+) (%d+) (%d+)$')
  if e then return tonumber(e), tonumber(fd), tonumber(fg) end
end

local meta, failed = read('HGET', hkey, '', false)
if failed then return failed end
local zlen
zlen, failed = read('ZCARD', zkey, nil, 0)
if failed then return failed end
local D, G, n, bytes = 0, 0, 0, 0
local sums = false
if meta then
  local a, b, c, e = string.match(meta, '^(%d+) (%d+) (%d+) (%d+)$')
  if a then
    D, G, n, bytes = tonumber(a), tonumber(b), tonumber(c), tonumber(e)
    sums = true
  end
end
local hlen = redis.call('HLEN', hkey)
if zlen ~= n or hlen ~= (sums and n + 1 or 0) then
  -- The sums disagree with the keys: rebuilt from the hash (clients whose hold ran out
  -- included: they are folded out as usual).
  local fields = redis.call('HGETALL', hkey)
  redis.call('DEL', zkey)
  D, G, n, bytes = 0, 0, 0, 0
  local junk, index = {}, {}
  for i = 1, #fields, 2 do
    local f = fields[i]
    local e, fd, fg = parse(fields[i + 1])
    if f == '' then
      -- the sums' field: rewritten below
    elseif not e then
      junk[#junk + 1] = f -- a value sluice never writes
    else
      D, G, n, bytes = D + fd, G + fg, n + 1, bytes + cost(f)
      index[#index + 1] = string.format('%d', e)
      index[#index + 1] = f
      if #index >= 1000 then
        redis.call('ZADD', zkey, unpack(index))
        index = {}
      end
    end
  end
  if #index > 0 then redis.call('ZADD', zkey, unpack(index)) end
  if #junk > 0 then redis.call('HDEL', hkey, unpack(junk)) end
end

-- Folds out at most `limit` clients whose hold ran out.
local function fold(limit)
  local due = redis.call('ZRANGE', zkey, '-inf', string.format('%d', now), 'BYSCORE', 'LIMIT', 0,
    limit)
  if #due == 0 then return end
  for i = 1, #due do
    local v = redis.call('HGET', hkey, due[i])
    local e, fd, fg
    if v then e, fd, fg = parse(v) end
    if e then
      D, G, n, bytes = D - fd, G - fg, n - 1, bytes - cost(due[i])
    end
    -- else: not in the hash (or not sluice's): the counts disagree at the next call,
    -- which rebuilds the sums.
  end
  redis.call('HDEL', hkey, unpack(due))
  redis.call('ZREM', zkey, unpack(due))
end

fold(FOLD)
local known, od, og = false, 0, 0
local mine = redis.call('HGET', hkey, client)
if mine then
  local e, fd, fg = parse(mine)
  if e then known, od, og = true, fd, fg end
end

local reply
if op == '1' then
  if known then
    redis.call('HDEL', hkey, client)
    redis.call('ZREM', zkey, client)
    D, G, n, bytes = D - od, G - og, n - 1, bytes - cost(client)
  end
  reply = {0, D, n, G, 0}
else
  if not known and bytes + cost(client) > budget then
    reply = {0, D, n, G, 1}
  else
    local reserve = math.floor(rate / RESERVE_PART)
    local share = rate - reserve
    local d_o, g_o = D - od, G - og
    local total = d_o + d
    local want = 0
    if total > 0 then
      want = share * d / total
    end
    if total < share then
      want = math.min(want, headroom * d / 100)
    end
    local room = rate - g_o
    if og > 0 then room = math.max(share - g_o, math.min(room, math.floor(og / 2))) end
    local grant = math.floor(math.min(want, math.max(0, room)))
    local expires = now + hold
    redis.call('HSET', hkey, client, string.format('%d %d %d', expires, d, grant))
    redis.call('ZADD', zkey, string.format('%d', expires), client)
    if not known then
      n, bytes = n + 1, bytes + cost(client)
    end
    D, G = total, g_o + grant
    reply = {grant, D, n, G, 0}
  end
end

if n == 0 then
  redis.call('DEL', hkey, zkey)
else
  redis.call('HSET', hkey, '', string.format('%d %d %d %d', D, G, n, bytes))
  local last = redis.call('ZRANGE', zkey, -1, -1, 'WITHSCORES')
  local ttl = string.format('%d', tonumber(last[2]) - now + grace)
  redis.call('PEXPIRE', hkey, ttl)
  redis.call('PEXPIRE', zkey, ttl)
end
return reply
