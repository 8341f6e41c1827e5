-- sluice reservation: reserve an estimate before the work, settle with the actual cost
-- after it (docs/algorithms.md, "Debt"). This file is the driver only and does not run
-- alone: the build (cmake/SluiceLua.cmake) puts in front of it src/algo/clock.lua, every
-- algorithm's own script wrapped as a maker of its function (as for the composite,
-- src/algo/composite.lua) and `local ALGORITHMS = {make_fixed_window, …, make_gcra}`, so
-- the counter is decided exactly as its own script decides it.
-- KEYS[1]  the id's counter, what its algorithm's script takes as KEYS[1]
-- KEYS[2]  the reservation: KEYS[1] .. ':r:' .. a 128-bit random token (the same hash
--          tag, so the same slot); a string, "r<estimate>:<window end>:<expires at>"
--          while held, "s<actual>:<expires at>" once settled (ms on the script's clock)
-- ARGV[1]  "8" reserve, "9" settle (src/algo/algorithm.h, Op)
-- ARGV[2]  now: "" (Redis TIME) or the model clock's ms (tests)
-- ARGV[3]  reserve: the estimate (>= 1); settle: the actual cost (>= 0)
-- ARGV[4..7]  limit, window ms, refill, aligned (as every algorithm's script takes them)
-- ARGV[8]  the algorithm (0 fixed window, 1 sliding window, 2 sliding log, 3 token
--          bucket, 4 gcra)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms, outcome, actual}
--   reserve: a consume of the estimate (its code: 1 admitted and held, 0 or 2 refused,
--            nothing written); outcome 0, actual 0.
--   settle:  outcome 1, settled now: the difference is refunded (actual < estimate) or
--            debited (actual > estimate: op 7, into the debt bound); 2, settled before:
--            nothing changes, `actual` is what that settle charged; 3, no reservation is
--            held (it expired, or never was): nothing changes. The first four items are
--            a peek of one unit after it (a debit's reply: remaining negative in debt).
-- A reservation is held only while its estimate still counts against the id: its expiry
-- is the consume's reset_after (a fixed window's end, a log's or a bucket's return to
-- full, a sliding window's last count of the window it went into). So a settle never
-- refunds into a window the estimate was not counted in: once that window is over, the
-- reservation is gone (outcome 3) and nothing is refunded or charged. A sliding window
-- reserves with a take (op 5) and refunds with a give back (op 6) to that same window. A
-- reservation never settled keeps its estimate charged until it would have recovered
-- anyway, and its key expires then: nothing to reap.
-- TTL rule: the reservation key is written with PX in the same call that creates it and
-- again (its remaining time kept) by the settle; the counter keeps its algorithm's own.
-- Under a model clock the expiry in the value decides (PX has the clock's 60 s grace).
local now, grace = clock(ARGV[2])
local arg_now = ARGV[2] == '' and now or ARGV[2] -- a number: TIME, already read
local amount = tonumber(ARGV[3])
local algorithm = tonumber(ARGV[8])
local make = ALGORITHMS[(algorithm or -1) + 1]
if not make or not amount or amount < 0 then
  return redis.error_reply('ERR sluice reservation: bad algorithm or amount')
end
local step = make()
local keys = {KEYS[1]}
local sliding_window = algorithm == 1
local function run(op, cost, refill)
  return step(keys, {op, arg_now, tostring(cost), ARGV[4], ARGV[5], refill or ARGV[6], ARGV[7]})
end
local function peek()
  return run('1', 1)
end

if ARGV[1] == '8' then
  if amount < 1 then
    return redis.error_reply('ERR sluice reservation: estimate must be >= 1')
  end
  local r = run(sliding_window and '5' or '0', amount)
  if r[1] ~= 1 then
    return {r[1], r[2], r[3], r[4], 0, 0}
  end
  local window_end = sliding_window and r[4] or 0
  local ttl = math.max(r[3], 1)
  redis.call('SET', KEYS[2], 'r' .. amount .. ':' .. window_end .. ':' .. (now + ttl), 'PX',
             ttl + grace)
  return {1, r[2], r[3], 0, 0, 0}
end

local held = redis.call('GET', KEYS[2])
local estimate, window_end, expires_at, first
if held then
  estimate, window_end, expires_at = string.match(held, '^r(%d+):(%d+):(%d+)$')
  if not estimate then
    first, expires_at = string.match(held, '^s(%d+):(%d+)$')
  end
  expires_at = tonumber(expires_at)
  if not expires_at or expires_at <= now then
    estimate, first = nil, nil
  end
end
if first then
  local r = peek()
  return {r[1], r[2], r[3], r[4], 2, tonumber(first)}
end
if not estimate then
  local r = peek()
  return {r[1], r[2], r[3], r[4], 3, 0}
end
estimate = tonumber(estimate)
local r
if amount > estimate then
  r = run('7', amount - estimate)
else
  if amount < estimate then
    if sliding_window then
      run('6', estimate - amount, window_end)
    else
      run('2', estimate - amount)
    end
  end
  r = peek()
end
redis.call('SET', KEYS[2], 's' .. amount .. ':' .. expires_at, 'PX', expires_at - now + grace)
return {r[1], r[2], r[3], r[4], 1, amount}
