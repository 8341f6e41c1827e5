-- sluice concurrency leases: at most `limit` live leases per id (docs/design.md §4).
-- KEYS[1]  the id's lease set: a sorted set, one member per lease.
--            member = <acquired at ms>:<token>   (the token is random and unguessable,
--                     chosen by the client; the acquisition time is the store's)
--            score  = the store-clock ms at which the lease stops being believable.
--          A lease is live while now < score. Expired members are removed by the next
--          acquire (ZREMRANGEBYSCORE): no reaper, the path that counts is the one that
--          prunes.
--          Op 5 only: KEYS[1] is the audit stream instead.
-- ARGV[1]  op: "0" acquire, "1" heartbeat, "3" release all, "4" list, "5" audit append,
--          "6" wait (take a ticket, or a lease when the ticket's turn came), "7" leave the queue
--          (release of one lease is a plain ZREM: nothing to check, one command; the
--          client then SPUBLISHes on the channel KEYS[1] when it removed a lease)
-- ARGV[2]  model clock ms, or "" to read Redis TIME (models are tests)
-- ARGV[3]  acquire: the token; heartbeat: the member
-- ARGV[4]  acquire: limit (>= 1)
-- ARGV[5]  acquire, heartbeat, wait: lease ttl in ms (>= 1)
-- ARGV[6]  wait: the ticket's ttl in ms (>= 1)     (ops 6 and 7 are sent alone, never in a
-- ARGV[7]  wait: the most tickets per id (>= 1)     batch: the batch function takes 5 args)
-- Waiting acquires (ops 6 and 7): two sorted sets beside the lease set, in its slot
-- (KEYS[1] .. 'w' and KEYS[1] .. 'x'), one member per waiter's ticket (its token):
--   <set>w  score = the ticket's arrival: the store-clock ms it was taken times 1024, or
--           one more than the latest arrival when that is higher (tickets taken in one
--           ms keep the order in which the script ran; 2^53 holds ms * 1024 for
--           another 200,000 years);
--   <set>x  score = the ms the ticket stops being believable (a waiter refreshes it at
--           every re-check; a dead waiter's ticket is dropped past it by the next call
--           that reads the queue).
-- Both expire with their latest ticket (PEXPIRE … GT in the same script). While live
-- tickets exist, an acquire (op 0) takes a slot only if more are free than tickets wait,
-- and a waiter only when fewer tickets are ahead of it than slots are free: nobody
-- overtakes a waiter. Wake-ups: a release publishes on the channel named KEYS[1]
-- (SPUBLISH, the key's shard), sent by the client after the ZREM; a waiter that leaves
-- publishes there when tickets remain (it may have held a turn).
-- Returns
--   acquire    {1, live count after, now, expires at}         granted
--              {0, live count, now, earliest expiry}          refused (count >= limit)
--   heartbeat  {1, 0, now, expires at}                        extended (or kept: never back)
--              {0, 0, now, 0}                                 gone: released, expired, or
--                                                             never there; never resurrected
--   release all {1, live leases removed, now, 0}
--   list       {now, member, expires at, member, expires at, ...}  live leases only
--   audit      {1, 0, now, 0}
--   wait       {1, live count after, now, expires at}         granted (ticket dropped)
--              {2, tickets ahead, now, earliest expiry or 0}  waiting (ticket taken or kept)
--              {3, tickets, now, earliest expiry or 0}        refused: the queue is full
--   leave      {1, tickets left, now, 0}
-- TTL rule: the set expires when its last lease does. Every write that moves a score
-- forward moves the key's expiry with it (PEXPIRE … GT); a new key gets a plain PEXPIRE;
-- when GT refuses (same ms, or the key lost its expiry) PTTL tells which, and a key
-- with no expiry gets one at its latest score; every other path through an existing
-- set (refusals, heartbeats that find their lease gone, lists) checks PTTL the same way.
-- (Releasing one lease is a plain ZREM, which cannot: the next acquire repairs it.) Under a model clock (tests only)
-- expiries get 60 s of grace, as in fixed_window.lua.
-- A key that is not a sorted set (WRONGTYPE) is not sluice's: whichever op finds it
-- (acquire, heartbeat, release all, list) deletes it and goes on as if there were no set.
-- Lease ttls are arguments too, but a live lease keeps the expiry it was granted or
-- last moved to: a shorter ttl applies from the lease's next heartbeat past that expiry
-- and to new leases (cutting a live lease short could give its slot to another holder
-- while the first still believes it holds it).
-- History (the support console's chart of live leases): every granted acquire (ops 0 and
-- 6), and the first heartbeat of a lease in each minute (one that extends it), records the
-- id's live count in a hash beside the lease set, `<lease key without "cc">ch` (the same
-- hash tag, so the same slot): field minute % 64, value "<minute>:<highest live count
-- that minute>" (minute = ms / 60000 on the clock above). At most 64 fields per id, each
-- overwritten when its slot comes round again, so nothing needs trimming; the hash expires
-- 65 minutes after the last minute that wrote one (PEXPIRE when a minute's first write
-- lands). Readers keep the last 60 minutes. It costs an HGET per write, and an HSET plus
-- PEXPIRE when the maximum moves or a minute begins (docs/benchmarks.md). A heartbeat in
-- the minute of its lease's grant or previous heartbeat (the lease's old expiry minus the
-- ttl) writes nothing: the count has risen since only by grants, which wrote it
-- themselves; so a holder's heartbeats cost the history one write per lease per minute,
-- not one per heartbeat. (A ttl shortened between two heartbeats can make one minute's
-- heartbeat skip its write; grants and the other leases' heartbeats still write that
-- minute.) A history key that is not a hash (WRONGTYPE) is deleted.
-- Cost: an acquire on an id with no set makes 5 redis.calls (TIME, ZCARD, the queue's
-- ZCARD, ZADD, PEXPIRE), on an id with leases 6 (+ ZREMRANGEBYSCORE); one refused at the
-- limit reads no queue; a heartbeat 4 (TIME, ZSCORE, ZADD, PEXPIRE); then the history's
-- (above): a grant 1 to 3, a lease's first heartbeat of a minute 2 to 4.
-- Numbers passed to redis.call are formatted with '%d' (Redis 7.0 formats a Lua number
-- argument with a costly '%.17g').
-- The two helpers above `--[[ per call ]]` take what they use as arguments: in the batch
-- they are made once per script call (cmake/SluiceLua.cmake), not once per lease.

