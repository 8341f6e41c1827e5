// sluiced's signals and its stop, end to end: the built binary against a private
// redis-server.
#include <signal.h>

#include <chrono>
#include <thread>

#include "service/tests/sluiced_process.h"
#include "testing/redis_server.h"

namespace sluiced {
namespace {

using namespace std::chrono_literals;
using testing::Sluiced;
using testing::TempDir;

class Shutdown : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.Write("shop.yaml",
                  testing::ReadAll(std::string(SLUICED_SOURCE_DIR) + "/examples/config/shop.yaml"));
  }
  sluice::testing::RedisServer redis_;
  TempDir config_;
};

// A SIGHUP right after a SIGTERM (both before the main loop looks) still stops sluiced.
TEST_F(Shutdown, SigtermFollowedBySighupStops) {
  Sluiced s(config_.path(), redis_.url());
  ASSERT_TRUE(s.running());
  s.Signal(SIGTERM);
  std::this_thread::sleep_for(10ms);
  s.Signal(SIGHUP);
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(5)), 0) << s.log();
}

}  // namespace
}  // namespace sluiced
