// `sluice demo` (what `make run` shows a newcomer): a store the user names with --redis is
// used or refused with an error naming it (exit 2), never silently replaced; without
// --redis it starts its own redis-server, and only when it cannot does it take the
// embedded store, saying why.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "run_command.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

using DemoRun = testing::CommandRun;  // output: stdout and stderr

// Runs `<env> sluice demo <args>` through the shell, bounded by timeout(1).
DemoRun Demo(const std::string& env, const std::string& args) {
  return testing::RunCommand("timeout 60 env " + env + " " SLUICE_CLI_PATH " demo " + args +
                             " 2>&1 </dev/null");
}

TEST(CliDemo, AnUnreachableRedisGivenIsAnErrorNamingIt) {
  // Port 1 on loopback: nothing listens there, the connection is refused at once.
  const DemoRun run = Demo("", "--redis redis://127.0.0.1:1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("redis://127.0.0.1:1"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("memory://"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("attempt"), std::string::npos) << "no walk on another store";
}

// The error names the store with its password masked.
TEST(CliDemo, AnErrorNamesTheStoreWithoutItsPassword) {
  const DemoRun run = Demo("", "--redis redis://app:hunter2pw@127.0.0.1:1");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("redis://app:***@127.0.0.1:1"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("hunter2"), std::string::npos) << run.output;
}

TEST(CliDemo, AReachableRedisGivenIsTheStoreUsed) {
  testing::RedisServer server;
  const DemoRun run = Demo("", "--redis " + server.url());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("store: " + server.url()), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("attempt 6 for account:101"), std::string::npos) << run.output;
}

TEST(CliDemo, WithoutRedisServerTheEmbeddedStoreSaysWhy) {
  // A PATH with no redis-server on it.
  const DemoRun run = Demo("PATH=/nonexistent", "");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("redis-server is not installed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("store: memory://"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace sluice
