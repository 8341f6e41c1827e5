// The sluice CLI's subcommands. Each registers itself on the CLI11 app and returns the
// process exit code through the shared `exit_code`: 0 done/clean, 1 findings,
// 2 usage or connection error.
#pragma once

#include <CLI/CLI.hpp>

namespace sluice::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitError = 2;

// The packaged sluiced's settings (packaging/debian/default): its SLUICED_REDIS names the
// Redis sluiced uses.
inline constexpr const char* kServiceEnvironmentFile = "/etc/default/sluiced";

// The Redis URL when --redis is not given: $SLUICE_REDIS_URL, else $SLUICED_REDIS (sluiced's
// variable), else SLUICED_REDIS in /etc/default/sluiced when this user can read it (root,
// on a host with the sluiced package), else redis://127.0.0.1:6379.
std::string DefaultRedisUrl();
// Where DefaultRedisUrl() took the URL from, for error messages ("from $SLUICED_REDIS",
// "the default: /etc/default/sluiced … is not readable by this user; …").
std::string DefaultRedisUrlNote();

void AddBench(CLI::App& app, int& exit_code);
void AddDemo(CLI::App& app, int& exit_code);
void AddAudit(CLI::App& app, int& exit_code);
void AddRepair(CLI::App& app, int& exit_code);
void AddInspect(CLI::App& app, int& exit_code);
void AddTop(CLI::App& app, int& exit_code);
void AddRelease(CLI::App& app, int& exit_code);
void AddReset(CLI::App& app, int& exit_code);
void AddOverride(CLI::App& app, int& exit_code);
void AddSimulate(CLI::App& app, int& exit_code);

}  // namespace sluice::cli
