// The layering of src/ holds itself: every `#include` of sluice's own headers is checked
// against a small matrix of which folder may include which (docs/design.md §9), so the
// next cycle fails the build's tests instead of creeping in.
//
// From the ground up:
//   core     status, limits, decisions, keys, SHA-256, clocks, fork checks
//   algo     the scripts' twins and the concurrency twin            (core)
//   store    the Store interface                                    (core, algo)
//   memory   the embedded store                                     (core, algo, store)
//   redis    RESP, the connection, the Redis store; the only hiredis user
//                                                                   (core, algo, store)
//   policy   failure policies, breaker, denial cache                (… memory)
//   admin    the operators' API                                     (core, algo, redis)
//   client   Client, Limiter, CheckComposite, leases, metrics       (everything)
// Public headers: the value headers (status, limits, clock, decision, metrics, and
// boost_first, the Asio/g++ workaround) include
// only each other; client.h the values; lease.h and quota.h client.h; admin.h lease.h and the
// values; asio.h and
// sluice.h the rest. Below the composition a folder may include the value headers and
// the public header it implements (admin: sluice/admin.h). The CLI and the service are
// built on the public API only. Tests (`*_test.cc`, tests/, testing/, bench/) may reach
// into any layer, but hiredis stays inside src/redis/ for them too, except in bench/,
// whose ceilings measure a raw hiredis client as the reference sluice is held to.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

namespace fs = std::filesystem;

const std::set<std::string> kValueHeaders = {"sluice/status.h",  "sluice/limits.h",
                                             "sluice/clock.h",   "sluice/decision.h",
                                             "sluice/metrics.h", "sluice/boost_first.h"};
const std::set<std::string> kAllPublic = {
    "sluice/status.h",  "sluice/limits.h", "sluice/clock.h",       "sluice/decision.h",
    "sluice/metrics.h", "sluice/client.h", "sluice/lease.h",       "sluice/admin.h",
    "sluice/asio.h",    "sluice/sluice.h", "sluice/boost_first.h", "sluice/quota.h"};
const std::set<std::string> kLayers = {"core",  "algo",   "store", "memory",
                                       "redis", "policy", "admin", "client"};

// Internal folders each src/ folder may include (its own included).
const std::map<std::string, std::set<std::string>> kMayInclude = {
    {"core", {"core"}},
    {"algo", {"core", "algo"}},
    {"store", {"core", "algo", "store"}},
    {"memory", {"core", "algo", "store", "memory"}},
    {"redis", {"core", "algo", "store", "redis"}},
    {"policy", {"core", "algo", "store", "memory", "policy"}},
    {"admin", {"core", "algo", "redis", "admin"}},
    {"client", {"core", "algo", "store", "memory", "redis", "policy", "admin", "client"}},
};

// Public headers beyond the value headers, per src/ folder.
const std::map<std::string, std::set<std::string>> kMayIncludePublic = {
    {"admin", {"sluice/admin.h"}},
    {"client", kAllPublic},
};

// Public headers each public header may include.
const std::map<std::string, std::set<std::string>> kPublicMayInclude = {
    {"sluice/status.h", {}},
    {"sluice/clock.h", {}},
    {"sluice/metrics.h", {}},
    {"sluice/limits.h", {"sluice/status.h"}},
    {"sluice/decision.h", {"sluice/status.h"}},
    {"sluice/client.h", kValueHeaders},
    {"sluice/lease.h", {"sluice/client.h", "sluice/decision.h", "sluice/status.h"}},
    {"sluice/admin.h", {"sluice/lease.h", "sluice/decision.h", "sluice/status.h"}},
    {"sluice/quota.h", {"sluice/client.h", "sluice/status.h"}},
    {"sluice/asio.h", {"sluice/boost_first.h", "sluice/client.h", "sluice/lease.h"}},
    {"sluice/boost_first.h", {}},
    {"sluice/sluice.h", kAllPublic},
};

// The `#include "..."` and `#include <...>` targets of a file, with their line numbers.
std::vector<std::pair<int, std::string>> Includes(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos || line.compare(i, 1, "#") != 0) continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || line.compare(i, 7, "include") != 0) continue;
    const std::size_t open = line.find_first_of("\"<", i + 7);
    if (open == std::string::npos) continue;
    const std::size_t close = line.find(line[open] == '"' ? '"' : '>', open + 1);
    if (close == std::string::npos) continue;
    out.emplace_back(n, line.substr(open, close - open + 1));
  }
  return out;
}

// What is wrong with the includes of the file at `path` (relative to the source root,
// '/'-separated) whose text is `text`: one message per bad include.
std::vector<std::string> Violations(const std::string& path, const std::string& text) {
  std::vector<std::string> bad;
  const auto slash = path.find('/');
  const std::string top = path.substr(0, slash);
  std::string folder;  // src/<folder>/...
  if (top == "src") folder = path.substr(slash + 1, path.find('/', slash + 1) - slash - 1);
  const bool is_test =
      path.ends_with("_test.cc") || top == "tests" || top == "testing" || top == "bench";
  for (const auto& [line, target] : Includes(text)) {
    const std::string where = path + ":" + std::to_string(line) + ": " + target;
    const std::string name = target.substr(1, target.size() - 2);
    if (target[0] == '<') {
      if (name.starts_with("hiredis/") && folder != "redis" && top != "bench") {
        bad.push_back(where + " — hiredis is included only inside src/redis/");
      }
      continue;
    }
    const std::string head = name.substr(0, name.find('/'));
    // The repository root is an include directory of sluiced's targets (for "service/…"),
    // so "src/core/…" would compile there and slip past the layer names below.
    if (head == "src" || head == "include") {
      bad.push_back(where + " — include a header by its layer's name (core/…, sluice/…), " +
                    "not by its place in the tree");
      continue;
    }
    const bool internal = kLayers.count(head) > 0;
    const bool is_public = head == "sluice";
    if (top == "include") {
      const std::string self = path.substr(std::string("include/").size());
      auto allowed = kPublicMayInclude.find(self);
      if (internal ||
          (is_public && (allowed == kPublicMayInclude.end() || allowed->second.count(name) == 0))) {
        bad.push_back(where + " — a public header includes only the public headers below it");
      }
      continue;
    }
    if (is_test) continue;
    if (top == "cli" || top == "service" || top == "examples") {
      if (internal || head == "testing") {
        bad.push_back(where + " — " + top + "/ is built on the public API (include/sluice/) only");
      }
      continue;
    }
    if (top != "src") continue;
    if (internal) {
      auto allowed = kMayInclude.find(folder);
      if (allowed == kMayInclude.end() || allowed->second.count(head) == 0) {
        bad.push_back(where + " — src/" + folder + "/ may not include src/" + head +
                      "/ (it is above it)");
      }
    } else if (is_public && kValueHeaders.count(name) == 0) {
      auto allowed = kMayIncludePublic.find(folder);
      if (allowed == kMayIncludePublic.end() || allowed->second.count(name) == 0) {
        bad.push_back(where + " — only the composition (src/client/) includes " + name);
      }
    } else if (head == "testing") {
      bad.push_back(where + " — the library does not include test code");
    }
  }
  return bad;
}

TEST(Layering, TheCheckerCatchesEachKindOfWrongInclude) {
  EXPECT_EQ(Violations("service/engine.cc", "#include \"src/core/keys.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("cli/audit.cc", "#include \"include/sluice/client.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/client/client.cc", "#include \"src/core/keys.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/core/keys.cc", "#include \"client/client_core.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/algo/gcra.cc", "#include \"store/store.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/store/store.h", "#include \"sluice/client.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/policy/x.cc", "  #  include \"redis/resp.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/admin/admin.cc", "#include <hiredis/hiredis.h>\n").size(), 1u);
  EXPECT_EQ(Violations("testing/redis_server.cc", "#include <hiredis/hiredis.h>\n").size(), 1u);
  EXPECT_EQ(Violations("src/redis/x_test.cc", "#include <hiredis/read.h>\n").size(), 0u);
  EXPECT_EQ(Violations("cli/top.cc", "#include \"core/keys.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("service/x.cc", "#include \"testing/fake_clock.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("include/sluice/client.h", "#include \"sluice/lease.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("include/sluice/status.h", "#include \"core/keys.h\"\n").size(), 1u);
  EXPECT_EQ(Violations("src/memory/m.cc", "#include \"testing/fault_store.h\"\n").size(), 1u);
  // What is allowed stays allowed.
  EXPECT_TRUE(Violations("src/policy/p.cc",
                         "#include \"memory/memory_store.h\"\n"
                         "#include \"sluice/decision.h\"\n#include <vector>\n")
                  .empty());
  EXPECT_TRUE(Violations("src/client/c.cc",
                         "#include \"redis/redis_store.h\"\n"
                         "#include \"sluice/lease.h\"\n")
                  .empty());
  EXPECT_TRUE(Violations("src/core/c_test.cc", "#include \"client/client_core.h\"\n").empty());
  EXPECT_TRUE(
      Violations("cli/x.cc", "#include \"sluice/sluice.h\"\n#include \"bench.h\"\n").empty());
  EXPECT_TRUE(Violations("src/redis/r.cc", "#include <hiredis/hiredis.h>\n").empty());
  // Every src/ folder has a row in the matrix.
  for (const std::string& layer : kLayers) EXPECT_EQ(kMayInclude.count(layer), 1u) << layer;
}

TEST(Layering, EveryIncludeOfTheSourceTreeFollowsTheMatrix) {
  const fs::path root = SLUICE_SOURCE_DIR;
  int files = 0;
  std::vector<std::string> bad;
  for (const char* top :
       {"src", "include", "cli", "service", "examples", "testing", "tests", "bench"}) {
    if (!fs::exists(root / top)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cpp" && ext != ".hpp") continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      if (rel.starts_with("src/") && std::count(rel.begin(), rel.end(), '/') < 2) {
        bad.push_back(rel + " — every file of src/ belongs to a layer folder");
      }
      if (rel.starts_with("src/")) {
        const std::string folder = rel.substr(4, rel.find('/', 4) - 4);
        if (kLayers.count(folder) == 0)
          bad.push_back(rel + " — src/" + folder + "/ is not in the matrix");
      }
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      for (std::string& v : Violations(rel, text.str())) bad.push_back(std::move(v));
      ++files;
    }
  }
  EXPECT_GT(files, 100);  // the walk found the tree
  std::string all;
  for (const std::string& b : bad) all += "\n  " + b;
  EXPECT_TRUE(bad.empty()) << bad.size() << " include(s) cross the layers the wrong way:" << all;
}

}  // namespace
}  // namespace sluice
