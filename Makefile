# Two commands for a fresh Debian 12 machine (as root):
#   make run    install what is missing, build, run the demo
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

run: build
	./build/bin/sluice demo

test: build
	ctest --preset $(PRESET) -j $(JOBS) --timeout 600

# The fixed-window figures in README.md: ceiling vs sluice bench in one run.
bench: build
	./bench/fixed_window_ceiling.sh

clean:
	rm -rf build
