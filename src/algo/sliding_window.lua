-- sluice sliding window counter: windows of `window` ms aligned to multiples of `window` on
-- the clock; an id may spend `limit` per trailing window, estimated from two counters.
-- KEYS[1]  the id's state: 26 bytes, struct.pack('<i8i6i6i6', start, current, previous,
--          window): the current window's start (ms, little-endian int64), the counts of
--          the current window and of the one just before it, and the window they were
--          counted in (int48 each). Packed, not text: parsing and printing decimal
--          numbers was a tenth of the script's cost. A value of the earlier 20-byte form
--          (no window) is read as counted in the window in force.
-- ARGV     op, now ("" = Redis TIME), cost (refund: amount), limit, window ms, refill
--          (unused), aligned (unused: always aligned) (see src/algo/algorithm.h)
-- Returns  {code, remaining, reset_after_ms, retry_after_ms}
-- Op "5" (take, LimiterOptions::local_budget) is decided as consume; admitted, its
-- reply's fourth field is the current window's end (ms on this clock), which the slice
-- holder names when it gives units back. Op "6" (give back): `cost` units a slice of
-- the window ending at ARGV[6] did not spend are taken from that window's own count —
-- the current one's when it is still current, the previous one's when it has just
-- ended — never below 0, and from nothing when that window is neither (a give-back that
-- arrives late never lowers another window's count); never refused; replies as refund.
-- Op "7" (debit, work already done): `cost` is added to the current count whether it
-- fits or not, the estimate never above twice the limit (a debt of at most one window's
-- worth: what would go further is dropped); the reply is a peek of one unit after it
-- (remaining down to -limit), so retry_after is when the window has slid far enough for
-- one unit, solved as for a refusal.
--
-- Estimate at time t, e = t - start (0 <= e < window):
--   used = floor(previous * (window - e) / window) + current
-- consume(n) is admitted iff used + n <= limit (then current += n); refused requests change
-- nothing. reset_after: until `used` is 0 for good. retry_after (refused): the first ms
-- at which used + n <= limit if nothing else happens (`used` never rises on its own, so
-- it is solved in closed form). refund(n) takes from the current count first, the rest
-- from the previous one, never below 0. reset deletes the key.
-- Arithmetic is integer-exact in Lua doubles for limit <= 2^40 and window <= 366 days:
-- products below 2^52 are divided directly, larger ones digit by digit (muldiv).
--
-- TTL rule: the key expires exactly when `used` reaches 0 for good (at most at the end of
-- the window after the current one), i.e. after reset_after; every write overwrites the
-- value (SETRANGE) and sets that expiry (PEXPIREAT) in the same script. A call that reads live state without writing it gives the key back an expiry if
-- it lost one (PEXPIRE … NX, never moving an existing one). State whose estimate is 0
-- for good, a value sluice did not write, or a window starting more than a window after
-- now (the clock stepped back that far) is deleted by the call that reads it.
-- Under a model clock (tests only) expiries get 60 s of grace, as in fixed_window.lua;
-- decisions come from the stored counts and start, never from the TTL.
-- Limits are arguments: state counted in another window is converted by the call that
-- reads it — its estimate now (under the window it was counted in) becomes the current
-- count of the window now falls in under the window in force, and is written back
-- whatever the call decides (nothing is counted or given back by it); so neither counts
-- nor a start computed with an older window outlive a change. A value of another Redis
-- type (GET's WRONGTYPE error is caught) is not sluice's and is deleted.
--
-- Error bound versus an exact sliding log (at most `limit` in any trailing window): the
-- estimate assumes the previous window's traffic was spread evenly over it. Within any
-- trailing window of length `window` ending at t it admits at most
-- limit + ceil(previous * e / window) <= 2 * limit units: the excess is reached only
-- when the previous window's traffic was bunched at its very end. Conversely it may
-- refuse while the trailing window holds fewer than `limit`, by at most the weighted
-- previous count (traffic bunched at the previous window's start). Each aligned window
-- admits at most `limit`, so the long-run rate never exceeds limit per window (all counts
-- net of refunds). Rounding the weighted previous count down puts the estimate less than
-- 1 unit below the real-valued weighting: it admits a request that real arithmetic would
-- refuse only when that one misses by less than 1 unit, and never refuses one it admits.
local floor = math.floor

-- floor(x * y / z) and the remainder, exact for x, z <= 2^41 and y < 2^40: a product
-- below 2^52 is divided directly (its floored quotient is then exact); a larger one digit
-- by digit of y in base 256, every partial product staying below 2^50.
local function muldiv(x, y, z)
  local prod = x * y
  if prod < 4503599627370496 then
    local q = floor(prod / z)
    return q, prod - q * z
  end
  local q, r, b = 0, 0, 4294967296
  while b >= 1 do
    local t = r * 256 + x * (floor(y / b) % 256)
    local d = floor(t / z)
    q = q * 256 + d
    r = t - d * z
    b = b / 256
  end
  return q, r
end

-- The first ms at which the estimate of state (s, c, p) is 0 for good: once the current
-- count has become the previous one, floor(c * (w - e) / w) = 0 iff e >= w + 1 - ceil(w / c).
local function zero_at(s, c, p, w)
  if c > 0 then
    return s + w + w + 1 - math.ceil(w / c)
  elseif p > 0 then
    return s + w + 1 - math.ceil(w / p)
  end
  return -math.huge
end

-- Writes state (s, c, p) counted in window w, whose estimate is 0 for good at `zero`: the
-- 26 bytes over the value in place (SETRANGE: Redis keeps the key's value object), then
-- the key's expiry at `zero` itself (PEXPIREAT, as Redis's clock; a model clock's `now`
-- is not Redis's, so there it stays relative, with the grace). Cheaper for Redis than
-- one SET … PX, which frees the old value and the old expiry to make new ones and
-- rewrites itself to PXAT for replication. A SETRANGE whose reply is not the new length,
-- 26 (a longer foreign value was there, or an ACL user without +setrange, as the earlier
-- docs set it up, got NOPERM), writes with SET … PX as before: no tail of another value
-- is ever left, and an upgrade never needs the ACL changed first.
local function put(key, now, grace, s, c, p, w, zero)
  local value = struct.pack('<i8i6i6i6', s, c, p, w)
  if redis.pcall('SETRANGE', key, '0', value) ~= 26 then
    redis.call('SET', key, value, 'PX', string.format('%d', zero - now + grace))
  elseif grace == 0 then
    redis.call('PEXPIREAT', key, string.format('%d', zero))
  else
    redis.call('PEXPIRE', key, string.format('%d', zero - now + grace))
  end
end

--[[ per call ]]
local key = KEYS[1]
local op = ARGV[1]
local take = op == '5'
if take then
  op = '0'
end
if op == '3' then
  redis.call('DEL', key)
  return {1, tonumber(ARGV[4]), 0, 0}
end

local now, grace = clock(ARGV[2]) -- src/algo/clock.lua
local cost = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local w = tonumber(ARGV[5])

local s, c, p, zero, sw
local moved = false -- converted from another window: written back by every path
local v = redis.pcall('GET', key)
if v and v.err then
  redis.call('DEL', key) -- not a string (an error reply): not sluice's
  v = false
end
if v then
  local ok = false
  if #v == 26 then
    s, c, p, sw = struct.unpack('<i8i6i6i6', v)
    ok = true
  elseif #v == 20 then
    s, c, p = struct.unpack('<i8i6i6', v)
    sw = w
    ok = true
  end
  if ok then
    ok = c >= 0 and p >= 0 and sw >= 1 and sw <= 31622400000 and s - now <= sw
  end
  if ok then
    zero = zero_at(s, c, p, sw)
  end
  if ok and now < zero and sw ~= w then
    -- Counted in another window: its estimate now becomes the current count.
    local e = now - s
    if e >= sw then
      p = c
      c = 0
      e = e - sw
    elseif e < 0 then
      e = 0
    end
    if p > 0 then
      c = c + muldiv(p, sw - e, sw)
    end
    s = now - now % w
    p = 0
    zero = zero_at(s, c, p, w)
    moved = true
  end
  if not ok or now >= zero then
    redis.call('DEL', key)
    s = nil
  end
end

if not s and op == '7' then
  s, c, p = now - now % w, 0, 0 -- a debit opens state (written below)
  moved = true
end
if not s then
  if cost > limit and op ~= '2' and op ~= '6' then
    return {2, limit, 0, 0}
  end
  if op ~= '0' then
    return {1, limit, 0, 0}
  end
  s = now - now % w
  zero = zero_at(s, cost, 0, w)
  put(key, now, grace, s, cost, 0, w, zero)
  return {1, limit - cost, zero - now, take and s + w or 0}
end

-- Live state. Rolling it into the next window changes neither decisions nor `zero`, so
-- only a call that writes stores the rolled form.
local e = now - s
if e >= w then
  s = s + w
  p = c
  c = 0
  e = e - w
elseif e < 0 then
  e = 0  -- the clock stepped back behind the window's start: weigh as at its start
end
local used = c
if p > 0 then
  used = used + muldiv(p, w - e, w)
end

if op == '7' then
  -- A debit: charged whether it fits or not, `used` never above twice the limit (what
  -- would go further is dropped); then answered as a peek of one unit.
  local add = limit + limit - used
  if cost < add then
    add = cost
  end
  if add > 0 then
    c = c + add
    used = used + add
    zero = zero_at(s, c, p, w)
    moved = true
  end
  op, cost = '1', 1
end

if op == '2' or op == '6' then
  if op == '6' then
    local named = tonumber(ARGV[6])
    if named == s + w then
      c = c - cost
      if c < 0 then
        c = 0
      end
    elseif named == s then
      p = p - cost
      if p < 0 then
        p = 0
      end
    end
  elseif cost <= c then
    c = c - cost
  else
    p = p - (cost - c)
    c = 0
    if p < 0 then
      p = 0
    end
  end
  zero = zero_at(s, c, p, w)
  if now >= zero then
    redis.call('DEL', key)
    return {1, limit, 0, 0}
  end
  put(key, now, grace, s, c, p, w, zero)
  used = c
  if p > 0 then
    used = used + muldiv(p, w - e, w)
  end
  return {1, limit - used, zero - now, 0}
end

local code = 1
if cost > limit then
  code = 2
elseif used + cost > limit then
  code = 0
end
if code == 1 and op == '0' then
  c = c + cost
  zero = zero_at(s, c, p, w)
  put(key, now, grace, s, c, p, w, zero)
  return {1, limit - used - cost, zero - now, take and s + w or 0}
end
if moved then
  put(key, now, grace, s, c, p, w, zero)
else
  redis.call('PEXPIRE', key, string.format('%d', zero - now + grace), 'NX')
end
if code == 1 then
  return {1, limit - used, zero - now, 0}
elseif code == 2 then
  return {2, limit - used, zero - now, zero - now}
end
-- Refused: the first m into the window starting at s (when current + cost fits: the
-- previous count x weighs, k = limit - current - cost) or at s + w (otherwise: the
-- current count x weighs as the previous one, k = limit - cost) with
-- floor(x * (w - m) / w) <= k. As x > k, m = w - (ceil((k + 1) * w / x) - 1), 1 <= m <= w.
local q, r
if c + cost <= limit then
  q, r = muldiv(limit - c - cost + 1, w, p)
else
  q, r = muldiv(limit - cost + 1, w, c)
  s = s + w
end
if r == 0 then
  q = q - 1
end
return {0, limit - used, zero - now, s + w - q - now}
