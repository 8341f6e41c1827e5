// service/h2_budget.h — the byte budgets of sluiced's HTTP/2 gRPC server (h2_server.h): a
// count of bytes held and its bound, one per connection and one for the whole server, so
// that many connections cannot multiply what one may hold. What is counted: the state that
// asynchronous streaming calls keep (StreamWriter::Charge: RLQS buckets and reports) and
// the response bytes they have queued and HTTP/2 has not taken yet.
//
// Thread-safety: every member is thread-safe (atomics); a charge that goes over either
// bound takes nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

namespace sluiced {

class ByteBudget {
 public:
  ByteBudget() = default;
  explicit ByteBudget(std::size_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Adds `n` when the total stays within the bound; false (nothing added) otherwise.
  bool TryCharge(std::size_t n) {
    const std::size_t before = used_.fetch_add(n, std::memory_order_relaxed);
    if (before + n <= limit_) return true;
    used_.fetch_sub(n, std::memory_order_relaxed);
    return false;
  }
  // Adds `n` whatever the bound (what is held already and must be counted).
  void Charge(std::size_t n) { used_.fetch_add(n, std::memory_order_relaxed); }
  void Uncharge(std::size_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }
  // Whether `n` more would stay within the bound.
  bool Fits(std::size_t n) const { return used() + n <= limit_; }
  std::size_t used() const { return used_.load(std::memory_order_relaxed); }
  std::size_t limit() const { return limit_; }
  // Before the budget is shared with other threads.
  void set_limit(std::size_t limit) { limit_ = limit; }

 private:
  std::size_t limit_ = 0;
  std::atomic<std::size_t> used_{0};
};

// Charges `n` to a connection's budget and the server's together, or to neither.
inline bool TryChargeBoth(ByteBudget& connection, ByteBudget& server, std::size_t n) {
  if (!connection.TryCharge(n)) return false;
  if (server.TryCharge(n)) return true;
  connection.Uncharge(n);
  return false;
}

// "N bytes per connection, M per server" for a refusal's message.
inline std::string BudgetText(const ByteBudget& connection, const ByteBudget& server) {
  return std::to_string(connection.limit()) + " bytes per connection, " +
         std::to_string(server.limit()) + " per server";
}

}  // namespace sluiced