-- Gives a key that lost its expiry one at its latest score.
local function restore_ttl(key, now, grace)
  if redis.call('PTTL', key) == -1 then
    local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if top[2] then
      redis.call('PEXPIRE', key, string.format('%d', tonumber(top[2]) - now + grace))
    end
  end
end

-- The key's expiry follows a score moved forward to `ms` (text) from now.
local function follow(key, now, grace, ms, fresh)
  if fresh then
    redis.call('PEXPIRE', key, ms)
  elseif redis.call('PEXPIRE', key, ms, 'GT') == 0 then
    restore_ttl(key, now, grace)
  end
end

-- Records `live` leases at `now` in the id's per-minute history (see History above).
local function note_live(key, now, live)
  local history = string.sub(key, 1, -3) .. 'ch'
  local minute = math.floor(now / 60000)
  local field = string.format('%d', minute % 64)
  local seen = redis.pcall('HGET', history, field)
  if type(seen) == 'table' then
    redis.call('DEL', history) -- WRONGTYPE: not sluice's
    seen = false
  end
  local same_minute = false
  if seen then
    local at, most = string.match(seen, '^(%d+):(%d+)$')
    if tonumber(at) == minute then
      if tonumber(most) >= live then
        return
      end
      same_minute = true
    end
  end
  redis.call('HSET', history, field, string.format('%d:%d', minute, live))
  if not same_minute then
    redis.call('PEXPIRE', history, 3900000)
  end
end

