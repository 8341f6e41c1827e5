// `sluice reset` end to end: the built binary against a private redis-server. A refused
// id of each rate algorithm is admitted again after the reset, one audit record per
// algorithm reset goes to the file and the stream; refusals (no actor, a concurrency
// limit, an audit log that cannot be written) reset nothing.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "sluice/sluice.h"
#include "testing/redis_fixture.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::RedisServer;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `sluice reset …` (bounded by timeout(1)); stdout and stderr together.
testing::CommandRun Reset(const std::vector<std::string>& args) {
  std::string command = "timeout 30 " SLUICE_CLI_PATH " reset";
  for (const std::string& a : args) command += " " + Quote(a);
  return testing::RunCommand(command + " 2>&1 </dev/null");
}

std::vector<nlohmann::json> Records(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

class CliReset : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = (std::filesystem::temp_directory_path() /
            ("sluice_cli_reset_" + std::to_string(getpid()) + ".jsonl"))
               .string();
    std::filesystem::remove(log_);
  }
  void TearDown() override {
    std::filesystem::remove(log_);
    EXPECT_EQ(server_.KeysWithoutTtl("rst:*"), std::vector<std::string>{});
  }
  std::vector<std::string> Args(const std::string& limiter, const std::string& id) {
    return {
        "--redis", server_.url(),     "--prefix", "rst",        "--limiter",   limiter, "--id", id,
        "--actor", "support@example", "--reason", "locked out", "--audit-log", log_};
  }
  RedisServer server_;
  std::string log_;
};

TEST_F(CliReset, ALockedOutIdOfEachAlgorithmIsAdmittedAgainWithOneRecordEach) {
  auto client = testing::ConnectClient(server_, {.prefix = "rst", .deadline = 2000ms});
  std::size_t records = 0;
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingLog, Algorithm::kTokenBucket, Algorithm::kGcra}) {
    const std::string name(AlgorithmName(algorithm));
    SCOPED_TRACE(name);
    // cache_denials off: this process must see the store's answer after the reset.
    auto limiter = client->MakeLimiter(
        "login_" + name, {.algorithm = algorithm, .limit = 2, .window = 60s, .refill = 2},
        {.cache_denials = false});
    ASSERT_TRUE(limiter.ok()) << limiter.status().ToString();
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(limiter->Check("acme")->allowed);
    ASSERT_FALSE(limiter->Check("acme")->allowed) << "locked out";
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(limiter->Check("zed")->allowed);

    // No --algorithm: the id's state tells which.
    auto args = Args("login_" + name, "acme");
    args.push_back("--json");
    testing::CommandRun run = Reset(args);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto out = nlohmann::json::parse(run.output);
    EXPECT_EQ(out["reset"], 1) << run.output;
    EXPECT_EQ(out["resets"][0]["algorithm"], name) << run.output;

    EXPECT_TRUE(limiter->Check("acme")->allowed) << "admitted again after the reset";
    EXPECT_FALSE(limiter->Check("zed")->allowed) << "another id keeps its count";
    const auto lines = Records(log_);
    ASSERT_EQ(lines.size(), ++records);
    EXPECT_EQ(lines.back()["action"], "reset");
    EXPECT_EQ(lines.back()["actor"], "support@example");
    EXPECT_EQ(lines.back()["reason"], "locked out");
    EXPECT_EQ(lines.back()["algorithm"], name);
    EXPECT_EQ(lines.back()["id"], "acme");
    EXPECT_EQ(lines.back()["outcome"], "done");
  }
  EXPECT_EQ(server_.Command({"XLEN", "rst:audit"}).integer, static_cast<long long>(records));

  // An id without state: nothing to reset, nothing recorded, exit 1 saying why (as release
  // and inspect); a limiter with no key at all is told apart (a wrong name).
  testing::CommandRun none = Reset(Args("login_gcra", "nobody"));
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("has no keys under limiter"), std::string::npos) << none.output;
  testing::CommandRun typo = Reset(Args("login_gcr", "acme"));
  EXPECT_EQ(typo.exit_code, 1) << typo.output;
  EXPECT_NE(typo.output.find("has no keys at all"), std::string::npos) << typo.output;
  EXPECT_EQ(Records(log_).size(), records);
}

TEST_F(CliReset, RefusalsResetNothing) {
  auto client = testing::ConnectClient(server_, {.prefix = "rst", .deadline = 2000ms});
  auto login = client->MakeLimiter("login", {.limit = 1, .window = 60s}, {.cache_denials = false});
  ASSERT_TRUE(login.ok());
  ASSERT_TRUE(login->Check("acme")->allowed);
  auto streams = client->MakeConcurrencyLimiter("streams", {.limit = 1});
  ASSERT_TRUE(streams.ok());
  auto held = streams->Acquire("acme");
  ASSERT_TRUE(held.ok() && held->acquired);

  auto no_reason = Args("login", "acme");
  no_reason[no_reason.size() - 3] = "";  // --reason ""
  EXPECT_EQ(Reset(no_reason).exit_code, 2);
  testing::CommandRun leases = Reset(Args("streams", "acme"));
  EXPECT_EQ(leases.exit_code, 2) << leases.output;
  EXPECT_NE(leases.output.find("sluice release"), std::string::npos) << leases.output;
  auto explicit_cc = Args("login", "acme");
  explicit_cc.insert(explicit_cc.end(), {"--algorithm", "concurrency"});
  EXPECT_EQ(Reset(explicit_cc).exit_code, 2);
  auto unwritable = Args("login", "acme");
  unwritable.back() = "/nonexistent-dir/audit.jsonl";
  testing::CommandRun no_log = Reset(unwritable);
  EXPECT_EQ(no_log.exit_code, 2) << no_log.output;
  EXPECT_NE(no_log.output.find("audit log"), std::string::npos) << no_log.output;

  EXPECT_FALSE(login->Check("acme")->allowed) << "still refused: nothing was reset";
  EXPECT_TRUE(Records(log_).empty());
}

}  // namespace
}  // namespace sluice
