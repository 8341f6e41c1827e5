// `sluice simulate`: the textbook cases of servers sharing one limit, reproduced exactly
// by the built binary (deterministic: embedded store, model clock), and its errors.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"

namespace sluice {
namespace {

using SimulateRun = testing::CommandRun;  // output: stdout (and stderr when asked)

SimulateRun Simulate(const std::string& args, bool with_stderr = false) {
  return testing::RunCommand("timeout 60 " SLUICE_CLI_PATH " simulate " + args +
                             (with_stderr ? " 2>&1" : " 2>/dev/null") + " </dev/null");
}

// The JSON of `sluice simulate <args> --json`, or a test failure.
nlohmann::json Json(const std::string& args) {
  const SimulateRun run = Simulate(args + " --json");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return nlohmann::json::parse(run.output, nullptr, /*allow_exceptions=*/false);
}

const nlohmann::json& Mode(const nlohmann::json& j, const std::string& mode) {
  for (const nlohmann::json& m : j["modes"]) {
    if (m["mode"] == mode) return m;
  }
  static const nlohmann::json kNone;
  ADD_FAILURE() << "no mode " << mode << " in " << j.dump();
  return kNone;
}

// (a) 8 servers, each with its own full limit of 5/s, let 40/s through; one shared limit
// lets 5/s through.
TEST(CliSimulate, EightServersWithTheirOwnLimitOfFiveLetFortyThrough) {
  const nlohmann::json j = Json("--servers 8 --limit 5 --window-ms 1000 --windows 10");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["requests_per_window"], 40);
  for (int64_t n : Mode(j, "local")["admitted_per_window"]) EXPECT_EQ(n, 40);
  for (int64_t n : Mode(j, "shared")["admitted_per_window"]) EXPECT_EQ(n, 5);
  EXPECT_EQ(Mode(j, "local")["admitted"], 400);
  EXPECT_EQ(Mode(j, "local")["overshoot"], 350);
  EXPECT_EQ(Mode(j, "shared")["admitted"], 50);
  // Store calls: the 5 admitted and the first refusal of each window; the denial cache
  // answers the rest of the window's refusals.
  EXPECT_EQ(Mode(j, "shared")["store_calls"], 60);
  EXPECT_EQ(Mode(j, "local")["store_calls"], 0);
  // Split is not possible (5 over 8 servers): left out, and said why.
  EXPECT_NE(j["note"].get<std::string>().find("less than 1 per server"), std::string::npos);
  // Token buckets of 5 refilled 5/s: the same figures once the first second is past.
  const nlohmann::json tb =
      Json("--servers 8 --limit 5 --window-ms 1000 --windows 4 --algorithm token_bucket");
  ASSERT_TRUE(tb.is_object());
  EXPECT_EQ(Mode(tb, "local")["admitted_per_window"][3], 40);
  EXPECT_EQ(Mode(tb, "shared")["admitted_per_window"][3], 5);
}

// (b) 100 requests per minute over 10 servers, spread 30,25,...,0: split limits of 10
// admit 55; the shared limit admits all 100.
TEST(CliSimulate, SplitLimitsUnderUnevenTrafficAdmitFiftyFiveOfAHundred) {
  const nlohmann::json j =
      Json("--limit 100 --window-ms 60000 --windows 1 --per-server 30,25,20,10,5,4,3,2,1,0");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["servers"], 10);
  EXPECT_EQ(Mode(j, "split")["per_server_limit"], 10);
  EXPECT_EQ(Mode(j, "split")["admitted"], 55);
  EXPECT_EQ(Mode(j, "split")["under_admission"], 45);
  EXPECT_EQ(Mode(j, "shared")["admitted"], 100);
  EXPECT_EQ(j["ideal"], 100);
  const nlohmann::json per_server = Mode(j, "split")["admitted_per_server"];
  EXPECT_EQ(per_server, nlohmann::json({10, 10, 10, 10, 5, 4, 3, 2, 1, 0}));
  // One mode asked for: its total is also the top-level "admitted".
  EXPECT_EQ(
      Json("--limit 100 --windows 1 --per-server 30,25,20,10,5,4,3,2,1,0 --mode split")["admitted"],
      55);
}

// (c) 300 per minute split over 8 servers is 37 each (296 in all).
TEST(CliSimulate, ThreeHundredSplitOverEightIsThirtySevenEach) {
  const nlohmann::json j = Json("--servers 8 --limit 300 --windows 2 --mode split");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(Mode(j, "split")["per_server_limit"], 37);
  EXPECT_EQ(j["admitted"], 592);
  EXPECT_EQ(Mode(j, "split")["admitted_per_window"], nlohmann::json({296, 296}));
}

// Every shape and algorithm: the shared mode never admits more than the limit in a
// window (fixed_window, aligned), and the same arguments give the same figures.
TEST(CliSimulate, SharedNeverExceedsTheLimitAndRunsAreDeterministic) {
  for (const char* shape : {"even", "skewed", "pinned", "bursts"}) {
    const std::string args = std::string("--servers 5 --limit 50 --windows 4 --shape ") + shape;
    const nlohmann::json j = Json(args);
    ASSERT_TRUE(j.is_object()) << shape;
    for (int64_t n : Mode(j, "shared")["admitted_per_window"]) EXPECT_LE(n, 50) << shape;
    EXPECT_EQ(Json(args), j) << shape;
  }
  for (const char* algorithm : {"sliding_window", "sliding_log", "gcra"}) {
    const nlohmann::json j =
        Json(std::string("--servers 4 --limit 20 --windows 3 --algorithm ") + algorithm);
    ASSERT_TRUE(j.is_object()) << algorithm;
    EXPECT_GT(Mode(j, "local")["admitted"], Mode(j, "shared")["admitted"]) << algorithm;
  }
}

