#!/usr/bin/env bash
# The container image (make image; packaging/container/Containerfile), checked from what the
# image itself says: its entrypoint, command, environment, user and working directory are
# read from the image's config (podman image inspect), never from the Containerfile.
#   1. examples/compose.yaml is valid (docker-compose config) and names this image and its
#      healthcheck;
#   2. the image's root file system (podman image mount, read-only) runs sluiced in its own
#      mount and PID namespaces, chrooted, as the image's user with no capabilities, the
#      configuration and state directories mounted as a runtime would: checks admitted then
#      refused against a private redis-server, an admin release in the audit log (0640, the
#      unit's umask), the image's healthcheck passing and, once sluiced is stopped by SIGTERM
#      (exit 0), failing;
#   3. the same under `podman run`, with examples/compose.yaml's hardening (read-only root,
#      no capabilities, no new privileges): checks, `podman healthcheck run`, `podman stop`.
# Only the Redis URL, the listeners (loopback, free ports: both runs share the host's
# network) and an admin token are set by the test. Root only; skipped (77) without podman
# or without the image.
#
# Usage: tests/image/image_test.sh SOURCE_DIR VERSION
set -euo pipefail

src=${1:?usage: image_test.sh SOURCE_DIR VERSION}
version=${2:?usage: image_test.sh SOURCE_DIR VERSION}
image=${IMAGE:-localhost/sluiced}:$version

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

[ "$(id -u)" -eq 0 ] || skip "needs root (podman's system store, chroot, namespaces)"
command -v podman >/dev/null || skip "podman is not installed (scripts/setup.sh --image)"
podman image exists "$image" || skip "no image $image: make image builds it"

work=$(mktemp -d /tmp/sluice-image-test.XXXXXX)
chmod 755 "$work"
REDIS_PID="" NS_PID="" CID="" MOUNTED=""
cleanup() {
  set +e
  if [ -n "$NS_PID" ]; then
    # The namespace's process 1 (sluiced) first: its end ends the namespace, and it would
    # outlive unshare (a parent-death signal does not survive its change of user).
    local pid1
    read -r pid1 <"/proc/$NS_PID/task/$NS_PID/children" 2>/dev/null
    [ -n "$pid1" ] && kill -KILL "$pid1" 2>/dev/null
    kill -KILL "$NS_PID" 2>/dev/null
    wait "$NS_PID" 2>/dev/null
  fi
  [ -n "$CID" ] && podman rm -f -v "$CID" >/dev/null 2>&1
  [ -n "$MOUNTED" ] && podman image unmount "$image" >/dev/null 2>&1
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE  # the EXIT trap's cleanup on these too

# ---- the image's config --------------------------------------------------------------
podman image inspect --format '{{json .Config}}' "$image" >"$work/config.json"
config() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print(json.dumps(v))' \
  "$work/config.json" "$1"; }
json_lines() { python3 -c 'import json,sys; [print(x) for x in (json.loads(sys.argv[1]) or [])]' "$1"; }
mapfile -t ENTRYPOINT < <(json_lines "$(config Entrypoint)")
mapfile -t CMD < <(json_lines "$(config Cmd)")
mapfile -t IMAGE_ENV < <(json_lines "$(config Env)")
USER_SPEC=$(config User | python3 -c 'import json,sys; print(json.load(sys.stdin) or "")')
WORKDIR=$(config WorkingDir | python3 -c 'import json,sys; print(json.load(sys.stdin) or "/")')
# podman keeps a docker-format image's HEALTHCHECK beside the OCI config, not in it.
podman image inspect --format '{{json .HealthCheck}}' "$image" >"$work/health.json"
mapfile -t HEALTH < <(python3 -c 'import json,sys; [print(x) for x in (json.load(open(sys.argv[1])) or {}).get("Test") or []]' "$work/health.json")
mapfile -t EXPOSED < <(config ExposedPorts | python3 -c 'import json,sys; [print(p) for p in (json.load(sys.stdin) or {})]')
echo "entrypoint: ${ENTRYPOINT[*]} | cmd: ${CMD[*]} | user: $USER_SPEC | workdir: $WORKDIR"
echo "healthcheck: ${HEALTH[*]} | exposed: ${EXPOSED[*]}"
[ ${#ENTRYPOINT[@]} -gt 0 ] || fail "the image has no entrypoint"
[ -n "$USER_SPEC" ] || fail "the image runs as root (no User)"
[ "${HEALTH[0]:-}" = CMD ] || fail "the image's healthcheck is not an exec form: ${HEALTH[*]:-none}"
image_env() { printf '%s\n' "${IMAGE_ENV[@]}" | sed -n "s/^$1=//p"; }
# Every listener the environment names is exposed.
for l in HTTP GRPC ADMIN METRICS; do
  port=$(image_env "SLUICED_${l}_LISTEN")
  port=${port##*:}
  [[ " ${EXPOSED[*]} " == *" $port/tcp "* ]] || fail "SLUICED_${l}_LISTEN's port $port is not exposed"
done

# ---- the compose file -------------------------------------------------------------------
step "examples/compose.yaml"
if command -v docker-compose >/dev/null; then
  docker-compose -f "$src/examples/compose.yaml" config >"$work/compose.yaml" ||
    fail "docker-compose rejects examples/compose.yaml"
  python3 - "$work/compose.yaml" "${image%:*}" "${HEALTH[@]:1}" <<'EOF' || fail "compose.yaml does not match the image"
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))["services"]["sluiced"]
repo, health = sys.argv[2], sys.argv[3:]
assert c["image"].rsplit(":", 1)[0] == repo, c["image"]
assert c["healthcheck"]["test"] == ["CMD"] + health, c["healthcheck"]["test"]
print("compose.yaml: valid; sluiced is", c["image"], "with the image's healthcheck")
EOF
else
  echo "docker-compose is not installed (scripts/setup.sh --image): compose.yaml not validated"
fi
# The hardening compose.yaml gives sluiced, as podman run's flags (its ulimits aside: see
# below), and its stop grace period in seconds.
mapfile -t HARDENING < <(python3 - "$src/examples/compose.yaml" <<'EOF'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))["services"]["sluiced"]
if c.get("read_only"):
    print("--read-only")
for key, flag in (("tmpfs", "--tmpfs"), ("cap_drop", "--cap-drop"), ("security_opt", "--security-opt")):
    for value in c.get(key, []):
        print(flag); print(value)
EOF
)
grace=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["services"]["sluiced"]["stop_grace_period"].rstrip("s"))' \
  "$src/examples/compose.yaml")
