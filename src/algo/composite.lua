-- sluice composite: one request checked against several limits in one script, counted
-- against all of them or against none (docs/design.md §6, when all keys share a slot).
-- This file is the driver only and does not run alone: the build (cmake/SluiceLua.cmake) puts in
-- front of it every algorithm's own script wrapped as a maker of its function,
-- `local function make_<name>() <helpers> return function(KEYS, ARGV) <per call> end end`
-- (src/algo/<name>.lua split at its `--[[ per call ]]` line), and
-- `local ALGORITHMS = {make_fixed_window, …, make_gcra}` (the Algorithm enum's order), so
-- each algorithm's code stays in its one file, each limit is decided exactly as its own
-- script decides it, and a call makes only the functions its limits use.
-- KEYS[i]  limit i's key, what its algorithm's script takes as KEYS[1] (1 <= i <= 64)
-- ARGV[1]  now: model clock ms, or "" to read Redis TIME (see src/algo/algorithm.h)
-- ARGV[2]  cost of the request, the same for every limit; integer >= 1
-- ARGV[3 + 6(i-1) .. 8 + 6(i-1)]  limit i: algorithm (0 fixed window, 1 sliding window,
--          2 sliding log, 3 token bucket, 4 gcra), limit, window ms, refill, aligned,
--          block ms ("0": none; src/algo/block.lua)
-- Returns  {0, code_1, remaining_1, reset_after_ms_1, retry_after_ms_1, ..., code_N, ...}
--          when every limit admitted the request and counts it (every code is 1), or
--          {i, code, remaining, reset_after_ms, retry_after_ms}: limit i (the first that
--          refused, in KEYS order) refused with that reply (code 0 or 2, or 3: refused by
--          its block), and no limit counts the request.
-- Blocks: a limit with a block refuses while it holds (its gate, in the peek or the
-- consume), and the limit that refuses the request over its limit starts its block:
-- the last one's consume does so itself; a peek does not (a peek is a question), so the
-- driver starts the block of the limit whose peek refused. The other limits start none:
-- they did not refuse.
-- TTL rule: each algorithm keeps its own (its function is its script); the driver writes
-- no key itself.
--
-- Order: every limit but the last is peeked (op 1) with the request's cost; the first
-- that would refuse is answered and nothing is counted. Then the last limit is consumed
-- (op 0): a refused consume changes nothing (docs/design.md §1 rule 4), so it serves as the
-- last peek and saves one algorithm run. Then the others are consumed, in order.
-- Why a consume after a passed peek admits: a script runs alone (no other client writes
-- in between), each algorithm's clock only moves forward within it (Redis TIME, read
-- again by each call, or the one model time of ARGV[1]), and no algorithm's room shrinks
-- as time passes (windows end, logs age, buckets refill), so what fit at the peek fits
-- at the consume. Two cases break that and are handled anyway: the same key listed twice
-- (one consume spends the room the other's peek saw), and a Redis clock that steps back
-- (NTP) between two TIME calls. If a consume refuses, everything this call consumed is
-- refunded (op 2), newest first, and that refusal is returned: all or nothing holds.
local n = #KEYS
local count = #ARGV
if n < 1 or n > 64 or count ~= 2 + 6 * n then
  return redis.error_reply('ERR sluice composite: want 1-64 keys and 2 + 6 per key ' ..
                           'arguments, got ' .. n .. ' keys and ' .. count .. ' arguments')
end
local now, cost = ARGV[1], ARGV[2]
local steps, keys, args, made = {}, {}, {}, {}
for i = 1, n do
  local at = 6 * i - 3 -- ARGV index of limit i's algorithm
  local a = (tonumber(ARGV[at]) or -1) + 1
  local make = ALGORITHMS[a]
  if not make then
    return redis.error_reply('ERR sluice composite: unknown algorithm "' .. ARGV[at] ..
                             '" for key ' .. i)
  end
  local step = made[a]
  if not step then
    step = make()
    made[a] = step
  end
  steps[i] = step
  keys[i] = {KEYS[i]}
  args[i] = {'1', now, cost, ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4],
             ARGV[at + 5]}
end

-- Peek 1 .. n-1; the last limit's "peek" is its consume: a refused consume changes
-- nothing (rule 4), so this saves one algorithm run per call and keeps "the first limit
-- in order that refuses answers".
for i = 1, n - 1 do
  local r = steps[i](keys[i], args[i])
  if r[1] ~= 1 then
    local ms = tonumber(args[i][8]) or 0
    if r[1] == 0 and ms > 0 then
      -- Refused over its limit: this limit's block starts (as its consume would start it).
      local now, grace = block_clock(args[i])
      block_start(keys[i][1], now, grace, ms)
      return {i, 3, 0, math.max(r[3], ms), math.max(r[4], ms)}
    end
    return {i, r[1], r[2], r[3], r[4]}
  end
end

local out = {0}
local function consume(i)
  args[i][1] = '0'
  local r = steps[i](keys[i], args[i])
  local k = 4 * i - 2
  out[k], out[k + 1], out[k + 2], out[k + 3] = r[1], r[2], r[3], r[4]
  return r
end
local r = consume(n)
if r[1] ~= 1 then
  return {n, r[1], r[2], r[3], r[4]}
end
for i = 1, n - 1 do
  r = consume(i)
  if r[1] ~= 1 then
    -- Defensive (see above): give back what this call counted, newest first.
    for j = i - 1, 1, -1 do
      args[j][1] = '2'
      steps[j](keys[j], args[j])
    end
    args[n][1] = '2'
    steps[n](keys[n], args[n])
    return {i, r[1], r[2], r[3], r[4]}
  end
end
return out
