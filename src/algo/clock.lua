-- sluice clock: how a script reads "now" from its ARGV[2] (src/algo/algorithm.h), shared by
-- sliding_window.lua, sliding_log.lua, token_bucket.lua, gcra.lua, concurrency.lua and
-- quota_shares.lua: the build puts this file in front of each script's helpers
-- (cmake/SluiceLua.cmake). Not a script alone. (fixed_window.lua reads its own: its model
-- clock takes a path of its own.)
-- clock(v) returns now in ms and the expiry grace:
--   ""        Redis TIME, read now (no grace);
--   a number  Redis TIME, read once for a whole batch (src/algo/batch.lua; no grace);
--   a string  the model clock (tests): its value, and 60 s of grace on every expiry, as in
--             fixed_window.lua.
-- A number is told from the model clock's string without type() (~800 instructions under
-- callgrind): a string is not equal to its value.
local function clock(v)
  if v == '' then
    local t = redis.call('TIME')
    local us = t[2] % 1000
    return t[1] * 1000 + (t[2] - us) / 1000, 0
  elseif v + 0 == v then
    return v, 0
  end
  return tonumber(v), 60000
end
