#include "service/signals.h"

#include <ctime>

namespace sluiced {
namespace {

sigset_t Handled() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockSignals() {
  const sigset_t set = Handled();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

SignalWatcher::SignalWatcher() : thread_([this] { Run(); }) {}

SignalWatcher::~SignalWatcher() {
  done_.store(true);
  thread_.join();
}

bool SignalWatcher::WaitForStop(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return stopped_.wait_for(lock, timeout, [this] { return stops_.load() > 0; });
}

void SignalWatcher::Run() {
  const sigset_t set = Handled();
  // A bounded wait, so that the destructor's done_ is seen (a signal sent to this thread
  // to wake it would be one more signal to tell apart from the operator's).
  const timespec poll{.tv_sec = 0, .tv_nsec = 100'000'000};
  while (!done_.load()) {
    const int sig = sigtimedwait(&set, nullptr, &poll);
    if (sig == SIGHUP) {
      reload_.store(true);
    } else if (sig == SIGTERM || sig == SIGINT) {
      int none = 0;
      stop_signal_.compare_exchange_strong(none, sig);
      {
        std::lock_guard lock(mu_);
        stops_.fetch_add(1);
      }
      stopped_.notify_all();
    }
  }
}

}  // namespace sluiced
