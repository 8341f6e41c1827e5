-- sluice batch: several independent calls, queued on one connection while a write was in
-- flight, decided in one script call, in order, each exactly as its own script decides
-- it alone (docs/design.md §7). This file is the driver only and does not run alone: the
-- build (cmake/SluiceLua.cmake) puts in front of it every algorithm's script and the
-- concurrency script, each wrapped as `make_<name>()`, which makes the helpers above the
-- script's `--[[ per call ]]` line and returns the function `(KEYS, ARGV)` of the rest
-- (so a batch makes only the functions its calls use, each once), the release of one
-- lease (a plain ZREM), MAKERS (each makes its function once, when a call first needs
-- it), ARITY (a digit per function: how many arguments it takes) and NUMERIC (per
-- function, the digits of the arguments it reads only as numbers), so no algorithm's
-- code is copied. Functions by index, as sent ('0' is MAKERS[1]): '0' fixed_window,
-- '1' sliding_window, '2' sliding_log, '3' token_bucket, '4' gcra (8 arguments each: an
-- algorithm's 7 and the block, src/algo/block.lua),
-- '5' concurrency (5), '6' release (1).
-- KEYS[i]  call i's key (what its script takes as KEYS[1]); 1 <= i <= 256
--          Or no KEYS at all: then ARGV[1] is the number of calls n and ARGV[2..n+1]
--          their keys, and the calls' items follow. A Redis Cluster primary runs such a
--          batch with keys of many of its slots (a script that declares keys may touch
--          one slot only; Redis 7 lets a script without a shebang reach undeclared keys
--          of any slot this node serves). A key of a slot it does not serve (a stale slot
--          map, a slot in migration) fails that call alone, before anything is written:
--          "Script attempted to access a non local key" (src/redis/cluster_store.h
--          sends it again with its key declared).
-- ARGV     per call, in KEYS order, one of:
--            its function's index, then all its arguments (exactly what its own script
--            takes as ARGV);
--            '<index>/': that function, with the arguments of its last call in this
--            batch (the calls of one limiter with one cost, the common batch);
--            '<index>/<k>' (k ~= 2), then one item: the same, except argument k (the
--            acquires of one concurrency limiter differ in their token only).
--          Calls of several limiters may interleave: each function keeps its own last
--          arguments. Redis makes one Lua string per ARGV item and this driver copies
--          them, so each argument shared is one less of both.
-- Returns  one flat array, the calls' replies one after the other, in order. Per call:
--            the 4 items of a decision's table (what its script returns alone) when the
--            first is a code, 0, 1, 2 or 3 (every algorithm's reply, 3 a block's
--            refusal; a lease's acquire,
--            heartbeat, release-all): the first item tells the client what follows;
--            -2 - w (<= -2), then the w items of any other table (a list of leases);
--            -1, then the one value its script returns alone (release: ZREM's count);
--            or one error reply, for that call only (a bad argument or value of one call
--            fails only that call).
--          Flat, not an array per call: Redis 7.0 turns a nested Lua table into a reply
--          at about 0.4 us per call on a 2-core EPYC VM (a third of a decision's whole cost), a
--          flat one at a tenth of that, and the client's reader makes one object per
--          element instead of two (src/redis/connection.cc, DispatchBatch).
-- TTL rule: each function keeps its own (it is its script); the driver writes no key.
-- Calls are independent: each decides on what the calls before it left, as if sent one
-- by one in this order (which is the order the connection would have sent them in).
local n = #KEYS
local keys_in, key_at = KEYS, 0 -- call i's key is keys_in[key_at + i]
local j = 1
if n == 0 then
  n = tonumber(ARGV[1]) or 0
  keys_in, key_at, j = ARGV, 1, n + 2
end
if n < 1 or n > 256 or key_at + n > #ARGV then
  return redis.error_reply('ERR sluice batch: want 1-256 keys, got ' .. n)
end
local out = {}
local at = 0 -- items written to out
local count = #ARGV
-- Redis TIME, read once for the calls that ask for it (ARGV "now" = ""): every call of a
-- batch is decided at the same instant. Passed as a number, which no argument from the
-- client can be: each script takes a number there as "Redis TIME, already read" (no
-- model-clock grace).
local now
-- Every table made here costs Redis ~1.8k instructions at every script call (allocation,
-- then garbage), two tables a twentieth of a decision: so there are few. keys: one key
-- table, refilled for each call. saved[d]: function d's arguments, refilled by each call
-- that sends them in full and kept for the calls that reuse them (the functions only
-- read them): no garbage per call. made[d]: function d once made (MAKERS[d]()).
local keys, saved, made = {}, {}, {}
local byte = string.byte
-- The item that opened the call before, read: function d, its arity m, and k: -1, all
-- its arguments follow; 0, none (it reuses them all); k >= 1, argument k follows. Read
-- by its bytes (one C call; no table of markers, which Redis would build at every
-- script call), and not again for a run of equal items. fn and args: the function and
-- arguments that call ran with.
local last, d, m, k, fn, args
for i = 1, n do
  local s = ARGV[j]
  if s == last and k == 0 then
    -- Like the call before, this one reuses all the arguments it ran with (the common
    -- batch: a limiter's calls of one cost).
    j = j + 1
  else
    if s ~= last then
      last, d, k = s, nil, nil
      if s then
        local b, slash, digit = byte(s, 1, 3)
        local len = #s
        if b and b >= 48 and b < 48 + #ARITY then
          if len == 1 then
            k = -1
          elseif slash == 47 and len == 2 then
            k = 0
          elseif slash == 47 and len == 3 and digit >= 49 and digit <= 57 and digit ~= 50 then
            k = digit - 48
          end
          m = byte(ARITY, b - 47) - 48
          if k and k <= m then
            d = b - 47
          end
        end
      end
    end
    local bad
    args = d and saved[d]
    if not d then
      bad = 'unknown function "' .. tostring(s) .. '"'
    elseif k < 0 then
      if j + m > count then
        bad = 'too few arguments'
      else
        if not args then
          args = {}
          saved[d] = args
        end
        for x = 1, m do
          args[x] = ARGV[j + x]
        end
        if m > 1 and args[2] == '' then
          if not now then
            local t = redis.call('TIME')
            local us = t[2] % 1000
            now = t[1] * 1000 + (t[2] - us) / 1000
          end
          args[2] = now
        end
        j = j + 1 + m
        -- When the next call reuses these arguments, the ones NUMERIC names are converted
        -- here, once for all the calls that reuse them (a number passes through the
        -- function's own tonumber or arithmetic unchanged, without Lua's string-to-number
        -- conversion: two strtod calls per tonumber). Arguments no call reuses right after
        -- are left alone (converting them here would cost what the function's own
        -- conversion costs, or more). A string that is not a number stays a string, so
        -- the function fails on it exactly as alone.
        local numeric = NUMERIC[d]
        local next_b, next_slash = byte(ARGV[j] or '', 1, 2)
        if numeric and next_b == 47 + d and next_slash == 47 then
          for x = 1, #numeric do
            local at = byte(numeric, x) - 48
            local v = tonumber(args[at])
            if v then
              args[at] = v
            end
          end
        end
      end
    elseif not args then
      bad = '"' .. s .. '" reuses the arguments of no earlier call'
    elseif k > 0 then
      if j + 1 > count then
        bad = 'too few arguments'
      else
        args[k] = ARGV[j + 1] -- the one argument this call does not share
        j = j + 2
      end
    else
      j = j + 1
    end
    if bad then
      -- The rest of ARGV cannot be parsed: fail this call and every one after it.
      for x = i, n do
        out[at + 1 + x - i] = {err = 'ERR sluice batch: ' .. bad .. ' at call ' .. i}
      end
      return out
    end
    fn = made[d]
    if not fn then
      fn = MAKERS[d]()
      made[d] = fn
    end
  end
  keys[1] = keys_in[key_at + i]
  -- A decision comes back as its 4 values, not a table (the build turns each function's
  -- `return {a, b, c, d}` lines into `return a, b, c, d`: cmake/SluiceLua.cmake); any other
  -- reply as one value.
  local ok, r, r2, r3, r4, r5 = pcall(fn, keys, args)
  if ok and r4 ~= nil and r5 == nil and (r == 1 or r == 0 or r == 2 or r == 3) then
    -- A decision's reply: its 4 items as they are (the first says what follows).
    out[at + 1] = r
    out[at + 2] = r2
    out[at + 3] = r3
    out[at + 4] = r4
    at = at + 4
  elseif ok then
    if fn == release then
      out[at + 1] = -1
      out[at + 2] = r or false -- nil would end the array there
      at = at + 2
    else
      if r2 ~= nil or r5 ~= nil or type(r) ~= 'table' then
        r = {r, r2, r3, r4, r5} -- a literal of other items, made values (`{now}` …)
      end
      local w, h = #r, r[1]
      if r.err then
        at = at + 1
        out[at] = r -- an error reply its script returned
      elseif w == 4 and (h == 1 or h == 0 or h == 2 or h == 3) then
        -- A decision kept in a table before its return (`return reply`): as above.
        out[at + 1] = h
        out[at + 2] = r[2]
        out[at + 3] = r[3]
        out[at + 4] = r[4]
        at = at + 4
      else
        out[at + 1] = -2 - w
        for x = 1, w do
          out[at + 1 + x] = r[x]
        end
        at = at + 1 + w
      end
    end
  else
    at = at + 1
    if type(r) == 'table' and r.err then
      out[at] = r
    else
      out[at] = {err = 'ERR sluice batch: call ' .. i .. ': ' .. tostring(r)}
    end
  end
end
return out
