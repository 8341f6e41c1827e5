// SLUICE_TEST_SERVER_DIR: every fixture starts the server program of that directory
// instead of the one on PATH, under the Redis or the Valkey names. Its own binary: the
// programs are chosen once per process, at the first fixture.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "testing/redis_cluster.h"
#include "testing/redis_server.h"

namespace sluice {
namespace {

// The program a process was started as: the first word of its title (redis-server
// rewrites its title to "<argv[0]> <address> [mode]").
std::string Argv0(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.substr(0, cmdline.find_first_of(std::string(" \0", 2)));
}

// Where a program is on PATH.
std::string OnPath(const std::string& name) {
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  for (size_t at = 0; at <= path.size();) {
    const size_t colon = std::min(path.find(':', at), path.size());
    const std::string candidate = path.substr(at, colon - at) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    at = colon + 1;
  }
  return "";
}

TEST(ServerDir, EveryFixtureStartsTheServerOfTheDirectoryUnderValkeyNames) {
  // The installed redis-server and redis-cli under the Valkey names, in a directory.
  const std::string dir =
      std::filesystem::temp_directory_path() / ("sluice-server-dir-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string server = OnPath("redis-server"), cli = OnPath("redis-cli");
  ASSERT_FALSE(server.empty());
  ASSERT_FALSE(cli.empty());
  std::filesystem::create_symlink(server, dir + "/valkey-server");
  std::filesystem::create_symlink(cli, dir + "/valkey-cli");
  ASSERT_EQ(::setenv("SLUICE_TEST_SERVER_DIR", dir.c_str(), 1), 0);

  EXPECT_EQ(testing::ServerProgram(), dir + "/valkey-server");
  EXPECT_EQ(testing::CliProgram(), dir + "/valkey-cli");
  {
    testing::RedisServer plain;
    EXPECT_EQ(Argv0(plain.pid()), dir + "/valkey-server");
    EXPECT_EQ(plain.Command({"PING"}).str, "PONG");
    testing::RedisServer sentinel({.sentinel_config = "sentinel resolve-hostnames no\n"});
    EXPECT_EQ(Argv0(sentinel.pid()), dir + "/valkey-server");
    // The cluster is joined by the directory's valkey-cli.
    testing::RedisCluster cluster;
    for (const auto& node : cluster.nodes()) {
      EXPECT_EQ(Argv0(node->pid()), dir + "/valkey-server");
    }
    EXPECT_EQ(cluster.PrimaryPorts().size(), 3u);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
