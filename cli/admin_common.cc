#include "admin_common.h"

#include <sys/resource.h>

#include <cstdio>
#include <ctime>

#include "commands.h"

namespace sluice::cli {

void AddAdminFlags(CLI::App* cmd, AdminFlags& flags) {
  flags.url = DefaultRedisUrl();
  cmd->add_option("--redis", flags.url,
                  "Redis URL: redis://[[user]:password@]host[:port][/db], rediss://... "
                  "(TLS: ?ca=FILE&cert=FILE&key=FILE&sni=NAME), "
                  "redis+cluster://[[user]:password@]host:port[,host:port...] (every primary "
                  "of a cluster), redis+sentinel://host:port[,host:port...]/master-name or "
                  "unix:///path?db=N (default: $SLUICE_REDIS_URL, else $SLUICED_REDIS, else "
                  "SLUICED_REDIS in /etc/default/sluiced if readable, else "
                  "redis://127.0.0.1:6379)");
  cmd->add_option("--prefix", flags.prefix, "Key prefix (ClientOptions::prefix)")
      ->capture_default_str();
  cmd->add_flag("--json", flags.json, "Machine output: one JSON document on stdout");
  cmd->add_option("--timeout", flags.timeout_s, "Seconds each round trip to Redis may take")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  cmd->add_option("--scan-count", flags.scan_count,
                  "SCAN COUNT: keys per batch (each batch blocks Redis ~1 ms per 1000 keys)")
      ->capture_default_str()
      ->check(CLI::Range(10, 100'000));
}

int ReportError(const char* command, const Status& status) {
  std::fprintf(stderr, "sluice %s: %s\n", command, status.ToString().c_str());
  return kExitError;
}

std::unique_ptr<Admin> ConnectOrReport(const char* command, const AdminFlags& flags) {
  AdminOptions options{.url = flags.url, .prefix = flags.prefix};
  options.scan_count = static_cast<std::size_t>(flags.scan_count);
  options.command_timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000));
  auto admin = Admin::Connect(std::move(options));
  if (!admin.ok()) {
    Status status = admin.status();
    // Which Redis, when the operator did not name it: the URL came from somewhere else.
    if (flags.url == DefaultRedisUrl())
      status =
          Status(status.code(), status.message() + " (Redis URL " + DefaultRedisUrlNote() + ")");
    (void)ReportError(command, status);
    return nullptr;
  }
  return std::move(*admin);
}

std::string FormatUtcMs(int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(((ms % 1000) + 1000) % 1000));
  return buf;
}

std::string FormatDurationMs(int64_t ms) {
  const char* sign = ms < 0 ? "-" : "";
  const int64_t a = ms < 0 ? -ms : ms;
  char buf[48];
  if (a < 1000) {
    std::snprintf(buf, sizeof buf, "%s%lld ms", sign, static_cast<long long>(a));
  } else if (a < 60'000) {
    std::snprintf(buf, sizeof buf, "%s%.1f s", sign, static_cast<double>(a) / 1000);
  } else if (a < 3'600'000) {
    std::snprintf(buf, sizeof buf, "%s%lld min %lld s", sign, static_cast<long long>(a / 60'000),
                  static_cast<long long>(a % 60'000 / 1000));
  } else {
    std::snprintf(buf, sizeof buf, "%s%lld h %lld min", sign, static_cast<long long>(a / 3'600'000),
                  static_cast<long long>(a % 3'600'000 / 60'000));
  }
  return buf;
}

std::string FormatTtl(int64_t ttl_ms) {
  if (ttl_ms == -1) return "no expiry";
  if (ttl_ms == -2) return "gone";
  return FormatDurationMs(ttl_ms);
}

int64_t PeakRssKb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

void PrintJson(const nlohmann::json& doc) {
  std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace sluice::cli
