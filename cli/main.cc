// sluice — the operator's CLI. See `sluice --help`.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "commands.h"

namespace sluice::cli {
namespace {

// SLUICED_REDIS's value in a KEY=VALUE environment file as systemd's EnvironmentFile= reads
// it (the last assignment; comments and blank lines skipped; one pair of surrounding quotes
// removed); empty when the file has none or cannot be read. Reads at most 64 KiB.
std::string RedisUrlInEnvironmentFile(const char* path) {
  std::ifstream in(path);
  std::string line, url;
  std::size_t read = 0;
  while (read < 64 * 1024 && std::getline(in, line)) {
    read += line.size() + 1;
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line.compare(start, 14, "SLUICED_REDIS=") != 0) continue;
    std::string value = line.substr(start + 14);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r'))
      value.pop_back();
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    url = value;
  }
  return url;
}

}  // namespace

std::string DefaultRedisUrl() {
  for (const char* name : {"SLUICE_REDIS_URL", "SLUICED_REDIS"}) {
    const char* env = std::getenv(name);
    if (env && *env) return env;
  }
  if (std::string url = RedisUrlInEnvironmentFile(kServiceEnvironmentFile); !url.empty())
    return url;
  return "redis://127.0.0.1:6379";
}

std::string DefaultRedisUrlNote() {
  for (const char* name : {"SLUICE_REDIS_URL", "SLUICED_REDIS"}) {
    const char* env = std::getenv(name);
    if (env && *env) return std::string("from $") + name;
  }
  if (!RedisUrlInEnvironmentFile(kServiceEnvironmentFile).empty())
    return std::string("SLUICED_REDIS from ") + kServiceEnvironmentFile;
  if (::access(kServiceEnvironmentFile, F_OK) == 0 && ::access(kServiceEnvironmentFile, R_OK) != 0)
    return std::string("the default: ") + kServiceEnvironmentFile +
           " (sluiced's settings) is not readable by this user; pass --redis or set "
           "SLUICE_REDIS_URL";
  return "the default";
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  CLI::App app{
      "sluice: distributed rate limiting on Redis — operator's tool.\n"
      "Exit codes: 0 done, 1 findings, 2 usage or connection error."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sluice ") + SLUICE_VERSION);
  int exit_code = sluice::cli::kExitOk;
  sluice::cli::AddBench(app, exit_code);
  sluice::cli::AddDemo(app, exit_code);
  sluice::cli::AddAudit(app, exit_code);
  sluice::cli::AddRepair(app, exit_code);
  sluice::cli::AddInspect(app, exit_code);
  sluice::cli::AddTop(app, exit_code);
  sluice::cli::AddRelease(app, exit_code);
  sluice::cli::AddReset(app, exit_code);
  sluice::cli::AddOverride(app, exit_code);
  sluice::cli::AddSimulate(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : sluice::cli::kExitError;
  }
  return exit_code;
}
