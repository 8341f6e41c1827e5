// sluiced's command line apart from serving: --version, --help, --check-config, and the
// exit code and message of a command line it refuses.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/run_command.h"

namespace sluiced {
namespace {

using sluice::testing::CommandRun;
using sluice::testing::RunCommand;

TEST(SluicedCommandLine, VersionPrintsTheProjectVersionAndExitsZero) {
  // No --config: --version needs nothing else.
  const CommandRun run = RunCommand("timeout 30 " SLUICED_PATH " --version 2>&1 </dev/null");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, std::string("sluiced ") + SLUICE_VERSION + "\n");
}

TEST(SluicedCommandLine, HelpPrintsTheFlagsAndExitsZero) {
  const CommandRun run = RunCommand("timeout 30 " SLUICED_PATH " --help 2>&1 </dev/null");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("--http-listen"), std::string::npos) << run.output;
}

// Every command line sluiced refuses exits 2 (CLI11's own codes were 105 to 109), with
// what is wrong; none starts anything.
TEST(SluicedCommandLine, ARefusedCommandLineSaysWhyAndExitsTwo) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "--config (or SLUICED_CONFIG): the config file or directory is required"},
      {"--config /nonexistent --no-such-flag",
       "The following argument was not expected: "
       "--no-such-flag"},
      {"--config /nonexistent --rlqs-unmatched sometimes", "--rlqs-unmatched: sometimes not in"},
      {"--config /nonexistent --grpc-max-buffered-mib 0",
       "--grpc-max-buffered-mib: Value 0 not "
       "in range"},
      {"--config /nonexistent --deadline-ms soon", "--deadline-ms"},
      {"--config /nonexistent --watch-ms 1 --watch-ms 2", "--watch-ms"},
      {"--config /nonexistent --default-failure-mode sometimes",
       "--default-failure-mode: expected open, closed or local, not 'sometimes'"},
      {"--config /nonexistent --metrics-listen 8083", "--metrics-listen 8083: expected HOST:PORT"},
  };
  for (const auto& [args, expected] : cases) {
    const CommandRun run = RunCommand("env -u SLUICED_CONFIG timeout 30 " SLUICED_PATH " " + args +
                                      " 2>&1 </dev/null");
    EXPECT_EQ(run.exit_code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << args << "\n" << run.output;
  }
}

// No store is named: --check-config needs none and opens no listener.
CommandRun CheckConfig(const std::string& path) {
  return RunCommand("timeout 30 " SLUICED_PATH " --check-config " + path + " 2>&1 </dev/null");
}

TEST(SluicedCommandLine, CheckConfigSummarisesAGoodConfig) {
  const CommandRun run = CheckConfig(std::string(SLUICED_SOURCE_DIR) + "/examples/config");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("shop: 8 limit(s), algorithms "
                            "concurrency,fixed_window,sliding_window,unlimited, failure modes "
                            "closed,open"),
            std::string::npos)
      << run.output;
}

TEST(SluicedCommandLine, CheckConfigNamesWhereABrokenConfigIsWrong) {
  char tmpl[] = "/tmp/sluiced_check_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, file = dir + "/a.yaml";
  const std::string head = "domain: d\ndescriptors:\n  - key: k\n";
  const std::pair<std::string, std::string> cases[] = {
      {head + "    rate_limit: {unit: second, requests_per_unit: 1}\n    colour: red\n",
       file + ":5:5: unknown key 'colour'"},
      {head + "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
       file + ":4:24: unknown unit 'fortnight'"},
      {"domain: d\ndescriptors:\n  - key: [k\n", file + ":4:1: "},
  };
  for (const auto& [text, expected] : cases) {
    std::ofstream(file) << text;
    const CommandRun run = CheckConfig(dir);
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_EQ(run.output.rfind(expected, 0), 0u) << run.output;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluiced
