# Sourced by deb_test.sh: the installed sluiced run as its unit runs it (no systemd
# needed): the unit's User=, ExecStart= (its $VARIABLES expanded as systemd does) and
# TimeoutStopSec=, /etc/default/sluiced's variables; only the Redis URL, the listeners
# (loopback, ports chosen by the kernel) and an admin token are set by the test.

# unit_value KEY: the value of KEY= in the installed unit (the last one, as systemd).
unit_value() { sed -n "s/^$1=//p" "$UNIT" | tail -1; }

# The environment the unit gives sluiced: /etc/default/sluiced (systemd's
# EnvironmentFile= reads KEY=VALUE lines, quotes removed, as the shell does here).
unit_environment() {
  local names
  names=$(sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/\1/p' /etc/default/sluiced)
  (
    set -a
    . /etc/default/sluiced
    for n in $names; do printf '%s=%s\n' "$n" "${!n}"; done
  )
}

# ExecStart= with $VAR split into words and ${VAR} kept one word, as systemd expands it.
exec_start_words() {
  local - word name words
  set -f  # words, not globs
  read -ra words <<<"$(unit_value ExecStart)"
  for word in "${words[@]}"; do
    if [[ $word =~ ^\$([A-Za-z_][A-Za-z0-9_]*)$ ]]; then
      name=${BASH_REMATCH[1]}
      for w in ${!name:-}; do printf '%s\n' "$w"; done
    elif [[ $word =~ ^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$ ]]; then
      name=${BASH_REMATCH[1]}
      printf '%s\n' "${!name:-}"
    else
      printf '%s\n' "$word"
    fi
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_redis() {
  local port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --logfile "$work/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && { REDIS_URL="redis://127.0.0.1:$port"; return; }
    sleep 0.05
  done
  fail "redis-server did not start"
}

# A domain of the test's: 1 check per minute per client, 1 lease per account.
write_limits() {
  cat >"/etc/sluiced/.pkgtest.tmp" <<EOF
domain: pkgtest
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: $1}
  - key: streams
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: 30s
        rate_limit: {name: streams, requests_per_unit: 1}
EOF
  mv /etc/sluiced/.pkgtest.tmp /etc/sluiced/pkgtest.yaml  # whole, for the file watcher
}

# The unit's ExecReload=, its words split and unquoted as systemd does (quoted words stay
# one; $MAINPID inside quotes is left to the command, whose environment has it). Its
# program must be on every system the package installs on: from an Essential package or
# one sluiced depends on (/bin/kill is procps's, absent from minimal systems).
run_exec_reload() {
  local -a words
  local MAINPID=$SLUICED_PID  # systemd expands an unquoted $MAINPID itself
  eval "words=($(unit_value ExecReload))"
  local program=${words[0]} owner
  [[ $program == /* ]] || fail "ExecReload= does not start with an absolute path: ${words[*]}"
  # The package that ships the path (not a diversion's line: "diversion by dash from: …").
  owner=$(dpkg-query -S "$program" 2>/dev/null | grep -v '^diversion ' | cut -d: -f1 | head -1 || true)
  [ -n "$owner" ] || fail "no package ships ExecReload='s $program"
  if [ "$(dpkg-query -W -f='${Essential}' "$owner")" != yes ] &&
    ! dpkg-query -W -f='${Depends}' sluiced | grep -qw "$owner"; then
    fail "ExecReload='s $program comes from $owner, neither Essential nor a dependency of sluiced"
  fi
  env -i MAINPID="$SLUICED_PID" "${words[@]}" || fail "ExecReload= failed: ${words[*]}"
}

# Starts sluiced as the unit does; sets SLUICED_PID, HTTP and ADMIN.
start_sluiced() {
  local env_lines user line
  mapfile -t env_lines < <(unit_environment)
  env_lines+=("SLUICED_REDIS=$REDIS_URL" "SLUICED_ADMIN_TOKEN=pkgtest-token")
  for l in HTTP GRPC ADMIN METRICS; do env_lines+=("SLUICED_${l}_LISTEN=127.0.0.1:0"); done
  mapfile -t argv < <(
    for e in "${env_lines[@]}"; do export "${e?}"; done
    exec_start_words
  )
  echo "ExecStart: ${argv[*]}"
  user=$(unit_value User)
  [ "$user" = sluiced ] || fail "the unit's User= is '$user'"
  # User=, NoNewPrivileges=yes, CapabilityBoundingSet= and AmbientCapabilities= as the
  # unit sets them; WorkingDirectory= too.
  (cd "$(unit_value WorkingDirectory)" &&
    exec env -i PATH=/usr/bin:/bin "${env_lines[@]}" setpriv --reuid="$user" --regid="$user" \
      --init-groups --no-new-privs --bounding-set=-all --inh-caps=-all -- "${argv[@]}") \
    >"$work/sluiced.log" 2>&1 &
  SLUICED_PID=$!
  for _ in $(seq 200); do
    grep -q "serving http=" "$work/sluiced.log" && break
    kill -0 "$SLUICED_PID" 2>/dev/null || { cat "$work/sluiced.log"; fail "sluiced exited"; }
    sleep 0.05
  done
  line=$(grep "serving http=" "$work/sluiced.log") || { cat "$work/sluiced.log"; fail "sluiced did not serve"; }
  HTTP=$(sed -E 's/.*http=([^ ]+).*/\1/' <<<"$line")
  ADMIN=$(sed -E 's/.*admin=([^ ]+).*/\1/' <<<"$line")
  [ "$(ps -o user= -p "$SLUICED_PID")" = sluiced ] || fail "sluiced does not run as sluiced"
  grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$SLUICED_PID/status" || fail "sluiced may gain privileges"
  grep -q '^CapBnd:[[:space:]]*0*$' "/proc/$SLUICED_PID/status" || fail "sluiced has capabilities"
}

check_code() {
  curl -s -o /dev/null -w '%{http_code}' -XPOST "$HTTP/v1/check" \
    -d "{\"domain\":\"pkgtest\",\"descriptors\":[{\"entries\":[{\"key\":\"client\",\"value\":\"$1\"}]}]}"
}

# N checks of client $1: the status codes, space-separated.
checks() {
  local out=""
  for _ in $(seq "$2"); do out+="$(check_code "$1") "; done
  echo "${out% }"
}

# An admin release of account a's leases: written to the audit log under /var/lib/sluiced.
release_leases() {
  local lease code body
  lease=$(curl -s -w ' %{http_code}' -XPOST "$HTTP/v1/leases" \
    -d '{"domain":"pkgtest","entries":[{"key":"streams"},{"key":"account","value":"a"}]}')
  [ "${lease##* }" = 201 ] || fail "lease acquire: $lease"
  body='{"domain":"pkgtest","entries":[{"key":"streams"},{"key":"account","value":"a"}],"actor":"pkgtest","reason":"package test"}'
  code=$(curl -s -o "$work/release.json" -w '%{http_code}' -H 'Authorization: Bearer pkgtest-token' \
    -XPOST "$ADMIN/admin/leases/release" -d "$body")
  [ "$code" = 200 ] || fail "admin release: $code $(cat "$work/release.json")"
  local audit
  audit=$(sed -n 's/^SLUICED_AUDIT_LOG=//p' /etc/default/sluiced)
  [[ $audit == /var/lib/sluiced/* ]] || fail "the audit log is not under /var/lib/sluiced: $audit"
  [ -f "$audit" ] || fail "no audit log at $audit"
  [ "$(stat -c '%U %a' "$audit")" = "sluiced 640" ] || fail "$audit: $(stat -c '%U %a' "$audit")"
  grep -q '"outcome":"done"' "$audit" || fail "$audit records no done release: $(cat "$audit")"
}

# SIGTERM: sluiced drains and exits 0 within the unit's TimeoutStopSec.
stop_sluiced() {
  local timeout start status
  timeout=$(unit_value TimeoutStopSec)
  timeout=${timeout%s}
  start=$(date +%s%N)
  kill -TERM "$SLUICED_PID"
  for _ in $(seq $((timeout * 20))); do
    kill -0 "$SLUICED_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$SLUICED_PID" 2>/dev/null && fail "sluiced still runs ${timeout}s after SIGTERM"
  status=0
  wait "$SLUICED_PID" || status=$?
  SLUICED_PID=""
  [ "$status" -eq 0 ] || { cat "$work/sluiced.log"; fail "sluiced exited $status on SIGTERM"; }
  echo "stopped by SIGTERM in $((($(date +%s%N) - start) / 1000000)) ms (TimeoutStopSec=${timeout}s)"
}

run_service() {
  step "sluiced as its unit runs it"
  start_redis
  write_limits 1
  start_sluiced
  local got
  got=$(checks a 2)
  [ "$got" = "200 429" ] || fail "limit 1/min for client a: $got"
  # A changed limit takes effect on `systemctl reload`: the unit's ExecReload, run as
  # systemd runs it (no PATH, MAINPID in its environment).
  write_limits 3
  run_exec_reload
  for _ in $(seq 100); do
    grep -q 'config reloaded (SIGHUP)' "$work/sluiced.log" && break
    sleep 0.05
  done
  grep -q 'config reloaded (SIGHUP)' "$work/sluiced.log" || { cat "$work/sluiced.log"; fail "no reload on SIGHUP"; }
  got=$(checks b 4)
  [ "$got" = "200 200 200 429" ] || fail "limit 3/min for client b after SIGHUP: $got"
  release_leases
  stop_sluiced
  rm -f /etc/sluiced/pkgtest.yaml
  kill "$REDIS_PID" && wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=""
}

# The command docs/operating.md ("Running it without systemd") gives, run as written: the
# first ```sh block after the line that names this file. Only /etc/default/sluiced is the
# test's (its Redis, loopback listeners on ports the kernel picks, an admin token). The
# sluice CLI, with no --redis and neither variable set, finds the same Redis through that
# file (it is root who runs it here).
run_documented_command() {
  step "sluiced started by the command of docs/operating.md"
  local block line pid_user
  block=$(awk '/tests\/package\/deb_service.sh runs it/ {found = 1; next}
               found && /^```sh$/ {inside = 1; next}
               inside && /^```$/ {exit}
               inside {print}' "$src/docs/operating.md")
  [ -n "$block" ] || fail "docs/operating.md has no command block for running without systemd"
  grep -qF -- "$(unit_value ExecStart)" <<<"$block" ||
    fail "the documented command does not run the unit's ExecStart ($(unit_value ExecStart))"
  start_redis
  write_limits 1
  cp /etc/default/sluiced "$work/default.orig"
  sed -i -e "s|^SLUICED_REDIS=.*|SLUICED_REDIS=$REDIS_URL|" \
    -e 's|^SLUICED_\(HTTP\|GRPC\|ADMIN\|METRICS\)_LISTEN=.*|SLUICED_\1_LISTEN=127.0.0.1:0|' \
    /etc/default/sluiced
  echo 'SLUICED_ADMIN_TOKEN=pkgtest-token' >>/etc/default/sluiced
  # The block is one `sh -c '…'` that execs setpriv, which execs sluiced: $! is sluiced.
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c "$block" >"$work/documented.log" 2>&1 &
  SLUICED_PID=$!
  for _ in $(seq 200); do
    grep -q "serving http=" "$work/documented.log" && break
    kill -0 "$SLUICED_PID" 2>/dev/null || { cat "$work/documented.log"; fail "sluiced exited"; }
    sleep 0.05
  done
  line=$(grep "serving http=" "$work/documented.log") ||
    { cat "$work/documented.log"; fail "sluiced did not serve"; }
  HTTP=$(sed -E 's/.*http=([^ ]+).*/\1/' <<<"$line")
  [ "$(readlink "/proc/$SLUICED_PID/exe")" = /usr/bin/sluiced ] ||
    fail "pid $SLUICED_PID is $(readlink "/proc/$SLUICED_PID/exe"), not /usr/bin/sluiced"
  pid_user=$(ps -o user= -p "$SLUICED_PID")
  [ "$pid_user" = sluiced ] || fail "sluiced runs as $pid_user"
  grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$SLUICED_PID/status" || fail "sluiced may gain privileges"
  grep -q '^CapBnd:[[:space:]]*0*$' "/proc/$SLUICED_PID/status" || fail "sluiced has capabilities"
  [ "$(readlink "/proc/$SLUICED_PID/cwd")" = /var/lib/sluiced ] || fail "not in /var/lib/sluiced"
  local got
  got=$(checks c 2)
  [ "$got" = "200 429" ] || fail "limit 1/min for client c: $got"
  # The CLI's Redis when neither SLUICE_REDIS_URL nor SLUICED_REDIS is set: the file's.
  local audit
  audit=$(env -u SLUICE_REDIS_URL -u SLUICED_REDIS sluice audit --json) ||
    [ $? -eq 1 ] || fail "sluice audit without --redis: $audit"
  local keys
  keys=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["sluice_keys"])' <<<"$audit") ||
    fail "sluice audit without --redis: $audit"
  [ "$keys" -ge 1 ] || fail "sluice audit without --redis did not reach the test's Redis: $audit"
  echo "sluice audit without --redis or variables: $keys key(s) in the Redis of /etc/default/sluiced"
  stop_sluiced
  cp "$work/default.orig" /etc/default/sluiced
  rm -f /etc/sluiced/pkgtest.yaml
  kill "$REDIS_PID" && wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=""
}