-- The live tickets of the lease set `key`'s queue, after dropping expired ones (and a
-- queue of another type: not sluice's).
local function live_tickets(key, now)
  local q, qx = key .. 'w', key .. 'x'
  local n = redis.pcall('ZCARD', qx)
  if type(n) == 'table' then
    redis.call('DEL', q, qx)
    return 0
  end
  if n == 0 then
    return 0
  end
  local dead = redis.call('ZRANGE', qx, '-inf', now, 'BYSCORE')
  if #dead > 0 then
    redis.call('ZREM', qx, unpack(dead))
    redis.call('ZREM', q, unpack(dead))
  end
  return n - #dead
end

-- The earliest live lease's expiry, 0 when none.
local function earliest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return tonumber(first[2]) or 0
end

-- A queue key's expiry follows a ticket's expiry `ms` (text) from now.
local function keep_ticket_ttl(k, ms)
  if redis.call('PEXPIRE', k, ms, 'GT') == 0 and redis.call('PTTL', k) == -1 then
    redis.call('PEXPIRE', k, ms)
  end
end

-- What the acquires of one batch share, turned from text once (src/algo/batch.lua reads
-- Redis TIME once per batch, and a limiter's limit and lease ttl are the same arguments
-- in every call): each is kept with what it was made from and remade only when that
-- changes (strings compare by identity in Lua, so a hit costs one compare). Alone, a
-- script makes each once anyway.
local limit_text, limit_n, ttl_text, ttl_n, expires_n, expires_text, now_n, now_text

--[[ per call ]]
local key = KEYS[1]
local op = ARGV[1]
local now, grace = clock(ARGV[2]) -- src/algo/clock.lua

if op == '0' then
  if ARGV[4] ~= limit_text then
    limit_text, limit_n = ARGV[4], tonumber(ARGV[4])
  end
  local limit = limit_n
  -- An id with no set (the common case: its last lease was released) skips the prune.
  local count = redis.pcall('ZCARD', key)
  if type(count) == 'table' then
    redis.call('DEL', key)  -- WRONGTYPE: not a sorted set, not sluice's
    count = 0
  elseif count > 0 then
    count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  end
  -- Waiters first: refused while the free slots are theirs (see the header).
  if count < limit and count + live_tickets(key, now) >= limit then
    restore_ttl(key, now, grace)
    return {0, count, now, earliest(key)}
  end
  if count < limit then
    if ARGV[5] ~= ttl_text then
      ttl_text, ttl_n = ARGV[5], tonumber(ARGV[5])
    end
    local expires = now + ttl_n
    if expires ~= expires_n then
      expires_n, expires_text = expires, string.format('%d', expires)
    end
    if now ~= now_n then
      now_n, now_text = now, string.format('%d:', now)
    end
    redis.call('ZADD', key, expires_text, now_text .. ARGV[3])
    follow(key, now, grace, grace == 0 and ARGV[5] or string.format('%d', ttl_n + grace), count == 0)
    note_live(key, now, count + 1)
    return {1, count + 1, now, expires}
  end
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  restore_ttl(key, now, grace)
  return {0, count, now, tonumber(first[2])}
end

if op == '1' then
  local member = ARGV[3]
  local score = redis.pcall('ZSCORE', key, member)
  if type(score) == 'table' then
    redis.call('DEL', key) -- WRONGTYPE: not sluice's; the lease is gone
    return {0, 0, now, 0}
  end
  if not score then
    restore_ttl(key, now, grace)
    return {0, 0, now, 0}
  end
  score = tonumber(score)
  if score <= now then
    -- Expired but not yet pruned: gone for good (ZADD XX GT alone would revive it).
    redis.call('ZREM', key, member)
    restore_ttl(key, now, grace)
    return {0, 0, now, 0}
  end
  local expires = now + tonumber(ARGV[5])
  if expires > score then
    redis.call('ZADD', key, string.format('%d', expires), member)
    follow(key, now, grace, grace == 0 and ARGV[5] or string.format('%d', ARGV[5] + grace), false)
    if math.floor((score - tonumber(ARGV[5])) / 60000) < math.floor(now / 60000) then
      note_live(key, now, redis.call('ZCOUNT', key, string.format('(%d', now), '+inf'))
    end
    return {1, 0, now, expires}
  end
  restore_ttl(key, now, grace)
  return {1, 0, now, score}
