// Blocks the calling thread until an asynchronous call completes: the synchronous calls
// (Check, Acquire, Release, ReleaseAll, ...) are their asynchronous twins plus this.
// Must not run on one of the client's I/O threads, which would wait for itself.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

namespace sluice::internal {

// Calls `start(done)` and returns what `done` was called with (once, on any thread).
template <typename T, typename Start>
T WaitFor(Start start) {
  struct Waiter {
    std::atomic<bool> done{false};
    std::optional<T> result;
  };
  auto waiter = std::make_shared<Waiter>();
  start(std::function<void(T)>([waiter](T result) {
    waiter->result.emplace(std::move(result));
    waiter->done.store(true, std::memory_order_release);
    waiter->done.notify_one();
  }));
  while (!waiter->done.load(std::memory_order_acquire)) waiter->done.wait(false);
  return std::move(*waiter->result);
}

}  // namespace sluice::internal
