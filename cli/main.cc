// sluice — the operator's CLI. See `sluice --help`.
#include <cstdlib>
#include <string>

#include "commands.h"

namespace sluice::cli {

std::string DefaultRedisUrl() {
  const char* env = std::getenv("SLUICE_REDIS_URL");
  return env && *env ? env : "redis://127.0.0.1:6379";
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
  sluice::cli::AddSimulate(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : sluice::cli::kExitError;
  }
  return exit_code;
}
