# Two commands for a fresh Debian 12 machine (as root):
#   make run    install what is missing, build, run sluiced's worked example (examples/run.sh:
#               a private redis-server, sluiced on examples/config, 200/429/503 with Redis
#               up, stopped and back; everything it starts is stopped by pid)
#   make serve  sluiced on examples/config at the documented addresses (HTTP 127.0.0.1:8080,
#               gRPC 8081, admin 8082, metrics 8083) with a private redis-server, until
#               Ctrl-C (examples/serve.sh); a port in use: make serve HTTP_PORT=18080 (and
#               GRPC_PORT, ADMIN_PORT, METRICS_PORT)
#   make test   install what is missing, build, run every test (unit, differential,
#               integration, chaos) against private redis-servers on free loopback ports;
#               first the unit, integration and service tests under AddressSanitizer+UBSan
#   make package
#               the Debian packages sluiced, sluice-tools and libsluice-dev, built by CPack
#               from a clean build/package (release, tests off, prefix /usr), left in
#               build/package/*.deb (docs/operating.md, Running as a system service); it
#               installs the build dependencies only (scripts/setup.sh --build), not the
#               test toolchain
#   make image  the sluiced container image, localhost/sluiced (docs/operating.md, Container
#               image): a Debian 12 base by debootstrap (cached in build/image), the package
#               of make package; needs podman (scripts/setup.sh --image installs it)
#   make image-test
#               make image, then its test: the image's sluiced serving checks (podman run,
#               and its root filesystem run in a namespace as the image config says)
#   make test-sanitizers
#               every test under AddressSanitizer+UBSan (build/asan), then under
#               ThreadSanitizer (build/tsan): too long for `make test` (docs/development.md, Sanitizers)
PRESET ?= release
JOBS ?= 2
# CTest's slots: four times the compile jobs. Most tests wait (on the redis-servers they
# start, on the faults they inject, on timeouts) far more than they compute: the release
# suite's 323 s of CPU would fill a quarter of the 657 s it took on two cores at -j2
# (docs/development.md, Where the time goes). A test takes slots by what it keeps busy
# (PROCESSORS; the top-level CMakeLists.txt): an ordinary test 2, so four run at once; a
# test that keeps a core busy 4, so no more of them run at once than at -j2; a fault-matrix
# cell, which waits for its fault nearly all of its time, 1. On a machine loaded by other
# work, where timing bounds fail anyway, TEST_JOBS=4.
TEST_JOBS ?= 8
# The sanitizer trees' suites, longer and heavier: two ordinary tests at once.
SANITIZER_TEST_JOBS ?= 4
# ccache keys a compilation on paths relative to the checkout, not absolute ones, so every
# clone and worktree on a machine shares one cache: a fresh clone of a commit built
# elsewhere on the machine compiles from the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: setup setup-build build run serve test test-asan test-sanitizers package image image-test bench clean

setup:
	./scripts/setup.sh

# What building and packaging need, without the test toolchain.
setup-build:
	./scripts/setup.sh --build

build: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS)

run: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS) --target sluiced sluice_cli
	./examples/run.sh

# Ports given on make's command line reach the script through the environment.
serve: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS) --target sluiced sluice_cli
	./examples/serve.sh

# The release suite runs last, so that its CTest summary is the last line.
test: build test-asan
	ctest --preset $(PRESET) -j $(TEST_JOBS) --timeout 600

# Under a sanitizer: every test but the style checks and the setup check (they do not
# depend on the build), the package and image checks (one builds a consumer project, one
# packages, installs and purges the Debian packages, one runs the container image), the docs
# tests (they build the docs' programs against the installed package, and run make serve's
# script), CompositeFigure (it measures speed, which means nothing under a sanitizer) and
# E2e.ListenersBackOffWhenOutOfDescriptors... (it runs sluiced out of file descriptors, and
# the sanitizers' runtime needs one: UBSan's vptr check tests memory through a pipe and,
# failing to make one, reports a valid object as invalid and stops the process). A finding
# fails the test that hit it.
SANITIZED_TESTS = -E '^(Style|Setup|PackageConfig|Package|Image|Docs|CompositeFigure)\.|ListenersBackOffWhenOutOfDescriptors'

# AddressSanitizer+UBSan over the unit, integration and service tests (sluiced itself
# built instrumented, its end-to-end tests included: they found a use-after-free at exit
# that no other run saw): the part of the sanitizer runs that fits in `make test`
# (docs/development.md, Sanitizers). The fleet tests (label `fleet`) run here too: each
# instrumented sluiced they restart must drain and exit 0, its leak check included.
test-asan: setup
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS) --target unit_tests integration_tests layering_tests \
	  sluiced service_tests sluiced_e2e_tests h2_server_tests sluiced_shutdown_tests \
	  sluiced_rlqs_tests sluiced_startup_tests
	ctest --preset asan -j $(TEST_JOBS) --timeout 1200 -L 'unit|integration|service' $(SANITIZED_TESTS)

# Under tsan the exactness tests' forked client processes cannot start threads (TSan
# cannot follow a fork of a process that runs threads: "dup thread with used id"), so
# they run under asan only. (Forks now go through testing::Fork(), which closes the
# Redis fixtures' connections and their threads first; whether that lifts this has not
# been tried under tsan yet.)
FORKING_TESTS = ProcessesTimesThreads|MixedCosts|HotKeyRedis
SANITIZERS ?= asan tsan
test-sanitizers: setup
	set -e; for p in $(SANITIZERS); do \
	  cmake --preset $$p; \
	  cmake --build --preset $$p -j $(JOBS); \
	  if [ $$p = tsan ]; then \
	    ctest --preset $$p -j $(SANITIZER_TEST_JOBS) --timeout 1200 -E '^(Style|Setup|PackageConfig|Package|Image|Docs|CompositeFigure)\.|ListenersBackOffWhenOutOfDescriptors|$(FORKING_TESTS)'; \
	  else \
	    ctest --preset $$p -j $(SANITIZER_TEST_JOBS) --timeout 1200 $(SANITIZED_TESTS); \
	  fi; \
	done

# The Debian packages, from a clean tree: RelWithDebInfo as the release preset (stripped
# when packaged), no tests, no benchmarks, installed under /usr.
PACKAGE_DIR = build/package
package: setup-build
	rm -rf $(PACKAGE_DIR)
	cmake -S . -B $(PACKAGE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_WERROR=ON \
	  -DSLUICE_BUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX=/usr
	cmake --build $(PACKAGE_DIR) -j $(JOBS)
	cd $(PACKAGE_DIR) && cpack
	@ls -1 $(PACKAGE_DIR)/*.deb

# The container image, from the packages: build/package's sluiced_*.deb as make package left
# it (made first if there is none; `make package image` rebuilds both). The debootstrap base
# is cached under build/image: a second run only rebuilds the image's own layer.
VERSION = $(shell sed -nE 's/^project.sluice VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
image:
	./scripts/setup.sh --image
	ls $(PACKAGE_DIR)/sluiced_*.deb >/dev/null 2>&1 || $(MAKE) package
	./scripts/image.sh $(PACKAGE_DIR) $(VERSION)

# The image's test (label image; tests/image/image_test.sh). It runs in make test too where
# the image exists (it adds about half a minute); elsewhere it is skipped, saying why.
image-test: image
	cmake --preset $(PRESET)
	ctest --preset $(PRESET) -L '^image$$' --timeout 300

# The fixed-window figures of docs/benchmarks.md: ceiling vs sluice bench in one run.
bench: build
	./bench/fixed_window_ceiling.sh

clean:
	rm -rf build
