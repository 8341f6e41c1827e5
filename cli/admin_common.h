// What the operator commands (audit, repair, inspect, top, release) share: the
// --redis/--prefix/--json flags, connecting with a clear error, and output helpers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sluice/admin.h"

namespace sluice::cli {

struct AdminFlags {
  std::string url;  // DefaultRedisUrl() unless --redis
  std::string prefix = "sluice";
  bool json = false;
  double timeout_s = 10;  // per round trip
  int scan_count = 1000;  // SCAN COUNT
};

// Adds --redis, --prefix, --json and --timeout to `cmd`. The URL's default is not shown
// in --help: it may hold a password.
void AddAdminFlags(CLI::App* cmd, AdminFlags& flags);

// Connects; on failure prints "sluice <command>: <status>" on stderr (never the URL's
// password) and returns null.
std::unique_ptr<Admin> ConnectOrReport(const char* command, const AdminFlags& flags);

// Prints "sluice <command>: <status>" on stderr and returns kExitError.
int ReportError(const char* command, const Status& status);

// 2026-11-29T11:33:30.123Z
std::string FormatUtcMs(int64_t ms);
// "1.5 s", "-20 ms", "3 h 2 min" for a signed duration in ms.
std::string FormatDurationMs(int64_t ms);
// "no expiry" for -1, "gone" for -2, else FormatDurationMs.
std::string FormatTtl(int64_t ttl_ms);

// This process's peak resident set size in KiB (getrusage).
int64_t PeakRssKb();

// One JSON document on stdout; bytes that are not UTF-8 (ids may hold any) are
// replaced rather than failing.
void PrintJson(const nlohmann::json& doc);

}  // namespace sluice::cli
