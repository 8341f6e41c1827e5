// sluiced's command line apart from serving: --version.
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

}  // namespace
}  // namespace sluiced
