# Shared by the bench scripts (source it): a private redis-server on a free loopback
# port, stopped by its pid when the calling script exits.
#   start_private_redis   sets $port, $redis_pid and $redis_dir
start_private_redis() {
  port=""
  for _ in $(seq 1 50); do
    local p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then port=$p; break; fi
  done
  [ -n "$port" ] || { echo "no free loopback port found" >&2; exit 2; }
  redis_dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$redis_dir" \
    --logfile "$redis_dir/redis.log" --daemonize no &
  redis_pid=$!
  trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$redis_dir"' EXIT
  for _ in $(seq 1 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis-server did not start on port $port" >&2
  exit 2
}

# json <text> <field>: a number field of a one-line JSON object.
json() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"; }

# usec_per_call: evalsha's usec_per_call since the last CONFIG RESETSTAT.
usec_per_call() {
  redis-cli -p "$port" INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'
}

# embedded_script <name>: a script's text exactly as the build embeds it (kFixedWindowLua,
# kBatchLua, …: CMakeLists.txt assembles them from src/algo/*.lua, preludes and helpers
# included), read from the release build's generated source; GENERATED= names another
# build's. Fails, saying so, when there is none.
embedded_script() {
  local generated=${GENERATED:-build/release/generated/lua_scripts.cc}
  [ -f "$generated" ] || { echo "build first: make build ($generated not found)" >&2; return 2; }
  python3 - "$generated" "$1" <<'PY'
import sys
s = open(sys.argv[1]).read()
tag = 'const std::string_view %s = R"sluice_lua(' % sys.argv[2]
a = s.index(tag) + len(tag)
sys.stdout.write(s[a:s.index(')sluice_lua"', a)])
PY
}

# lua_script <algorithm>: that algorithm's script as the build embeds it.
lua_script() { embedded_script "k$(echo "$1" | sed -E 's/(^|_)([a-z])/\U\2/g')Lua"; }

# suffix <algorithm>: the key suffix the bench scripts give that algorithm's ids.
suffix() {
  case $1 in fixed_window) echo fw;; sliding_window) echo sw;; sliding_log) echo sl;;
             token_bucket) echo tb;; gcra) echo gcra;; esac
}

# find_sluice: $SLUICE when set, else the release build's binary, else the default
# build's; exits when none is built.
find_sluice() {
  if [ -z "${SLUICE:-}" ]; then
    SLUICE=./build/release/bin/sluice
    [ -x "$SLUICE" ] || SLUICE=./build/bin/sluice
  fi
  [ -x "$SLUICE" ] || { echo "build first: make build" >&2; exit 2; }
}