echo "compose.yaml's hardening: ${HARDENING[*]}; stop grace period ${grace} s"

# ---- what both runs share ----------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
redis-cli -p "$port" ping >/dev/null || fail "redis-server did not start"
REDIS_URL=redis://127.0.0.1:$port

# The domains a user mounts over /etc/sluiced: 2 checks per minute per client, 1 lease.
mkdir -p "$work/config"
cat >"$work/config/imagetest.yaml" <<'EOF'
domain: imagetest
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: streams
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: 30s
        rate_limit: {name: streams, requests_per_unit: 1}
EOF
chmod -R a+rX "$work/config"

# The test's settings: the image's environment but for these.
test_env() {
  echo "SLUICED_REDIS=$REDIS_URL"
  echo "SLUICED_ADMIN_TOKEN=imagetest-token"
  for l in HTTP GRPC ADMIN METRICS; do echo "SLUICED_${l}_LISTEN=127.0.0.1:$(free_port)"; done
}
# new_env: OVER, the test's settings (new ports), and RUN_ENV, the image's environment each
# overridden by them.
new_env() {
  local -A set=()
  local line
  mapfile -t OVER < <(test_env)
  for line in "${OVER[@]}"; do set[${line%%=*}]=1; done
  RUN_ENV=()
  for line in "${IMAGE_ENV[@]}"; do [ -n "${set[${line%%=*}]:-}" ] || RUN_ENV+=("$line"); done
  RUN_ENV+=("${OVER[@]}")
}
env_value() { printf '%s\n' "${RUN_ENV[@]}" | sed -n "s/^$1=//p"; }

checks() {  # N checks of client $1: the status codes
  local out=""
  for _ in $(seq "$2"); do
    out+="$(curl -s -o /dev/null -w '%{http_code}' -XPOST "$HTTP/v1/check" \
      -d "{\"domain\":\"imagetest\",\"descriptors\":[{\"entries\":[{\"key\":\"client\",\"value\":\"$1\"}]}]}") "
  done
  echo "${out% }"
}

# The process's user, privileges and capabilities, from /proc (its pid on this host).
check_process() {
  local pid=$1 uid
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  [ "$uid" = "$IMAGE_UID" ] || fail "sluiced runs as uid $uid, not the image's user ($IMAGE_UID)"
  grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$pid/status" || fail "sluiced may gain privileges"
  grep -q '^CapEff:[[:space:]]*0*$' "/proc/$pid/status" || fail "sluiced has capabilities"
  # The unit's UMask=0027, which the image's entrypoint sets.
  grep -q '^Umask:[[:space:]]*0027$' "/proc/$pid/status" ||
    fail "sluiced's $(grep '^Umask:' "/proc/$pid/status"), not the unit's 0027"
  grep -q '/usr/bin/sluiced' "/proc/$pid/cmdline" || fail "process $pid is not sluiced: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
  echo "sluiced: pid $pid, uid $uid, umask 0027, no capabilities, no new privileges; $(tr '\0' ' ' <"/proc/$pid/cmdline")"
}

