#include "core/process.h"

#include <pthread.h>

#include <atomic>

namespace sluice::internal {
namespace {

std::atomic<uint64_t> g_fork_generation{0};
[[maybe_unused]] const int g_fork_hook = ::pthread_atfork(
    nullptr, nullptr, [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });

thread_local bool t_io_thread = false;

}  // namespace

uint64_t ForkGeneration() {
  return g_fork_generation.load(std::memory_order_relaxed);
}

bool OnIoThread() {
  return t_io_thread;
}

void MarkIoThread() {
  t_io_thread = true;
}

}  // namespace sluice::internal
