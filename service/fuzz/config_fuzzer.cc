// libFuzzer target: sluiced's config loader (service/config.h) on arbitrary bytes as one
// YAML file. Every input must give a config or an error naming the file, never a crash,
// a hang, an exception or a sanitizer finding. Built and run by service/fuzz/run.sh (clang);
// `make test` runs the bounded driver in service/tests/fuzz_test.cc instead.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "service/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = sluiced::BuildConfig({{"fuzz.yaml", text}});
  // An error must say where: "fuzz.yaml:<line>:<column>: ..." (or the file alone).
  if (!config.ok() && config.status().message().rfind("fuzz.yaml", 0) != 0) std::abort();
  return 0;
}