end

if op == '3' then
  local live = redis.pcall('ZCOUNT', key, string.format('(%d', now), '+inf')
  if type(live) == 'table' then
    live = 0 -- WRONGTYPE: not sluice's, no leases to count
  end
  redis.call('DEL', key)
  return {1, live, now, 0}
end

if op == '4' then
  local rows = redis.pcall('ZRANGE', key, string.format('(%d', now), '+inf', 'BYSCORE', 'WITHSCORES')
  if rows.err then
    redis.call('DEL', key) -- WRONGTYPE: not sluice's
    return {now}
  end
  local out = {now}
  for i = 1, #rows, 2 do
    out[#out + 1] = rows[i]
    out[#out + 1] = tonumber(rows[i + 1])
  end
  restore_ttl(key, now, grace)
  return out
end

if op == '5' then
  -- ARGV[3] max length, ARGV[4] retention ms, ARGV[5..] field, value pairs.
  local args = {'XADD', key, 'MAXLEN', '~', ARGV[3], '*'}
  for i = 5, #ARGV do
    args[#args + 1] = ARGV[i]
  end
  redis.call(unpack(args))
  redis.call('PEXPIRE', key, ARGV[4])
  return {1, 0, now, 0}
end

if op == '6' then
  local count = redis.pcall('ZCARD', key)
  if type(count) == 'table' then
    redis.call('DEL', key) -- WRONGTYPE: not sluice's
    count = 0
  elseif count > 0 then
    count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  end
  local queue_type = redis.call('TYPE', key .. 'w').ok
  if queue_type ~= 'zset' and queue_type ~= 'none' then
    redis.call('DEL', key .. 'w', key .. 'x') -- not sluice's
  end
  local waiting = live_tickets(key, now)
  local token = ARGV[3]
  local rank = waiting > 0 and redis.call('ZRANK', key .. 'w', token) or nil
  if (rank or waiting) < tonumber(ARGV[4]) - count then
    if rank then
      redis.call('ZREM', key .. 'w', token)
      redis.call('ZREM', key .. 'x', token)
    end
    local ttl = tonumber(ARGV[5])
    redis.call('ZADD', key, string.format('%d', now + ttl), string.format('%d:', now) .. token)
    follow(key, now, grace, string.format('%d', ttl + grace), count == 0)
    note_live(key, now, count + 1)
    return {1, count + 1, now, now + ttl}
  end
  if count > 0 then
    restore_ttl(key, now, grace)
  end
  if not rank then
    if waiting >= tonumber(ARGV[7]) then
      return {3, waiting, now, earliest(key)}
    end
    local last = redis.call('ZRANGE', key .. 'w', -1, -1, 'WITHSCORES')[2]
    local arrival = math.max(now * 1024, (tonumber(last) or 0) + 1)
    redis.call('ZADD', key .. 'w', string.format('%d', arrival), token)
    rank = waiting
  end
  local ticket_ttl = tonumber(ARGV[6])
  redis.call('ZADD', key .. 'x', string.format('%d', now + ticket_ttl), token)
  local keep = string.format('%d', ticket_ttl + grace)
  keep_ticket_ttl(key .. 'w', keep)
  keep_ticket_ttl(key .. 'x', keep)
  return {2, rank, now, earliest(key)}
end

if op == '7' then
  redis.call('ZREM', key .. 'w', ARGV[3])
  redis.call('ZREM', key .. 'x', ARGV[3])
  local left = live_tickets(key, now)
  if left > 0 then
    redis.call('SPUBLISH', key, '')
  end
  return {1, left, now, 0}
end

return redis.error_reply('ERR sluice concurrency: unknown op ' .. tostring(op))
