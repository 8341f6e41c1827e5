# The functions of the batch script (src/algo/batch.lua, docs/design.md §7): the one list
# of them. cmake/SluiceLua.cmake makes from it the batch script's tables (MAKERS, ARITY,
# NUMERIC), the composite's table of algorithms and generated/batch_manifest.h, the
# constants the C++ side sends and checks (redis/scripts.h, redis/batch_codec.h).
#
#   sluice_batch_function(<name> INDEX <i> ARITY <m> [NUMERIC <k>...] [PRELUDE] [CLOCK]
#                         [COMPOSITE] [LUA <body>])
#
# INDEX     the function's index as a call names it ('<i>', '<i>/', '<i>/<k>'): one digit,
#           in this order, from 0 (MAKERS[i + 1]). An algorithm's is its Algorithm enum
#           value (include/sluice/limits.h; redis/scripts.h checks it).
# ARITY     how many arguments (ARGV items) the function takes: one digit.
#           The rate algorithms take 8: their 7 (src/algo/algorithm.h) and the block
#           (src/algo/block.lua), which is not NUMERIC: the gate tells "0" by its text.
# NUMERIC   the arguments the function reads only as numbers (tonumber or arithmetic): the
#           driver converts them once for a run of calls that reuse them, not once per
#           call. fixed_window's cost (3) is not among them: it passes ARGV[3] to INCRBY as
#           it came, and Redis 7.0 formats a Lua number argument with a costly '%.17g'
#           (more than its tonumber). concurrency keeps its own text-to-number cache
#           (src/algo/concurrency.lua): its ttl goes to PEXPIRE as text.
# PRELUDE   src/algo/bucket_prelude.lua goes in front of the script (its argument reading
#           and wide arithmetic, shared by token_bucket and gcra), alone and in the batch.
# CLOCK     src/algo/clock.lua goes in front of the script's helpers: it reads "now"
#           (ARGV[2]: Redis TIME, the batch's TIME or the model clock) that way.
#           fixed_window reads its own (its model clock takes a path of its own).
# COMPOSITE the function is also one of the composite's algorithms (src/algo/composite.lua),
#           whose table is in the same order.
# LUA       the function's body, when it has no script file: otherwise its script is
#           src/algo/<name>.lua, embedded alone as well (k<Name>Lua).
sluice_batch_function(fixed_window INDEX 0 ARITY 8 NUMERIC 4 5 COMPOSITE)
sluice_batch_function(sliding_window INDEX 1 ARITY 8 NUMERIC 3 4 5 CLOCK COMPOSITE)
sluice_batch_function(sliding_log INDEX 2 ARITY 8 NUMERIC 4 CLOCK COMPOSITE)
sluice_batch_function(token_bucket INDEX 3 ARITY 8 NUMERIC 3 4 5 6 PRELUDE CLOCK COMPOSITE)
sluice_batch_function(gcra INDEX 4 ARITY 8 NUMERIC 3 4 5 6 PRELUDE CLOCK COMPOSITE)
sluice_batch_function(concurrency INDEX 5 ARITY 5 CLOCK)
# The release of one lease: a plain ZREM (alone, the connection sends the command itself).
sluice_batch_function(release INDEX 6 ARITY 1 LUA "return redis.call('ZREM', KEYS[1], ARGV[1])")
