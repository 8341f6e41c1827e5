// service/signals.h — sluiced's signals: SIGTERM and SIGINT stop it, SIGHUP reloads its
// config. BlockSignals() runs first thing in main, before any thread is started, so every
// thread inherits the mask: none of these signals is ever delivered asynchronously, and
// none can kill sluiced by its default action while it starts (SIGHUP's would, and
// systemd's Restart=on-failure takes a death by SIGHUP for a clean stop). A thread of
// SignalWatcher's own takes them (sigtimedwait) and records them for the start-up and the
// main loop to act on.
//
// Thread-safety: SignalWatcher's accessors from any thread.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace sluiced {

// Blocks SIGHUP, SIGTERM and SIGINT in the calling thread (and so in every thread it
// starts after) and ignores SIGPIPE (a peer's closed socket is an error code, not a death).
void BlockSignals();

class SignalWatcher {
 public:
  // Starts the thread that takes the signals BlockSignals blocked.
  SignalWatcher();
  // Stops that thread (within 100 ms) and joins it.
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // SIGTERMs and SIGINTs received so far (a second one cuts a drain short).
  int stops() const { return stops_.load(); }
  // The first of them (0 before any).
  int stop_signal() const { return stop_signal_.load(); }
  // True once for the SIGHUPs received since the last call (several are one reload).
  bool TakeReload() { return reload_.exchange(false); }
  // Waits until a stop comes or `timeout` passes; true when one came.
  bool WaitForStop(std::chrono::milliseconds timeout);

 private:
  void Run();

  std::atomic<bool> done_{false};
  std::atomic<int> stops_{0};
  std::atomic<int> stop_signal_{0};
  std::atomic<bool> reload_{false};
  std::mutex mu_;  // with stopped_, for WaitForStop
  std::condition_variable stopped_;
  std::thread thread_;
};

}  // namespace sluiced
