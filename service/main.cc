// sluiced — the rate limit service: Envoy RLS v3 and RLQS over gRPC, HTTP/JSON, a
// metrics listener and an admin listener, on libsluice's public API. Flags (flags.h) →
// settings (settings.h) → the runner (runner.h).
#include <spdlog/spdlog.h>

#include "service/flags.h"
#include "service/runner.h"
#include "service/settings.h"
#include "service/signals.h"

int main(int argc, char** argv) {
  // First, before any thread starts: every thread inherits the mask (signals.h).
  sluiced::BlockSignals();
  sluiced::Flags flags;
  if (auto exit_code = sluiced::ParseFlags(argc, argv, flags)) return *exit_code;
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  auto settings = sluiced::MakeSettings(flags);
  if (!settings.ok()) {
    spdlog::error("{}", settings.status().message());
    return sluiced::kExitUsage;
  }
  if (!flags.check_config.empty())
    return sluiced::CheckConfig(flags.check_config, settings->default_policy);
  sluiced::SignalWatcher signals;
  return sluiced::Run(*settings, signals);
}