// Prefetch (local budgets): never above the shared limit in any window, far fewer store
// calls than the shared mode, and the under-admission within servers x slice.
TEST(CliSimulate, PrefetchNeverOvershootsAndSavesStoreCalls) {
  for (const char* shape : {"even", "skewed", "bursts"}) {
    const nlohmann::json j =
        Json(std::string("--servers 8 --limit 1000 --window-ms 1000 --windows 5 --mode prefetch "
                         "--mode shared --shape ") +
             shape);
    ASSERT_TRUE(j.is_object()) << shape;
    const nlohmann::json& p = Mode(j, "prefetch");
    EXPECT_EQ(p["overshoot"], 0) << shape;
    for (int64_t n : p["admitted_per_window"]) {
      EXPECT_LE(n, 1000) << shape;
      EXPECT_GE(n, 1000 - 8 * 100) << shape;
    }
    EXPECT_LT(p["store_calls"].get<int64_t>() * 4, Mode(j, "shared")["store_calls"].get<int64_t>())
        << shape;
  }
}

// Prefetch with the other algorithms that have it. Demand far above the limit: never
// above the algorithm's bound (sliding_window: the limit per aligned window; the
// buckets: capacity + refill over the run) and no less than the shared mode less what
// the slices hold. Demand at 80% of the limit (1,000 a second per server: hot): all of
// it admitted, as by the shared mode, with far fewer store calls. (Flooded, a bucket or
// a sliding window frees units a few at a time, so cost + slice rarely fits and checks
// take the plain path: slices pay where every check is an admission, below the limit.)
TEST(CliSimulate, PrefetchWorksForSlidingWindowAndTheBuckets) {
  for (const char* algorithm : {"sliding_window", "token_bucket", "gcra"}) {
    nlohmann::json j =
        Json(std::string("--servers 8 --limit 1000 --window-ms 1000 --windows 5 --mode prefetch "
                         "--mode shared --algorithm ") +
             algorithm);
    ASSERT_TRUE(j.is_object()) << algorithm;
    const nlohmann::json& p = Mode(j, "prefetch");
    if (std::string(algorithm) == "sliding_window") {
      for (int64_t n : p["admitted_per_window"]) EXPECT_LE(n, 1000) << algorithm;
    }
    EXPECT_LE(p["admitted"].get<int64_t>(), 1000 + 5 * 1000) << algorithm;
    EXPECT_GE(p["admitted"].get<int64_t>(),
              Mode(j, "shared")["admitted"].get<int64_t>() - 5 * 8 * 100)
        << algorithm;
    j = Json(std::string("--servers 8 --limit 10000 --window-ms 1000 --windows 5 --demand 8000 "
                         "--mode prefetch --mode shared --algorithm ") +
             algorithm);
    ASSERT_TRUE(j.is_object()) << algorithm;
    const nlohmann::json& below = Mode(j, "prefetch");
    EXPECT_EQ(below["admitted"], Mode(j, "shared")["admitted"]) << algorithm;
    EXPECT_EQ(below["admitted"], 5 * 8000) << algorithm;
    EXPECT_LT(below["store_calls"].get<int64_t>() * 10,
              Mode(j, "shared")["store_calls"].get<int64_t>())
        << algorithm;
  }
}

TEST(CliSimulate, WritesAnSvgChart) {
  const std::string path = ::testing::TempDir() + "/simulate.svg";
  std::remove(path.c_str());
  const SimulateRun run = Simulate("--servers 4 --limit 10 --windows 5 --svg " + path);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(path);
  std::stringstream svg;
  svg << in.rdbuf();
  EXPECT_EQ(svg.str().rfind("<svg", 0), 0u) << svg.str().substr(0, 200);
  EXPECT_NE(svg.str().find("local: 200"), std::string::npos);
  EXPECT_NE(svg.str().find("shared: 50"), std::string::npos);
  EXPECT_NE(svg.str().find("</svg>"), std::string::npos);
}

TEST(CliSimulate, BadInputIsAClearError) {
  const struct {
    const char* args;
    const char* says;
  } cases[] = {
      {"--mode sync --sync-interval-ms 0", "--sync-interval-ms"},
      {"--mode sync --algorithm gcra", "fixed_window only"},
      {"--mode nonsense", "not one of local, split, shared, prefetch, sync"},
      {"--mode prefetch --algorithm sliding_log", "not sliding_log"},
      {"--shape lumpy", "not one of even, skewed, pinned, bursts"},
      {"--per-server 3,x,4", "\"x\" is not a count"},
      {"--servers 3 --per-server 1,2", "lists 2 servers but --servers is 3"},
      {"--servers 8 --limit 5 --mode split", "less than 1 per server"},
      {"--algorithm leaky", "leaky"},
      {"--limit 0", "--limit"},
      {"--limit 100000 --servers 1000 --windows 1", "at most 20000000"},
      {"--limit 1000000 --servers 1000", "at most 100000000 requests per window"},
  };
  for (const auto& c : cases) {
    const SimulateRun run = Simulate(c.args, /*with_stderr=*/true);
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.says), std::string::npos) << c.args << "\n" << run.output;
  }
}

}  // namespace
}  // namespace sluice
