#!/usr/bin/env bash
# Coverage-guided fuzzing of sluiced's config loader and JSON request parsers with
# libFuzzer (clang-14, whose libclang_rt.fuzzer Debian's clang-14 package ships; scripts/setup.sh installs it), under
# AddressSanitizer + UBSan, for longer runs than `make test`'s bounded driver
# (service/tests/fuzz_test.cc). The two parsers are compiled with clang and coverage
# here; the rest comes from the release build (make build first).
#   service/fuzz/run.sh [seconds per target, default 600] [jobs per target, default 1]
# Corpora grow in build/fuzz/<target>.run/corpus (seeded from examples/ and the bounded
# driver's inputs); a crash leaves its input in build/fuzz/<target>.run/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET=${1:-600}
JOBS=${2:-1}
CXX=${CXX_FUZZ:-clang++-14}
command -v "$CXX" >/dev/null || { echo "missing $CXX (apt-get install clang-14)" >&2; exit 2; }
LIBS=build/release
for lib in "$LIBS/service/libsluiced_lib.a" "$LIBS/libsluice.a"; do
  [ -f "$lib" ] || { echo "missing $lib: make build first" >&2; exit 2; }
done
OUT=build/fuzz
mkdir -p "$OUT"
FLAGS=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I. -Iinclude -Isrc -isystem /usr/include/hiredis -include utility)
# The parsers themselves, instrumented; everything else from the release libraries.
for src in config json_api; do
  [ "$OUT/$src.o" -nt "service/$src.cc" ] || "$CXX" "${FLAGS[@]}" -c "service/$src.cc" -o "$OUT/$src.o"
done
link() {  # link NAME: the fuzzer binary
  "$CXX" "${FLAGS[@]}" "service/fuzz/$1.cc" "$OUT/config.o" "$OUT/json_api.o" \
    "$LIBS/service/libsluiced_lib.a" "$LIBS/service/libsluiced_proto.a" "$LIBS/libsluice.a" \
    $(pkg-config --libs yaml-cpp hiredis libnghttp2 protobuf openssl) -lspdlog -lfmt -lpthread \
    -o "$OUT/$1"
}
link config_fuzzer
link json_fuzzer

# Seeds: the example configs and requests of the bounded driver.
mkdir -p "$OUT/config_fuzzer.run/corpus" "$OUT/json_fuzzer.run/corpus"
for f in examples/config/*.yaml examples/bench/*.yaml; do cp "$f" "$OUT/config_fuzzer.run/corpus/seed-$(basename "$f")"; done
printf '%s' '{"domain":"shop","hits":2,"descriptors":[{"entries":[{"key":"route","value":"x"},{"key":"a","value":"b"}],"hits":1}]}' >"$OUT/json_fuzzer.run/corpus/seed-check"
printf '%s' '{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requestsPerUnit":3,"unit":"SECOND"},"hitsAddend":0}]}' >"$OUT/json_fuzzer.run/corpus/seed-envoy"
printf '%s' '{"domain":"d","entries":[{"key":"streams"},{"key":"account","value":"bob"}]}' >"$OUT/json_fuzzer.run/corpus/seed-lease"

status=0
for target in config_fuzzer json_fuzzer; do
  echo "== $target: ${SECONDS_PER_TARGET}s, $JOBS job(s)"
  (cd "$OUT/$target.run" && "../$target" -max_total_time="$SECONDS_PER_TARGET" -max_len=8192 \
     -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -jobs="$JOBS" -workers="$JOBS" corpus) \
    >"$OUT/$target.log" 2>&1 || status=1
  grep -E "^stat::|Done [0-9]+ runs|ERROR|SUMMARY" "$OUT/$target.log" "$OUT/$target.run"/fuzz-*.log 2>/dev/null | tail -8 || true
  ls "$OUT/$target.run" | grep -E '^(crash|leak|timeout|oom)-' || true
done
exit $status
