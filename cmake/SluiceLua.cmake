# The Lua scripts, embedded in the library (generated/lua_scripts.cc: each .lua file of
# src/algo/ and src/admin/ is the only copy of its script), and the batch script's
# constants for the C++ side (generated/batch_manifest.h). The batch functions are listed
# once, in cmake/batch_manifest.cmake; CMakeLists.txt includes this file, then the
# manifest, then calls sluice_lua_generate.

# One entry of cmake/batch_manifest.cmake (its arguments are described there): checked,
# then kept in SLUICE_BATCH_* variables of the caller's scope.
function(sluice_batch_function name)
  cmake_parse_arguments(F "PRELUDE;CLOCK;COMPOSITE" "INDEX;ARITY;LUA" "NUMERIC" ${ARGN})
  set(where "cmake/batch_manifest.cmake: batch function ${name}")
  list(LENGTH SLUICE_BATCH_FUNCTIONS position)
  list(LENGTH SLUICE_COMPOSITE_ALGORITHMS composite)
  if(F_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown arguments: ${F_UNPARSED_ARGUMENTS}")
  elseif(NOT "${F_INDEX}" STREQUAL "${position}")
    message(FATAL_ERROR "${where}: INDEX is '${F_INDEX}' but it is function ${position} of "
                        "the list (the indices are 0, 1, ... in the order listed)")
  elseif(position GREATER 9)
    message(FATAL_ERROR "${where}: src/algo/batch.lua reads a function's index as one digit")
  elseif(NOT "${F_ARITY}" MATCHES "^[1-9]$")
    message(FATAL_ERROR "${where}: ARITY is '${F_ARITY}', not one digit from 1 to 9")
  elseif(F_COMPOSITE AND NOT composite EQUAL position)
    message(FATAL_ERROR "${where}: the composite's algorithms come first, from index 0")
  endif()
  foreach(k ${F_NUMERIC})
    if(NOT k MATCHES "^[1-9]$" OR k GREATER F_ARITY)
      message(FATAL_ERROR "${where}: NUMERIC names argument '${k}' of ${F_ARITY}")
    endif()
  endforeach()
  string(JOIN "" numeric ${F_NUMERIC})
  set(SLUICE_BATCH_${name}_ARITY ${F_ARITY} PARENT_SCOPE)
  set(SLUICE_BATCH_${name}_NUMERIC "${numeric}" PARENT_SCOPE)
  set(SLUICE_BATCH_${name}_LUA "${F_LUA}" PARENT_SCOPE)
  foreach(flag PRELUDE CLOCK COMPOSITE)
    set(SLUICE_BATCH_${name}_${flag} ${F_${flag}} PARENT_SCOPE)
  endforeach()
  list(APPEND SLUICE_BATCH_FUNCTIONS ${name})
  set(SLUICE_BATCH_FUNCTIONS "${SLUICE_BATCH_FUNCTIONS}" PARENT_SCOPE)
  if(F_COMPOSITE)
    list(APPEND SLUICE_COMPOSITE_ALGORITHMS ${name})
    set(SLUICE_COMPOSITE_ALGORITHMS "${SLUICE_COMPOSITE_ALGORITHMS}" PARENT_SCOPE)
  endif()
endfunction()

# A script of src/algo/ sent alone (Connection::Eval), never in a batch nor the composite:
# embedded as k<Name>Lua, and in AllScripts() after the batch script, in the order
# declared (CMakeLists.txt), so the indices of the batch functions' scripts, the
# composite's and the batch's stay as they are. CLOCK: src/algo/clock.lua goes in front
# of it, as for a batch function.
function(sluice_lua_alone name)
  cmake_parse_arguments(F "CLOCK" "" "" ${ARGN})
  if(F_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "sluice_lua_alone(${name}): unknown arguments: ${F_UNPARSED_ARGUMENTS}")
  elseif(name IN_LIST SLUICE_BATCH_FUNCTIONS OR name IN_LIST SLUICE_ALONE_SCRIPTS)
    message(FATAL_ERROR "sluice_lua_alone(${name}): declared twice")
  endif()
  set(SLUICE_ALONE_${name}_CLOCK ${F_CLOCK} PARENT_SCOPE)
  list(APPEND SLUICE_ALONE_SCRIPTS ${name})
  set(SLUICE_ALONE_SCRIPTS "${SLUICE_ALONE_SCRIPTS}" PARENT_SCOPE)
endfunction()

# A file's text, and the configuration made again when it changes.
function(sluice_lua_read path text_var)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
  file(READ ${path} text)
  set(${text_var} "${text}" PARENT_SCOPE)
endfunction()

# How many newlines `text` holds.
function(sluice_lua_count_lines text count_var)
  string(REPLACE "\n" "" stripped "${text}")
  string(LENGTH "${text}" with)
  string(LENGTH "${stripped}" without)
  math(EXPR count "${with} - ${without}")
  set(${count_var} ${count} PARENT_SCOPE)
endfunction()

# A script file may have a line `--[[ per call ]]`: what is above it (helper functions,
# constants) reads no argument and no per-call local, so where a script is wrapped as a
# function of the composite or the batch (below) it is made once per script call, outside
# the function, instead of once per decision (in Lua 5.1 a `local function` statement makes
# a new closure each time it runs: ~8% of a bucket decision's instructions in Redis, in
# closures and their garbage). A script alone is helpers, then per-call part, as written.
function(sluice_lua_split body helpers_var call_var)
  string(FIND "${body}" "\n--[[ per call ]]\n" at)
  if(at EQUAL -1)
    set(${helpers_var} "" PARENT_SCOPE)
    set(${call_var} "${body}" PARENT_SCOPE)
  else()
    math(EXPR at "${at} + 1")
    string(SUBSTRING "${body}" 0 ${at} helpers)
    string(SUBSTRING "${body}" ${at} -1 call)
    set(${helpers_var} "${helpers}" PARENT_SCOPE)
    set(${call_var} "${call}" PARENT_SCOPE)
  endif()
endfunction()

# fixed_window -> FixedWindow (the C++ names of a script: kFixedWindowLua, kFixedWindow).
function(sluice_lua_camel name camel_var)
  string(REPLACE "_" ";" parts ${name})
  set(camel "")
  foreach(part ${parts})
    string(SUBSTRING ${part} 0 1 first)
    string(TOUPPER ${first} first)
    string(SUBSTRING ${part} 1 -1 rest)
    string(APPEND camel "${first}${rest}")
  endforeach()
  set(${camel_var} "${camel}" PARENT_SCOPE)
endfunction()

# The file and line of line `line` (from 0) of a text made of `segments`: triples of a
# file, the line of that file its part starts at, and how many lines the part has.
function(sluice_lua_where line segments where_var)
  while(segments)
    list(POP_FRONT segments path first count)
    if(line LESS count)
      math(EXPR at "${first} + ${line}")
      set(${where_var} "${path}:${at}" PARENT_SCOPE)
      return()
    endif()
    math(EXPR line "${line} - ${count}")
  endwhile()
  set(${where_var} "?" PARENT_SCOPE)
endfunction()

# Fails the configuration when the batch form of function `name` (`text`, made of
# `segments` as for sluice_lua_where) still returns a table literal of 4 plain items
# (no `=`, no braces inside): a decision the rewrite of sluice_lua_batch_returns missed
# (a `return {` not alone on its line, or spread over lines). The batch script would
# still decide it right, but pay a table per decision, which the rewrite is there to save.
function(sluice_lua_check_batch_returns name text segments)
  set(rest "${text}")
  set(line 0)  # the lines of `text` before `rest`
  while(TRUE)
    string(REGEX MATCH "return[ \t]*{[^{}]*}" literal "${rest}")
    if("${literal}" STREQUAL "")
      break()
    endif()
    string(FIND "${rest}" "${literal}" at)
    string(SUBSTRING "${rest}" 0 ${at} before)
    string(LENGTH "${literal}" length)
    math(EXPR after "${at} + ${length}")
    string(SUBSTRING "${rest}" ${after} -1 rest)
    sluice_lua_count_lines("${before}" lines)
    math(EXPR line "${line} + ${lines}")
    # The literal's items at its top level: strings and bracketed calls taken out.
    string(FIND "${before}" "\n" start REVERSE)
    math(EXPR start "${start} + 1")
    string(SUBSTRING "${before}" ${start} -1 head)  # its line up to the `return`
    string(FIND "${literal}" "{" open)
    math(EXPR open "${open} + 1")
    math(EXPR length "${length} - ${open} - 1")
    string(SUBSTRING "${literal}" ${open} ${length} items)
    string(REGEX REPLACE "'[^']*'|\"[^\"]*\"" "" items "${items}")
    set(was "")
    while(NOT "${was}" STREQUAL "${items}")
      set(was "${items}")
      string(REGEX REPLACE "\\([^()]*\\)" "" items "${items}")
    endwhile()
    string(REGEX MATCHALL "," commas "${items}")
    list(LENGTH commas commas)
    if(commas EQUAL 3 AND NOT head MATCHES "--" AND NOT items MATCHES "=")
      sluice_lua_where(${line} "${segments}" where)
      message(FATAL_ERROR "${where}: in the batch script, function ${name} still returns a "
        "table of 4 items (${literal}): the build makes a decision's `return {a, b, c, d}` "
        "return values only where it stands alone on one line (cmake/SluiceLua.cmake, "
        "sluice_lua_batch_returns); write it so")
    endif()
    sluice_lua_count_lines("${literal}" lines)
    math(EXPR line "${line} + ${lines}")
  endwhile()
endfunction()

# In the batch, a reply written as a table literal on its own line, `return {a, b, c,
# d}` (every decision), returns its items as values instead: no table per decision
# (~2k instructions of Redis's with its garbage, 8% of a batched fixed_window decision),
# and src/algo/batch.lua writes them into its flat reply as they come. Literals with
# `=` or braces inside (error tables) are left as they are.
function(sluice_lua_batch_returns call batch_call_var)
  foreach(pass 1 2)  # a second pass for a return right after another (one newline each)
    string(REGEX REPLACE "\n([ ]*)return {([^{}=\n]*)}([^\n]*)\n" "\n\\1return \\2\\3\n" call "${call}")
  endforeach()
  set(${batch_call_var} "${call}" PARENT_SCOPE)
endfunction()

# Script `script` (algo/<name> or admin/<name>): sets, in the caller's scope, lua_<name>
# (the script alone) and, for a batch function, lua_function_<name> and
# lua_batch_function_<name> (it wrapped for the composite and for the batch). Reads the
# caller's clock_helper, prelude_helpers and prelude_call (sluice_lua_generate).
function(sluice_lua_script script)
  set(path src/${script}.lua)
  get_filename_component(name ${script} NAME)
  sluice_lua_read(${CMAKE_SOURCE_DIR}/${path} body)
  sluice_lua_split("${body}" helpers call)
  sluice_lua_count_lines("${helpers}" first)
  sluice_lua_count_lines("${call}" count)
  math(EXPR first "${first} + 1")
  set(segments ${path} ${first} ${count})
  if(SLUICE_BATCH_${name}_PRELUDE)
    set(helpers "${prelude_helpers}${helpers}")
    set(call "${prelude_call}${call}")
    set(segments ${prelude_segment} ${segments})
  endif()
  if(SLUICE_BATCH_${name}_CLOCK OR SLUICE_ALONE_${name}_CLOCK)
    set(helpers "${clock_helper}${helpers}")
  endif()
  # The rate algorithms (the composite's) run under a block (src/algo/block.lua) when a
  # call names one or resets: the per-call part a second time, as the function the gate
  # runs, so a call without a block runs it inline, as before, for two compares more.
  # Alone, the gate's helpers are made inside that branch only (each closure made costs
  # Redis at every script call: ~10% of a fixed_window decision for the four of them).
  set(gate "")
  set(function_gate "")
  set(function_test "")
  if(SLUICE_BATCH_${name}_COMPOSITE)
    set(gate "if (ARGV[8] and ARGV[8] ~= '0') or ARGV[1] == '3' then\n${block_helper}return block_gate(KEYS, ARGV, function(KEYS, ARGV)\n${call}\nend)\nend\n")
    set(function_gate "local decide = function(KEYS, ARGV)\n${call}\nend\n")
    set(function_test "if (ARGV[8] and ARGV[8] ~= '0') or ARGV[1] == '3' then\nreturn block_gate(KEYS, ARGV, decide)\nend\n")
    set(lua_${name} "${helpers}${gate}${call}" PARENT_SCOPE)
  else()
    set(lua_${name} "${helpers}${call}" PARENT_SCOPE)
  endif()
  if(NOT name IN_LIST SLUICE_BATCH_FUNCTIONS)
    return()
  endif()
  # Wrapped for the composite and the batch as a maker, `make_<name>()`, that makes the
  # helpers and returns the per-call function: a script call makes only the functions
  # its calls use, each once (each closure, its upvalues and their garbage cost Redis at
  # every script call: all seven made eagerly were ~60k instructions, two decisions'
  # worth, paid by every batch).
  set(lua_function_${name} "local function make_${name}()\n${helpers}${function_gate}return function(KEYS, ARGV)\n${function_test}${call}\nend\nend\n" PARENT_SCOPE)
  sluice_lua_batch_returns("${call}" batch_call)
  sluice_lua_check_batch_returns(${name} "${batch_call}" "${segments}")
  set(batch_gate "")
  if(SLUICE_BATCH_${name}_COMPOSITE)
    set(batch_gate "local decide = function(KEYS, ARGV)\n${batch_call}\nend\n")
  endif()
  set(lua_batch_function_${name} "local function make_${name}()\n${helpers}${batch_gate}return function(KEYS, ARGV)\n${function_test}${batch_call}\nend\nend\n" PARENT_SCOPE)
endfunction()

# The batch script (docs/design.md §7: calls queued on one connection decided in one
# script call): every function of cmake/batch_manifest.cmake, a script's wrapped as
# above, the tables of those functions, of their argument counts and of their numeric
# arguments (in index order), then the driver, src/algo/batch.lua.
function(sluice_lua_batch batch_var)
  set(batch "-- Generated by cmake/SluiceLua.cmake from src/algo/*.lua: the block gate, the scripts as\n-- functions, then src/algo/batch.lua. Do not edit.\n${block_helper}")
  # What the driver knows of each function, by the function's index as sent plus 1
  # (src/algo/batch.lua reads an ARGV item by its bytes): an array of makers, and digits
  # in constant strings, because Redis builds every table of a script again at every
  # script call (~1.8k instructions each).
  set(makers "")
  set(arity "")
  set(numeric "")
  set(numeric_table "")
  foreach(name ${SLUICE_BATCH_FUNCTIONS})
    if(SLUICE_BATCH_${name}_LUA STREQUAL "")
      string(APPEND batch "${lua_batch_function_${name}}")
      string(APPEND makers " make_${name},")
    else()
      string(APPEND batch "local function ${name}(KEYS, ARGV)\n  ${SLUICE_BATCH_${name}_LUA}\nend\n")
      string(APPEND makers " function() return ${name} end,")
    endif()
    string(APPEND arity "${SLUICE_BATCH_${name}_ARITY}")
    # A function with no numeric argument: '' (an empty one), none after the last.
    string(APPEND numeric "'${SLUICE_BATCH_${name}_NUMERIC}', ")
    if(NOT SLUICE_BATCH_${name}_NUMERIC STREQUAL "")
      set(numeric_table "${numeric}")
    endif()
  endforeach()
  string(REGEX REPLACE ",$" " " makers "${makers}")
  string(REGEX REPLACE ", $" "" numeric_table "${numeric_table}")
  string(APPEND batch "local MAKERS = {${makers}}\n")
  string(APPEND batch "local ARITY = '${arity}'\n")
  string(APPEND batch "local NUMERIC = {${numeric_table}}\n")
  sluice_lua_read(${CMAKE_SOURCE_DIR}/src/algo/batch.lua body)
  set(${batch_var} "${batch}${body}" PARENT_SCOPE)
endfunction()

# generated/batch_manifest.h: the batch functions' indices, arities and names for the
# C++ side (redis/scripts.h, redis/batch_codec.h), from the same manifest.
function(sluice_lua_manifest_header path)
  set(header "// Generated from cmake/batch_manifest.cmake by cmake/SluiceLua.cmake. Do not edit.\n")
  string(APPEND header "// The functions of the batch script (src/algo/batch.lua): a call names one by its index.\n")
  string(APPEND header "#pragma once\n\nnamespace sluice::internal::batch_manifest {\n\n")
  set(arities "")
  set(names "")
  set(max 0)
  set(index 0)
  foreach(name ${SLUICE_BATCH_FUNCTIONS})
    sluice_lua_camel(${name} camel)
    string(APPEND header "inline constexpr int k${camel} = ${index};\n")
    string(APPEND arities "${SLUICE_BATCH_${name}_ARITY}, ")
    string(APPEND names "\"${name}\", ")
    if(SLUICE_BATCH_${name}_ARITY GREATER max)
      set(max ${SLUICE_BATCH_${name}_ARITY})
    endif()
    math(EXPR index "${index} + 1")
  endforeach()
  string(REGEX REPLACE ", $" "" arities "${arities}")
  string(REGEX REPLACE ", $" "" names "${names}")
  list(LENGTH SLUICE_COMPOSITE_ALGORITHMS algorithms)
  string(APPEND header "// How many functions there are (the indices are 0 to kFunctionCount - 1).\n")
  string(APPEND header "inline constexpr int kFunctionCount = ${index};\n")
  string(APPEND header "// The functions from index 0 that are also the composite's algorithms.\n")
  string(APPEND header "inline constexpr int kAlgorithmCount = ${algorithms};\n")
  string(APPEND header "// How many arguments each function takes, by index, and the most any takes.\n")
  string(APPEND header "inline constexpr int kArity[kFunctionCount] = {${arities}};\n")
  string(APPEND header "inline constexpr int kMaxArity = ${max};\n")
  string(APPEND header "// Each function's name, by index.\n")
  string(APPEND header "inline constexpr const char* kName[kFunctionCount] = {${names}};\n")
  string(APPEND header "\n}  // namespace sluice::internal::batch_manifest\n")
  file(CONFIGURE OUTPUT ${path} CONTENT "${header}" @ONLY)
endfunction()

# The composite script (docs/design.md §6: several limits in one script): each algorithm's
# file wrapped as above (every algorithm script reads only KEYS[1] and ARGV[n] and ends in
# `return`, so its per-call part is a valid function body), the table of those functions
# in Algorithm enum order, then the driver, src/algo/composite.lua. No algorithm's code is
# copied into another file.
function(sluice_lua_composite composite_var)
  set(composite "-- Generated by cmake/SluiceLua.cmake from src/algo/*.lua: the block gate, the algorithms as\n-- functions, then src/algo/composite.lua. Do not edit.\n${block_helper}")
  set(table "")
  foreach(algorithm ${SLUICE_COMPOSITE_ALGORITHMS})
    string(APPEND composite "${lua_function_${algorithm}}")
    string(APPEND table " make_${algorithm},")
  endforeach()
  sluice_lua_read(${CMAKE_SOURCE_DIR}/src/algo/composite.lua body)
  set(${composite_var} "${composite}local ALGORITHMS = {${table} }\n${body}" PARENT_SCOPE)
endfunction()

# Writes <dir>/lua_scripts.cc (every batch function's script alone, in index order, then
# the `extra` scripts, the composite, the batch script and the scripts sent alone
# (sluice_lua_alone), each a string_view named k<Name>Lua) and <dir>/batch_manifest.h.
function(sluice_lua_generate dir)
  set(extra ${ARGN})
  # How a script reads "now": src/algo/clock.lua, in front of the helpers of the scripts
  # marked CLOCK. token_bucket and gcra (PRELUDE) share their argument reading and wide
  # arithmetic: src/algo/bucket_prelude.lua, in front of each (bench/lib.sh's lua_script
  # reads the scripts as assembled here from the generated source).
  sluice_lua_read(${CMAKE_SOURCE_DIR}/src/algo/clock.lua clock_helper)
  # The block gate (src/algo/block.lua): in each rate algorithm's script alone (in the
  # branch that runs it), and once at the top of the composite and the batch.
  sluice_lua_read(${CMAKE_SOURCE_DIR}/src/algo/block.lua block_helper)
  sluice_lua_read(${CMAKE_SOURCE_DIR}/src/algo/bucket_prelude.lua prelude)
  sluice_lua_split("${prelude}" prelude_helpers prelude_call)
  sluice_lua_count_lines("${prelude_helpers}" first)
  sluice_lua_count_lines("${prelude_call}" count)
  math(EXPR first "${first} + 1")
  set(prelude_segment src/algo/bucket_prelude.lua ${first} ${count})
  set(scripts "")
  foreach(name ${SLUICE_BATCH_FUNCTIONS})
    if(SLUICE_BATCH_${name}_LUA STREQUAL "")
      list(APPEND scripts algo/${name})
    endif()
  endforeach()
  set(generated "// Generated from src/algo/*.lua and src/admin/*.lua by cmake/SluiceLua.cmake. Do not edit.\n#include <string_view>\n#include \"redis/scripts.h\"\nnamespace sluice::internal {\n")
  # AllScripts(): the manifest's functions that have a script file, in its order, then
  # the composite and the batch (the index Connection::Eval takes, redis/scripts.h).
  set(all_scripts "")
  foreach(script ${scripts} ${extra})
    sluice_lua_script(${script})
    get_filename_component(name ${script} NAME)
    sluice_lua_camel(${name} camel)
    string(APPEND generated "extern const std::string_view k${camel}Lua;\nconst std::string_view k${camel}Lua = R\"sluice_lua(${lua_${name}})sluice_lua\";\n")
    if(script MATCHES "^algo/")
      string(APPEND all_scripts "      {\"${name}\", k${camel}Lua},\n")
    endif()
  endforeach()
  sluice_lua_composite(composite)
  string(APPEND generated "extern const std::string_view kCompositeLua;\nconst std::string_view kCompositeLua = R\"sluice_lua(${composite})sluice_lua\";\n")
  sluice_lua_batch(batch)
  string(APPEND generated "extern const std::string_view kBatchLua;\nconst std::string_view kBatchLua = R\"sluice_lua(${batch})sluice_lua\";\n")
  set(alone_scripts "")
  foreach(name ${SLUICE_ALONE_SCRIPTS})
    sluice_lua_script(algo/${name})
    sluice_lua_camel(${name} camel)
    string(APPEND generated "extern const std::string_view k${camel}Lua;\nconst std::string_view k${camel}Lua = R\"sluice_lua(${lua_${name}})sluice_lua\";\n")
    string(APPEND alone_scripts "      {\"${name}\", k${camel}Lua},\n")
  endforeach()
  string(APPEND generated "std::vector<Script> AllScripts() {\n  return {\n${all_scripts}      {\"composite\", kCompositeLua},\n      {\"batch\", kBatchLua},\n${alone_scripts}  };\n}\n")
  string(APPEND generated "}  // namespace sluice::internal\n")
  file(CONFIGURE OUTPUT ${dir}/lua_scripts.cc CONTENT "${generated}" @ONLY)
  sluice_lua_manifest_header(${dir}/batch_manifest.h)
endfunction()
