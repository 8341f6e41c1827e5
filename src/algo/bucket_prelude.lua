-- sluice bucket prelude: what token_bucket.lua and gcra.lua share, put in front of each
-- of them at build time (cmake/SluiceLua.cmake): each script as Redis runs it is
-- src/algo/clock.lua, this file's helpers, the algorithm's helpers, then this file's
-- per-call part and the algorithm's (each file splits at its `--[[ per call ]]` line).
-- Not a script alone.
-- Reads the calling convention of src/algo/algorithm.h into locals: op, now and grace
-- (src/algo/clock.lua: Redis TIME, or the model clock with 60 s of grace), cost,
-- limit, window, rate (the refill; 0 means limit); and defines H and wide(), the exact
-- integer arithmetic both buckets need, and put(), how both write their value. H,
-- wide() and put() sit above the `--[[ per call ]]` line (cmake/SluiceLua.cmake): they read no
-- argument, so the batch and the composite make them once per script call.
local H = 4503599627370496 -- 2^52: the horizon in ms, and the bound of exact products
local call = redis.call

-- floor(a*b/d) and a*b % d for integers 0 <= a, b <= 2^52 and 1 <= d < 2^41, when
-- a*b >= 2^52 (below, p % d and (p - p % d) / d are exact). Exact when the quotient is
-- below 2^53; a larger quotient comes back >= 2^52 (callers only compare such a
-- quotient with something at most 2^52).
local function wide(a, b, d)
  local a0 = a % d
  local b0 = b % d
  local q = (a - a0) / d * b + a0 * ((b - b0) / d)
  local p = a0 * b0
  if p < H then
    local r = p % d
    return q + (p - r) / d, r
  end
  -- a0 * b0 with a0, b0 < d: long multiplication by b0's base-1024 digits, each partial
  -- sum below 2^52 so every % d is exact.
  local r, q0, k = 0, 0, 1099511627776
  while k >= 1 do
    local rest = b0 % k
    local t = r * 1024 + a0 * ((b0 - rest) / k)
    b0 = rest
    r = t % d
    q0 = q0 * 1024 + (t - r) / d
    k = k / 1024
  end
  return q + q0, r
end

-- Writes the bucket's 32-byte value over the one there (SETRANGE: Redis keeps the key's
-- value object), then its expiry `ttl` ms from `now`: at that absolute ms on Redis's
-- clock (PEXPIREAT), relative with the grace under a model clock, whose `now` is not
-- Redis's. Cheaper for Redis than one SET … PX, which frees the old value and the old
-- expiry to make new ones and rewrites itself to PXAT for replication. A SETRANGE whose
-- reply is not the new length (a longer foreign value was there, or an ACL user set up
-- by the earlier docs, without +setrange, got NOPERM) writes with SET … PX as before: no
-- tail of another value is ever left, and an upgrade never needs the ACL changed first.
-- (The check is a number compare: an error reply is a table.)
local function put(key, value, now, ttl, grace)
  if redis.pcall('SETRANGE', key, '0', value) ~= #value then
    call('SET', key, value, 'PX', string.format('%d', ttl + grace))
  elseif grace == 0 then
    call('PEXPIREAT', key, string.format('%d', now + ttl))
  else
    call('PEXPIRE', key, string.format('%d', ttl + grace))
  end
end

--[[ per call ]]
local argv = ARGV
local key = KEYS[1]
local op = argv[1]
local now, grace = clock(argv[2]) -- src/algo/clock.lua
local cost = argv[3] + 0
local limit = argv[4] + 0
local window = argv[5] + 0
local rate = argv[6] + 0
if rate == 0 then
  rate = limit
end
