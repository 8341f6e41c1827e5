-- sluice block (LimiterOptions::block_for, a rule's `block_duration`): once a limit refuses
-- an id, the id stays refused for a stated time. Not a script alone: the build
-- (cmake/SluiceLua.cmake) puts this file in front of every rate algorithm's script (alone,
-- in the composite and in the batch), and runs an algorithm's per-call part through
-- block_gate when the call names a block (ARGV[8] not "0") or is a reset, so a call
-- without a block runs the algorithm exactly as before (two string compares more).
-- KEYS[1]  the algorithm's key; the block lives at KEYS[1] .. '.blk' (a string: the
--          block's end, ms on the deciding clock), in the same hash slot (the same tag).
-- ARGV     the algorithm's (src/algo/algorithm.h), and ARGV[8] the block in ms ("0": none)
-- Returns  the algorithm's reply, or, refused by a block, {3, 0, left_ms, left_ms}:
--          code 3 is a refusal that holds whatever the cost until left_ms have passed
--          (the client's denial cache answers every cost with it).
-- Decisions:
--   consume, take: refused with code 3 while a block holds (the algorithm is not run:
--     nothing is counted, no window or bucket moves, the block is not extended); else the
--     algorithm decides, and a refusal over the limit (code 0) starts a block of ARGV[8]
--     ms and is answered with code 3, retry_after and reset_after at least the block's.
--     A cost larger than the limit (code 2) starts none: that request never passes, and
--     the id's other requests are not the ones refused.
--   peek: refused with code 3 while a block holds; its own refusal starts none (a peek
--     is a question). The composite, which peeks all its limits but the last, starts
--     the block of a limit whose peek refused (block_start) itself.
--   reset: deletes the block whatever ARGV[8] says (an operator's reset clears it).
--   refund, debit, sync, give back: the algorithm alone; a debit into debt starts no
--     block (the next check it leaves refused does).
-- TTL rule: the block key is written with its end as its expiry (SET … PXAT on Redis's
-- clock; PX with the scripts' 60 s of grace under a model clock, whose time Redis's
-- expiry cannot follow, so the value decides); a block key found without an expiry gets
-- its end back (PEXPIREAT … NX), one found over (or not a number: not sluice's) is
-- deleted by the call that reads it.

-- Now, and the expiry grace, as src/algo/clock.lua reads it; Redis TIME read here is
-- written back into ARGV[2] as a number, which every algorithm takes as "Redis TIME,
-- read already" (as from the batch driver), so the gate and the algorithm decide at one
-- instant.
local function block_clock(ARGV)
  local v = ARGV[2]
  if v == '' then
    local t = redis.call('TIME')
    local us = t[2] % 1000
    local now = t[1] * 1000 + (t[2] - us) / 1000
    ARGV[2] = now
    return now, 0
  elseif v + 0 == v then
    return v, 0
  end
  return tonumber(v), 60000
end

-- Starts a block of `ms` at `key` (an algorithm's key) from `now`; returns its end.
local function block_start(key, now, grace, ms)
  local ends = now + ms
  if grace == 0 then
    redis.call('SET', key .. '.blk', string.format('%d', ends), 'PXAT', string.format('%d', ends))
  else
    redis.call('SET', key .. '.blk', string.format('%d', ends), 'PX', string.format('%d', ms + grace))
  end
  return ends
end

-- The block's end at `key` when one holds at `now`, else false (deleting a block that is
-- over, or a value that is not sluice's); false and the error reply for any other error
-- (NOPERM …: it says nothing about the value).
local function block_holds(key, now, grace)
  local bkey = key .. '.blk'
  local v = redis.pcall('GET', bkey)
  if not v then
    return false
  end
  local ends = type(v) == 'string' and string.find(v, '^%d+$') and tonumber(v)
  if ends and ends > now then
    if grace == 0 then
      redis.call('PEXPIREAT', bkey, string.format('%d', ends), 'NX')
    else
      redis.call('PEXPIRE', bkey, string.format('%d', ends - now + grace), 'NX')
    end
    return ends
  end
  if type(v) == 'table' and not string.find(v.err, 'WRONGTYPE', 1, true) then
    return false, v
  end
  redis.call('DEL', bkey)
  return false
end

-- Runs `decide` (an algorithm's per-call function) under the block of ARGV[8]. Its reply
-- comes back as it returned it: a table, or in the batch, where the build turns a reply
-- written as a literal into its four values (cmake/SluiceLua.cmake), often four values.
local function block_gate(KEYS, ARGV, decide)
  local op = ARGV[1]
  if op == '3' then
    redis.call('DEL', KEYS[1] .. '.blk')
    return decide(KEYS, ARGV)
  end
  if op ~= '0' and op ~= '1' and op ~= '5' then
    return decide(KEYS, ARGV)
  end
  local now, grace = block_clock(ARGV)
  local ends, err = block_holds(KEYS[1], now, grace)
  if ends then
    return {3, 0, ends - now, ends - now}
  elseif err then
    return err
  end
  local r, r2, r3, r4 = decide(KEYS, ARGV)
  local code, reset, retry = r, r3, r4
  if type(r) == 'table' then
    code, reset, retry = r[1], r[3], r[4] -- an error reply's are nil: code is not 0
  end
  if code ~= 0 or op == '1' then
    return r, r2, r3, r4 -- as it came (a table's r2, r3, r4 are nil)
  end
  local ms = tonumber(ARGV[8]) or 0
  if ms <= 0 then
    return r, r2, r3, r4
  end
  block_start(KEYS[1], now, grace, ms)
  return {3, 0, math.max(reset, ms), math.max(retry, ms)}
end
