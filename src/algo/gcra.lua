-- sluice gcra: the generic cell rate algorithm, a token bucket of `limit` tokens (the
-- burst) refilled at `refill` tokens per `window`, stored as ONE value per id: the
-- theoretical arrival time (TAT), the moment the bucket is full again.
-- KEYS[1]  the id's TAT, ms + f/refill milliseconds (0 <= f < refill; the fraction keeps
--          the bucket exact when refill does not divide the window), and the refill and
--          window it was written under: 32 bytes, four big-endian IEEE-754 doubles
--          (ms, f, refill, window). Values of the earlier forms (the decimal integer ms;
--          16 bytes ms, f) are read as written under the parameters in force. No key
--          means a full bucket.
-- ARGV     op, now ("" = Redis TIME), cost, limit, window ms, refill (0 = limit),
--          aligned (unused) (see src/algo/algorithm.h)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms}
-- TTL rule: every write puts the value (SETRANGE) and its expiry at the TAT (PEXPIREAT),
-- so the key expires exactly when the bucket is full again and an idle id costs no
-- memory; a call that reads a live TAT without writing it gives the key back an expiry
-- if it lost one (PEXPIRE … NX, never moving an existing one). A TAT that is past (the key lost its TTL), a value sluice did
-- not write, or a bucket found full is deleted by the call that reads it. Refused
-- requests change nothing. Under a model clock (tests only) expiries get 60 s of grace,
-- as in fixed_window.lua; the stored TAT keeps decisions exact.
-- Op "7" (debit, work already done): `cost` tokens are taken whether they are there or
-- not, never more than twice the capacity missing (a debt of at most one bucket: what
-- would go further is dropped); the reply is a peek of one token after it (remaining
-- down to -capacity), so retry_after is when the refill has covered the debt and one
-- token. A TAT missing more than the capacity is stored with its fraction as -1 - f (the
-- mark of a debt), so that the cut below keeps it; any other deficit is cut to the
-- capacity.
--
-- Limits are arguments, and tokens are what a plan change keeps: a TAT written under
-- another refill or window is first turned into the whole tokens it was missing then
-- (rounded up: a change may cost less than one token) and re-expressed at the refill in
-- force, so a raised limit adds its tokens at once whether or not the refill moved with
-- it (refill 0). A bucket never misses more than its capacity in force: a deficit left
-- by a larger capacity (a lowered limit) is cut to an empty bucket, so a downgrade costs
-- at most one refill of the new bucket. A call that converts or cuts the stored TAT
-- writes it back whatever it decides (nothing is counted or given back by it). A value
-- that is none of the forms (of any Redis type: GET's WRONGTYPE error is caught), or a
-- TAT more than 2^52 ms away, is not sluice's and is deleted.
--
-- Arithmetic: exact integers in doubles for limit, refill <= 2^40 and window <= 366
-- days; the twin (gcra.cc) follows this file step by step. How the exactness and the
-- speed are obtained: docs/algorithms.md, "Exactness of the buckets" and "Why the bucket
-- scripts look as they do".
-- The locals H, call, argv, key, op, now, grace, cost, limit, window, rate and the
-- functions wide() and put() come from src/algo/bucket_prelude.lua, which the build puts
-- in front of this file. The helper above `--[[ per call ]]` takes everything it uses as
-- arguments (cmake/SluiceLua.cmake makes it once per script call).

-- Stores the TAT now + m + f/rate ms (under this refill and window); returns the ms until
-- it. `debt`: the bucket misses more than its capacity (a debit's debt), marked by storing
-- the fraction as -1 - f.
local function store(key, now, grace, rate, window, m, f, debt)
  local ttl = m
  if f > 0 then
    ttl = m + 1
  end
  if debt then
    f = -1 - f
  end
  put(key, struct.pack('>dddd', now + m, f, rate, window), now, ttl, grace)
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

-- The deficit: xm ms + xf/vr ms until the bucket is full, as written under refill vr and
-- window vw.
local v = redis.pcall('GET', key)
if v and v.err then
  call('DEL', key) -- not a string (an error reply): not sluice's
  v = false
end
local live = false
local debt = false -- the stored TAT may miss more than the capacity: a debit's debt
local xm, xf, stored_ttl
local vr, vw = rate, window
if v then
  local m, f = tonumber(v), 0
  if not m then
    if #v == 32 then
      m, f, vr, vw = struct.unpack('>dddd', v)
      if f < 0 then
        debt, f = true, -1 - f
      end
    elseif #v == 16 then
      m, f = struct.unpack('>dd', v)
    end
  end
  if m and f >= 0 and vr >= 1 and vr <= 1099511627776 and vw >= 1 and vw <= 31622400000 and
      (now < m or (now == m and f > 0)) and m - now <= H then
    xm = m - now
    stored_ttl = xm
    if f > 0 then
      stored_ttl = xm + 1
    end
    xf = f
    if xf >= vr then
      xf = vr - 1 -- a TAT in an earlier form written under another refill
    end
    live = xm > 0 or xf > 0
  end
end

if op == '3' then
  if v then
    call('DEL', key)
  end
  return {1, cap, 0, 0}
end

if not live and op == '7' then
  xm, xf, stored_ttl, vr, vw, live = 0, 0, 0, rate, window, true -- a full bucket's debit
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
  local p, nm, nf = cost * window
  if p < H then
    nf = p % rate
    nm = (p - nf) / rate
  else
    nm, nf = wide(cost, window, rate)
  end
  return {1, cap - cost, store(key, now, grace, rate, window, nm, nf, false), 0}
end

-- Whole tokens missing, ceil(deficit * vr / vw) — or, past 2^52 (a TAT written under a
-- much slower refill), just a number larger than any limit or cost.
local used
do
  local p, q, r = xm * vr
  if p < H then
    r = p % vw
    q = (p - r) / vw
  else
    q, r = wide(xm, vr, vw)
  end
  if q > H then
    used = q
  else
    r = r + xf
    local u = r % vw
    used = q + (r - u) / vw
    if u > 0 then
      used = used + 1
    end
  end
end
-- Written under other parameters, or missing more than a whole bucket (two with a
-- debit's debt): the deficit becomes `used` whole tokens (at most that) at the refill in
-- force.
local most = cap
if debt then
  most = cap + cap
end
local moved = vr ~= rate or vw ~= window or used > most
if moved then
  if used > most then
    used = most
  end
  local p = used * window
  if p < H then
    xf = p % rate
    xm = (p - xf) / rate
  else
    xm, xf = wide(used, window, rate)
  end
end
local remaining = cap - used
local reset = xm
if xf > 0 then
  reset = xm + 1
end

if op == '7' then
  -- A debit: charged whether the tokens are there or not, never more than twice the
  -- capacity missing (what would go further is dropped); then answered as a peek of one
  -- token.
  local add = cap + cap - used
  if cost < add then
    add = cost
  end
  if add > 0 then
    local p, nm, nf = add * window
    if p < H then
      nf = p % rate
      nm = (p - nf) / rate
    else
      nm, nf = wide(add, window, rate)
    end
    xm, xf = xm + nm, xf + nf
    if xf >= rate then
      xf = xf - rate
      xm = xm + 1
    end
    used = used + add
    reset = store(key, now, grace, rate, window, xm, xf, used > cap)
  elseif moved then
    store(key, now, grace, rate, window, xm, xf, used > cap)
  else
    call('PEXPIRE', key, string.format('%d', stored_ttl + grace), 'NX')
  end
  if used < cap then
    return {1, cap - used, reset, 0}
  end
  -- Refused: retry when the deficit has shrunk to what leaves one token.
  local p, tm, tf = (cap - 1) * window
  if p < H then
    tf = p % rate
    tm = (p - tf) / rate
  else
    tm, tf = wide(cap - 1, window, rate)
  end
  local dm, df = xm - tm, xf - tf
  if df < 0 then
    df = df + rate
    dm = dm - 1
  end
  if df > 0 then
    dm = dm + 1
  end
  return {0, cap - used, reset, dm}
end

if op == '2' then
  if cost >= used then
    call('DEL', key)
    return {1, cap, 0, 0}
  end
  local p, nm, nf = cost * window
  if p < H then
    nf = p % rate
    nm = (p - nf) / rate
  else
    nm, nf = wide(cost, window, rate)
  end
  local ym, yf = xm - nm, xf - nf
  if yf < 0 then
    yf = yf + rate
    ym = ym - 1
  end
  if used - cost < cap then
    remaining = cap - (used - cost)
  end
  return {1, remaining, store(key, now, grace, rate, window, ym, yf, used - cost > cap), 0}
end

local reply
if cost > cap then
  reply = {2, remaining, reset, reset}
elseif cost <= remaining then
  if op == '0' then
    local p, nm, nf = cost * window
    if p < H then
      nf = p % rate
      nm = (p - nf) / rate
    else
      nm, nf = wide(cost, window, rate)
    end
    local sm, sf = xm + nm, xf + nf
    if sf >= rate then
      sf = sf - rate
      sm = sm + 1
    end
    return {1, remaining - cost, store(key, now, grace, rate, window, sm, sf, false), 0}
  end
  reply = {1, remaining, reset, 0}
else
  -- Refused: retry when the deficit has shrunk to what leaves `cost` tokens.
  local p, tm, tf = (cap - cost) * window
  if p < H then
    tf = p % rate
    tm = (p - tf) / rate
  else
    tm, tf = wide(cap - cost, window, rate)
  end
  local dm, df = xm - tm, xf - tf
  if df < 0 then
    df = df + rate
    dm = dm - 1
  end
  if df > 0 then
    dm = dm + 1
  end
  reply = {0, remaining, reset, dm}
end
-- Nothing else written: keep the stored TAT's expiry, or store the converted one.
if moved then
  store(key, now, grace, rate, window, xm, xf, used > cap)
else
  call('PEXPIRE', key, string.format('%d', stored_ttl + grace), 'NX')
end
return reply
