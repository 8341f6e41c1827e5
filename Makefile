# Two commands for a fresh Debian 12 machine (as root):
#   make run    install what is missing, build, run sluiced's worked example (examples/run.sh:
#               a private redis-server, sluiced on examples/config, 200/429/503 with Redis
#               up, stopped and back; everything it starts is stopped by pid)
#   make test   install what is missing, build, run every test (unit, differential,
#               integration, chaos) against private redis-servers on free loopback ports
PRESET ?= release
JOBS ?= 2

.PHONY: setup build run test bench clean

setup:
	./scripts/setup.sh

build: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS)

run: setup
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET) -j $(JOBS) --target sluiced sluice_cli
	./examples/run.sh

test: build
	ctest --preset $(PRESET) -j $(JOBS) --timeout 600

# The fixed-window figures in README.md: ceiling vs sluice bench in one run.
bench: build
	./bench/fixed_window_ceiling.sh

clean:
	rm -rf build
