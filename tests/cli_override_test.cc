// `sluice override` end to end: the built binary against a private redis-server. A set is
// applied by a library client of the same Redis within its refresh (waited for, bounded;
// the decision says it), listed, then cleared, one audit record each; a --ttl past 30 days
// is refused and writes nothing.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "sluice/sluice.h"
#include "testing/eventually.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"

namespace sluice::cli_override_test {
namespace {

using namespace std::chrono_literals;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

testing::CommandRun Override(const std::vector<std::string>& args) {
  std::string command = "timeout 30 " SLUICE_CLI_PATH " override";
  for (const std::string& a : args) command += " " + Quote(a);
  return testing::RunCommand(command + " 2>&1 </dev/null");
}

std::size_t Lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

TEST(CliOverride, SetAppliedByAClientListedThenCleared) {
  testing::RedisServer server;
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("sluice_cli_override_" + std::to_string(getpid()) + ".jsonl"))
                              .string();
  std::filesystem::remove(log);
  auto client = testing::ConnectClient(server, {.prefix = "ovc", .deadline = 2000ms},
                                       /*runtime_overrides=*/true);
  auto login = *client->MakeLimiter("login", {.limit = 2, .window = 60s});
  const std::vector<std::string> common = {
      "--redis", server.url(), "--prefix", "ovc",      "--limiter",    "login",       "--id",
      "acme",    "--actor",    "ana",      "--reason", "plan upgrade", "--audit-log", log};
  auto with = [&](std::vector<std::string> head, std::vector<std::string> tail = {}) {
    head.insert(head.end(), common.begin(), common.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  testing::CommandRun refused = Override(with({"set"}, {"--limit", "500", "--ttl", "31d"}));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_EQ(Lines(log), 0u);

  testing::CommandRun set = Override(with({"set"}, {"--limit", "500", "--ttl", "24h", "--json"}));
  ASSERT_EQ(set.exit_code, 0) << set.output;
  EXPECT_EQ(nlohmann::json::parse(set.output)["override"]["limit"], 500) << set.output;
  ASSERT_TRUE(testing::Eventually(
      [&] { return login.Peek("acme")->limit_source == LimitSource::kRuntimeOverride; }, 10s));
  EXPECT_EQ(login.Check("acme")->limit, 500);

  testing::CommandRun list =
      Override({"list", "--redis", server.url(), "--prefix", "ovc", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  const auto listed = nlohmann::json::parse(list.output)["overrides"];
  ASSERT_EQ(listed.size(), 1u) << list.output;
  EXPECT_EQ(listed[0]["id"], "acme");
  EXPECT_EQ(listed[0]["actor"], "ana");

  testing::CommandRun clear = Override(with({"clear"}));
  ASSERT_EQ(clear.exit_code, 0) << clear.output;
  ASSERT_TRUE(testing::Eventually(
      [&] { return login.Peek("acme")->limit_source == LimitSource::kLimiter; }, 10s));
  EXPECT_EQ(Lines(log), 2u);
  std::filesystem::remove(log);
  EXPECT_EQ(server.KeysWithoutTtl("ovc:*"), std::vector<std::string>{});
}

}  // namespace
}  // namespace sluice::cli_override_test
