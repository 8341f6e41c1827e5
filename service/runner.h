// service/runner.h — sluiced's life once its settings are made: start (config, store,
// listeners), serve until SIGTERM or SIGINT (reloading on SIGHUP and on file changes),
// drain, stop. Every way start-up can fail is logged with why, and exits 1; a stop
// signal during start-up exits 0 without serving.
#pragma once

#include <string>

#include "service/settings.h"
#include "service/signals.h"
#include "sluice/decision.h"

namespace sluiced {

// The exit code of a start-up that failed: the config refused, a listener that cannot
// listen, an engine that cannot be made.
inline constexpr int kExitStartFailed = 1;

// --check-config: loads the config and builds every limiter of it as a start-up does, on
// the embedded store (no Redis, no listener), then prints one line per domain. Returns 0,
// or 1 with what is wrong on stderr.
int CheckConfig(const std::string& path, sluice::FailurePolicy default_policy);

// Starts, serves and stops; returns the exit code: 0 after a stop by signal (during
// start-up too), kExitStartFailed when start-up failed (logged).
int Run(const Settings& settings, SignalWatcher& signals);

}  // namespace sluiced
