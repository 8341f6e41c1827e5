// Blocks the calling thread until an asynchronous call completes: the synchronous calls
// (Check, Acquire, Release, ReleaseAll, ...) are their asynchronous twins plus this.
// On a client's I/O thread (a blocking call from a callback), which would wait for
// itself for ever, it returns FailedPrecondition at once without starting the call.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "core/process.h"
#include "sluice/status.h"

namespace sluice::internal {

// Calls `start(done)` and returns what `done` was called with (once, on any thread).
template <typename T, typename Start>
T WaitFor(Start start) {
  if (OnIoThread()) {
    return T(FailedPreconditionError(
        "a blocking sluice call was made on a sluice client's I/O thread (from a callback), "
        "where it would wait for itself: use the asynchronous call there"));
  }
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
