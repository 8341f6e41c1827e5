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

# lua_script <algorithm>: the script text as the build embeds it (token_bucket and gcra
# get src/algo/bucket_prelude.lua in front, see CMakeLists.txt).
lua_script() {
  case $1 in
    token_bucket|gcra) cat src/algo/bucket_prelude.lua "src/algo/$1.lua" ;;
    *) cat "src/algo/$1.lua" ;;
  esac
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
