-- sluice token bucket: `limit` tokens, refilled continuously at `refill` tokens per
-- `window`; a request of cost n takes n tokens if all n are there.
-- KEYS[1]  the id's bucket: 32 bytes, four big-endian IEEE-754 doubles (all integers)
--          tokens, fraction, at_ms, full_in_ms: what the bucket was missing at at_ms
--          (whole tokens plus fraction/window of a token, 0 <= fraction < window) and how
--          long it then took to be full. No key means a full bucket.
-- ARGV     op, now ("" = Redis TIME), cost, limit, window ms, refill (0 = limit),
--          aligned (unused) (see src/algo/algorithm.h)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms}
-- TTL rule: every write puts the value (SETRANGE) and its expiry at the full time
-- (PEXPIREAT), so the key expires exactly when the bucket would be full again and an
-- idle id costs no memory; a call that reads a live bucket without writing it gives the
-- key back an expiry if it lost one (PEXPIRE … NX, never moving an existing one). A bucket past its full time (the key lost its TTL), a
-- value sluice did not write, or a bucket found full is deleted by the call that reads
-- it. Refused requests change nothing. Under a model clock (tests only) expiries get 60 s
-- of grace, as in fixed_window.lua; the stored full time keeps decisions exact.
--
-- Op "7" (debit, work already done): `cost` tokens are taken whether they are there or
-- not, the deficit never above twice the capacity (a debt of at most one bucket: what
-- would go further is dropped); the reply is a peek of one token after it (remaining
-- down to -capacity), so retry_after is when the refill has covered the debt and one
-- token. A deficit of more than the capacity is stored with its fraction as -1 - fraction
-- (the mark of a debt), so that the cut below keeps it; any other deficit is cut to the
-- capacity.
--
-- Limits are arguments. A raised limit adds its tokens at once. A changed refill applies
-- to the tokens still missing since the state was written, but the bucket is full no
-- later than the stored full time, the key's expiry. A bucket never misses more than
-- its capacity in force: a deficit left by a larger capacity (a lowered limit) is cut to
-- an empty bucket under the new one, so a downgrade costs at most one refill of the new
-- bucket; the call that finds such a deficit writes the cut state back, whatever it
-- decides (nothing is counted or given back by it). Otherwise all of this is a function
-- of the time alone, so a retry_after stays exact without writing on refusals. A stored
-- value that is not 32 bytes (of any Redis type: GET's WRONGTYPE error is caught), or
-- whose full time is more than 2^52 ms away, is not sluice's and is deleted.
--
-- Arithmetic: exact integers in doubles for limit, refill <= 2^40 and window <= 366
-- days; the twin (token_bucket.cc) follows this file step by step. How the exactness and
-- the speed are obtained: docs/algorithms.md, "Exactness of the buckets" and "Why the
-- bucket scripts look as they do".
-- The locals H, call, argv, key, op, now, grace, cost, limit, window, rate and the
-- functions wide() and put() come from src/algo/bucket_prelude.lua, which the build puts
-- in front of this file. The helpers above `--[[ per call ]]` take everything they use
-- as arguments (cmake/SluiceLua.cmake makes them once per script call).

-- ms until a deficit of k tokens + c/window token is refilled at `rate` per `window`,
-- rounded up.
local function refill_ms(k, c, window, rate)
  local p, q, r = k * window
  if p < H then
    r = p % rate
    q = (p - r) / rate
  else
    q, r = wide(k, window, rate)
  end
  r = r + c
  local u = r % rate
  q = q + (r - u) / rate
  if u > 0 then
    return q + 1
  end
  return q
end

-- Stores a deficit of k tokens + c/window token at `now`, full in `ttl` ms; returns ttl.
-- A deficit of more than the capacity `cap` (a debt) is marked by storing the fraction as
-- -1 - c.
local function store(key, now, grace, k, c, ttl, cap)
  local f = c
  if k > cap or (k == cap and c > 0) then
    f = -1 - c
  end
  put(key, struct.pack('>dddd', k, f, now, ttl), now, ttl, grace)
  return ttl
end

--[[ per call ]]

-- The capacity in force: `limit`, unless refilling it would take longer than H.
local cap = limit
if limit * window >= H then
  local q, r = wide(limit, window, rate)
  if q > H or (q == H and r > 0) then
    cap = wide(H, rate, window)
  end
end

-- The deficit now: xt tokens + xc/window token.
local v = redis.pcall('GET', key)
if v and v.err then
  call('DEL', key) -- not a string (an error reply): not sluice's
  v = false
end
local live = false
local debt = false -- the stored deficit may be more than the capacity: a debit's debt
local xt, xc, stored_ttl
if v and #v == 32 then
  local at, full_in
  xt, xc, at, full_in = struct.unpack('>dddd', v)
  if xc < 0 then
    debt, xc = true, -1 - xc
  end
  stored_ttl = at + full_in - now
  if stored_ttl > 0 and stored_ttl <= H and xt >= 0 and xc >= 0 then
    if xc >= window then
      xc = window - 1 -- written under another window: keep it below one token
    end
    -- What came back since the state was written.
    local e = now - at
    if e < 0 then
      e = 0
    elseif e > H then
      e = H
    end
    local p, dt, dc = e * rate
    if p < H then
      dc = p % window
      dt = (p - dc) / window
    else
      dt, dc = wide(e, rate, window)
    end
    if dt > xt or (dt == xt and dc >= xc) then
      xt, xc = 0, 0
    else
      xt = xt - dt
      xc = xc - dc
      if xc < 0 then
        xc = xc + window
        xt = xt - 1
      end
    end
    live = xt > 0 or xc > 0
  end
end

if op == '3' then
  if v then
    call('DEL', key)
  end
  return {1, cap, 0, 0}
end

if not live and op == '7' then
  xt, xc, stored_ttl, live = 0, 0, 0, true -- a debit of a full bucket (written below)
end

if not live then
  if v and (op ~= '0' or cost > cap) then
    call('DEL', key)
  end
  if cost > cap and op ~= '2' then
    return {2, cap, 0, 0}
  end
  if op ~= '0' then
    return {1, cap, 0, 0}
  end
  return {1, cap - cost, store(key, now, grace, cost, 0, refill_ms(cost, 0, window, rate), cap), 0}
end

local reset = refill_ms(xt, xc, window, rate)
if reset > stored_ttl then
  -- Refill got slower since the write: the bucket is still full at the stored time.
  local p = stored_ttl * rate
  if p < H then
    xc = p % window
    xt = (p - xc) / window
  else
    xt, xc = wide(stored_ttl, rate, window)
  end
  reset = stored_ttl
end
-- Never more missing than a whole bucket (two with a debit's debt): a cut deficit is
-- written back by every path.
local most = cap
if debt then
  most = cap + cap
end
local cut = xt > most or (xt == most and xc > 0)
if cut then
  xt, xc = most, 0
  reset = refill_ms(most, 0, window, rate)
end
local used = xt
if xc > 0 then
  used = xt + 1
end
local remaining = 0
if used < cap then
  remaining = cap - used
end

if op == '7' then
  -- A debit: charged whether it fits or not, the deficit never above twice the capacity
  -- (what would go further is dropped); then answered as a peek of one token.
  local add = cap + cap - used
  if cost < add then
    add = cost
  end
  if add > 0 then
    xt = xt + add
    used = used + add
    reset = store(key, now, grace, xt, xc, refill_ms(xt, xc, window, rate), cap)
  elseif cut then
    store(key, now, grace, xt, xc, reset, cap)
  else
    call('PEXPIRE', key, string.format('%d', stored_ttl + grace), 'NX')
  end
  if used < cap then
    return {1, cap - used, reset, 0}
  end
  return {0, cap - used, reset, refill_ms(xt + 1 - cap, xc, window, rate)}
end

if op == '2' then
  if cost > xt or (cost == xt and xc == 0) then
    call('DEL', key)
    return {1, cap, 0, 0}
  end
  xt = xt - cost
  used = used - cost
  if used < cap then
    remaining = cap - used
  end
  return {1, remaining, store(key, now, grace, xt, xc, refill_ms(xt, xc, window, rate), cap), 0}
end

local reply
if cost > cap then
  reply = {2, remaining, reset, reset}
elseif cost <= remaining then
  if op == '0' then
    xt = xt + cost
    return {1, remaining - cost, store(key, now, grace, xt, xc, refill_ms(xt, xc, window, rate), cap), 0}
  end
  reply = {1, remaining, reset, 0}
else
  -- Refused: retry when the deficit has shrunk to what leaves `cost` tokens.
  reply = {0, remaining, reset, refill_ms(xt + cost - cap, xc, window, rate)}
end
-- Nothing else written: keep the stored state's expiry, or store the cut state.
if cut then
  store(key, now, grace, xt, xc, reset, cap)
else
  call('PEXPIRE', key, string.format('%d', stored_ttl + grace), 'NX')
end
return reply