# A lease released by the admin API: the release goes to the audit log in the state directory.
admin_release() {
  local lease code body
  lease=$(curl -s -w ' %{http_code}' -XPOST "$HTTP/v1/leases" \
    -d '{"domain":"imagetest","entries":[{"key":"streams"},{"key":"account","value":"a"}]}')
  [ "${lease##* }" = 201 ] || fail "lease acquire: $lease"
  body='{"domain":"imagetest","entries":[{"key":"streams"},{"key":"account","value":"a"}],"actor":"imagetest","reason":"image test"}'
  code=$(curl -s -o "$work/release.json" -w '%{http_code}' -H 'Authorization: Bearer imagetest-token' \
    -XPOST "$ADMIN/admin/leases/release" -d "$body")
  [ "$code" = 200 ] || fail "admin release: $code $(cat "$work/release.json")"
}

# ---- 2. the root file system, in namespaces ---------------------------------------------
step "the image's root file system: chroot, mount and PID namespaces, the image's user"
rootfs=$(podman image mount "$image")
MOUNTED=1
# The image's user, as its own /etc/passwd and /etc/group resolve it.
resolve() {  # FILE NAME-OR-ID: the numeric id
  if [[ $2 =~ ^[0-9]+$ ]]; then echo "$2"; else awk -F: -v n="$2" '$1 == n {print $3}' "$1"; fi
}
IMAGE_UID=$(resolve "$rootfs/etc/passwd" "${USER_SPEC%%:*}")
if [[ $USER_SPEC == *:* ]]; then
  IMAGE_GID=$(resolve "$rootfs/etc/group" "${USER_SPEC#*:}")
else
  IMAGE_GID=$(awk -F: -v u="$IMAGE_UID" '$3 == u {print $4}' "$rootfs/etc/passwd")
fi
if [ -z "$IMAGE_UID" ] || [ -z "$IMAGE_GID" ]; then
  fail "the image's user '$USER_SPEC' is not in its /etc/passwd"
fi
[ "$IMAGE_UID" -ne 0 ] || fail "the image's user is root"
# The state volume: a copy of the image's directory (owner and mode), as a runtime makes one.
state=$work/state
mkdir "$state"
chown --reference="$rootfs$WORKDIR" "$state"
chmod --reference="$rootfs$WORKDIR" "$state"

new_env
HTTP=http://$(env_value SLUICED_HTTP_LISTEN)
ADMIN=http://$(env_value SLUICED_ADMIN_LISTEN)
# Inside the namespaces: the runtime's mounts (private to them), then chroot and exec as the
# image's user, no capabilities, no new privileges, in the image's working directory, with
# only the image's environment (and the test's settings). sluiced is process 1 there.
cat >"$work/ns.sh" <<'EOF'
set -eu
rootfs=$1 work=$2 state=$3 workdir=$4 uid=$5 gid=$6
shift 6
mount -t proc proc "$rootfs/proc"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$rootfs/tmp"
mount -t tmpfs -o mode=755,nosuid tmpfs "$rootfs/dev"
for d in null zero random urandom; do
  touch "$rootfs/dev/$d"
  mount --bind "/dev/$d" "$rootfs/dev/$d"
done
mount --bind -o ro "$work/config" "$rootfs/etc/sluiced"
mount --bind "$state" "$rootfs$workdir"
exec chroot "$rootfs" /usr/bin/setpriv --reuid="$uid" --regid="$gid" --clear-groups \
  --no-new-privs --bounding-set=-all --inh-caps=-all -- /usr/bin/env -i -C "$workdir" "$@"
EOF
unshare --mount --propagation private --pid --fork -- /bin/sh "$work/ns.sh" "$rootfs" "$work" \
  "$state" "$WORKDIR" "$IMAGE_UID" "$IMAGE_GID" "${RUN_ENV[@]}" "${ENTRYPOINT[@]}" "${CMD[@]}" \
  >"$work/sluiced-rootfs.log" 2>&1 &
NS_PID=$!
for _ in $(seq 200); do
  grep -q "serving http=" "$work/sluiced-rootfs.log" && break
  kill -0 "$NS_PID" 2>/dev/null || { cat "$work/sluiced-rootfs.log"; fail "sluiced exited"; }
  sleep 0.05
