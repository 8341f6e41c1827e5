// libFuzzer target: sluiced's JSON request parsers (service/json_api.h) on arbitrary
// bytes. Every input must give a request or an error, never a crash or an exception; the
// fast /v1/check parser may accept only what the general one accepts, with the same
// result. Built and run by service/fuzz/run.sh (clang); `make test` runs the bounded driver
// in service/tests/fuzz_test.cc instead.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "service/json_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto check = sluiced::ParseCheckRequest(input);
  if (sluiced::CheckRequest fast; sluiced::FastParseCheckRequest(input, fast)) {
    auto tree = sluiced::ParseCheckRequestTree(input);
    if (!tree.ok() || fast.domain != tree->domain || fast.hits != tree->hits ||
        fast.descriptors.size() != tree->descriptors.size())
      std::abort();
    for (std::size_t i = 0; i < fast.descriptors.size(); ++i) {
      if (fast.descriptors[i].entries != tree->descriptors[i].entries ||
          fast.descriptors[i].hits != tree->descriptors[i].hits)
        std::abort();
    }
  }
  auto envoy = sluiced::ParseEnvoyJsonRequest(input);
  auto descriptor = sluiced::ParseDescriptorRequest(input);
  (void)check;
  (void)envoy;
  (void)descriptor;
  return 0;
}
