#!/usr/bin/env bash
# Installs the Debian 12 packages sluice needs, and only those that are missing. Safe to
# run again: a machine that has everything does nothing.
#   setup.sh           building and testing (make setup, make test): the build and test sets
#   setup.sh --build   building and packaging only (make package, make build-only
#                      machines): the compilers and the libraries sluice, sluiced and
#                      sluice link, none of the test toolchain
#   setup.sh --image   only the container image's (make image, make image-test)
#   setup.sh [--build|--image] --list   prints the packages of that set, one a line, installs nothing
set -euo pipefail

# What compiles and packages the library, sluiced and the CLI with the tests off
# (-DSLUICE_BUILD_TESTS=OFF, as `make package` configures).
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  file                                # CPack's DEB generator tells binaries apart with it (dpkg-shlibdeps)
  libhiredis-dev                      # RESP formatting and parsing only
  libboost-dev                        # Asio (header-only in 1.74)
  libssl-dev                          # TLS to Redis (rediss://)
  libcli11-dev nlohmann-json3-dev     # the sluice CLI
  # sluiced (service/):
  libyaml-cpp-dev                     # the rate limit config (envoy-ratelimit's YAML)
  libspdlog-dev                       # sluiced's logs
  libnghttp2-dev                      # HTTP/2 of sluiced's gRPC server and of its lean test/bench client
  libprotobuf-dev                     # RLS v3, health and reflection messages
  libgrpc++-dev                       # gRPC's CMake package, which service/ finds; the tests' C++ gRPC client
  protobuf-compiler protobuf-compiler-grpc  # protoc and grpc_cpp_plugin for service/proto
)

# What the tests, the benchmarks and the worked example add.
TEST_PACKAGES=(
  git
  redis-server redis-tools            # the store, redis-benchmark for the ceiling
  openssl                             # makes the tests' certificates
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  procps tmux                         # ps/pkill-free process checks, tmux for CLI tests
  clang-format                        # the style check (tests/format_check.sh)
  clang-14                            # the thread-safety analysis (tests/thread_safety_check.sh)
  python3-grpcio python3-grpc-tools   # the Python RLS client of sluiced's tests
  python3-yaml python3-jsonschema     # the docs test's YAML blocks; docs/openapi.yaml checked against the live sluiced
  nodejs golang-go                    # the Node and Go client examples, run by make test
  prometheus                          # promtool: tests check /metrics with it
  curl                                # make run's worked example
  wrk                                 # bench/service.sh (HTTP; gRPC load is our own client)
  haproxy                             # the fleet test's load balancer (2.6; examples/haproxy.cfg)
  chromium fonts-dejavu-core          # the support console's browser test (headless, over its DevTools pipe)
  # the Debian packages' test (tests/package/deb_test.sh):
  lintian                             # checks each .deb
  systemd                             # systemd-analyze verify of sluiced.service
)

# The container image (scripts/image.sh, tests/image/image_test.sh): not needed by make test.
IMAGE_PACKAGES=(
  debootstrap                         # the image's base, from Debian's archive
  podman                              # builds the image (4.3)
  runc                                # podman's runtime where crun refuses hybrid cgroups
  uidmap                              # podman's user namespaces (newuidmap)
  util-linux                          # unshare, setpriv: the image test's rootfs run
  docker-compose                      # validates examples/compose.yaml (config; no daemon needed)
)

set_name="" list=""
for arg in "$@"; do
  case $arg in
    --build | --image) set_name=$arg ;;
    --list) list=yes ;;
    *) echo "usage: setup.sh [--build | --image] [--list]" >&2; exit 2 ;;
  esac
done
case $set_name in
  --build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  --image) PACKAGES=("${IMAGE_PACKAGES[@]}") ;;
  *) PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
esac
if [ -n "$list" ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# Keep package scripts from starting a system redis-server on port 6379: sluice's tests
# start their own servers on free loopback ports and must not depend on a system one.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