done
grep -q "serving http=" "$work/sluiced-rootfs.log" || { cat "$work/sluiced-rootfs.log"; fail "sluiced did not serve"; }
read -ra children <"/proc/$NS_PID/task/$NS_PID/children" || true  # one line, no newline
[ ${#children[@]} -eq 1 ] || fail "not one process in the namespace: ${children[*]}"
SLUICED_PID=${children[0]}
check_process "$SLUICED_PID"

got=$(checks a 3)
[ "$got" = "200 200 429" ] || fail "limit 2/min for client a: $got"
echo "checks of client a: $got"
admin_release
audit=$(env_value SLUICED_AUDIT_LOG)
[[ $audit == "$WORKDIR"/* ]] || fail "the audit log $audit is not in the working directory $WORKDIR"
audit=$state/${audit#"$WORKDIR"/}
[ -f "$audit" ] || fail "no audit log in the state directory"
[ "$(stat -c '%u %a' "$audit")" = "$IMAGE_UID 640" ] || fail "audit log: $(stat -c '%u %a' "$audit")"
grep -q '"outcome":"done"' "$audit" || fail "the audit log records no release: $(cat "$audit")"
echo "admin release audited: $(stat -c '%U(%u) %a' "$audit")"

# The image's healthcheck, run as the image runs it: in the chroot, its user, its environment.
healthcheck() {
  chroot "$rootfs" /usr/bin/setpriv --reuid="$IMAGE_UID" --regid="$IMAGE_GID" --clear-groups \
    -- /usr/bin/env -i "${RUN_ENV[@]}" "${HEALTH[@]:1}"
}
healthcheck || fail "the image's healthcheck fails while sluiced serves"
echo "healthcheck: passes"

start=$(date +%s%N)
kill -TERM "$SLUICED_PID"
status=0
wait "$NS_PID" || status=$?
NS_PID=""
[ "$status" -eq 0 ] || { cat "$work/sluiced-rootfs.log"; fail "sluiced exited $status on SIGTERM"; }
echo "stopped by SIGTERM: exit 0 in $((($(date +%s%N) - start) / 1000000)) ms"
if healthcheck; then fail "the image's healthcheck passes with sluiced stopped"; fi
echo "healthcheck: fails once sluiced is stopped"

# ---- 3. podman run -------------------------------------------------------------------------
step "podman run, with examples/compose.yaml's hardening but its ulimit"
# Where podman cannot raise a limit (no CAP_SYS_RESOURCE), its defaults stop every container:
# podman 4.3 asks for nofile 1048576 (and, once any --ulimit is given, nproc 1048576), and
# its default runtime, crun 1.8, refuses hosts whose cgroups are in hybrid mode. So: no
# default ulimits, no --ulimit (the container keeps podman's own limits), and runc where it
# is installed (docs/operating.md, Container image).
conf=$work/containers.conf
printf '[containers]\ndefault_ulimits = []\n' >"$conf"
if command -v runc >/dev/null; then printf '[engine]\nruntime = "runc"\n' >>"$conf"; fi
export CONTAINERS_CONF=$conf
new_env
HTTP=http://$(env_value SLUICED_HTTP_LISTEN)
env_args=()
for e in "${OVER[@]}"; do env_args+=(-e "$e"); done
# Named, so that cleanup removes it even when `podman run` made it but could not start it.
CID=sluice-image-test-$$
podman run -d --name "$CID" --network host "${HARDENING[@]}" \
  -v "$work/config:/etc/sluiced:ro" "${env_args[@]}" "$image" >/dev/null ||
  fail "podman run failed (CONTAINERS_CONF: $(tr '\n' ' ' <"$conf"))"
for _ in $(seq 200); do
  grep -q "serving http=" <(podman logs "$CID" 2>&1) && break
  [ "$(podman inspect --format '{{.State.Running}}' "$CID")" = true ] ||
    { podman logs "$CID"; fail "the container exited"; }
  sleep 0.05
done
grep -q "serving http=" <(podman logs "$CID" 2>&1) || { podman logs "$CID"; fail "sluiced did not serve"; }
check_process "$(podman inspect --format '{{.State.Pid}}' "$CID")"
got=$(checks b 3)
[ "$got" = "200 200 429" ] || fail "limit 2/min for client b: $got"
echo "checks of client b: $got"
podman healthcheck run "$CID" || fail "podman healthcheck run: unhealthy while sluiced serves"
echo "podman healthcheck run: healthy"
podman stop --time "$grace" "$CID" >/dev/null
code=$(podman inspect --format '{{.State.ExitCode}}' "$CID")
[ "$code" = 0 ] || { podman logs "$CID"; fail "sluiced exited $code on podman stop"; }
echo "podman stop: exit 0"
echo "PASS"
