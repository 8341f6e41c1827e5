// Clients on a test's private redis-server, the one way every integration test makes
// them: ConnectClient for a test that owns its RedisServer, and RedisAlgorithmTest, the
// fixture of an algorithm's integration tests (tests/*_redis_test.cc): its server, its
// clients under the test's key prefix, reads of what the scripts stored, and at the end
// of every test no key of the prefix left without an expiry (design rule 1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/sluice.h"
#include "testing/redis_server.h"

namespace sluice::testing {

// A client of `server` with `options` (its url set to the server's); a failure to create
// one fails the test and returns null. It applies no runtime overrides unless
// `runtime_overrides` (ClientOptions::runtime_overrides): their refresh is a script call a
// second per client, which the tests' exact counts of script calls must not see.
inline std::shared_ptr<Client> ConnectClient(const RedisServer& server, ClientOptions options,
                                             bool runtime_overrides = false) {
  options.url = server.url();
  options.runtime_overrides = runtime_overrides;
  auto client = Client::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? *std::move(client) : nullptr;
}

// The options of a test that holds a script's own replies to the contract: every call
// must reach the script (no denial cache), and a store failure is a refusal that says
// so, never an admission.
inline ClientOptions ScriptOptions() {
  return {.deadline = std::chrono::milliseconds(2000),
          .on_failure = FailurePolicy::kClosed,
          .denial_cache_size = 0};
}

class RedisAlgorithmTest : public ::testing::Test {
 protected:
  // `options`: what every Connect starts from (Connect sets the url, prefix and clock).
  RedisAlgorithmTest(std::string prefix, ClientOptions options)
      : prefix_(std::move(prefix)), options_(std::move(options)) {}

  // A client under the test's prefix; `clock`: a model clock passed into the scripts
  // instead of Redis TIME.
  // `runtime_overrides`: as ConnectClient's.
  std::shared_ptr<Client> Connect(std::shared_ptr<const Clock> clock = nullptr,
                                  bool runtime_overrides = false) {
    ClientOptions options = options_;
    options.prefix = prefix_;
    options.model_clock = std::move(clock);
    return ConnectClient(server_, std::move(options), runtime_overrides);
  }
  int64_t Pttl(const std::string& key) const { return server_.Command({"PTTL", key}).integer; }
  std::string Get(const std::string& key) const { return server_.Command({"GET", key}).str; }
  // Redis's clock, in ms.
  int64_t RedisNowMs() const { return server_.NowMs(); }

  void TearDown() override {
    EXPECT_EQ(server_.KeysWithoutTtl(prefix_ + ":*"), std::vector<std::string>{});
  }

  const std::string prefix_;
  const ClientOptions options_;
  RedisServer server_;
};

}  // namespace sluice::testing
