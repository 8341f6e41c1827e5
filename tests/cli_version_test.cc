// `sluice --version` prints the project version CMake sets, and exits 0.
#include <string>

#include <gtest/gtest.h>

#include "run_command.h"

namespace sluice {
namespace {

TEST(CliVersion, PrintsTheProjectVersionAndExitsZero) {
  const testing::CommandRun run =
      testing::RunCommand("timeout 30 " SLUICE_CLI_PATH " --version 2>&1 </dev/null");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, std::string("sluice ") + SLUICE_VERSION + "\n");
}

}  // namespace
}  // namespace sluice
