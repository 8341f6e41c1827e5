#include "service/console_sessions.h"

#include <algorithm>

#include "service/handles.h"
#include "service/routes.h"

namespace sluiced {

using Clock = std::chrono::steady_clock;

ConsoleSessions::ConsoleSessions(ConsoleSessionOptions options) : options_(std::move(options)) {}

Clock::time_point ConsoleSessions::ExpiresAt(const Entry& e) const {
  return std::min(e.last_used + options_.idle, e.created + options_.absolute);
}

void ConsoleSessions::DropExpired(Clock::time_point now) {
  std::erase_if(sessions_, [&](const auto& kv) { return ExpiresAt(kv.second) <= now; });
}

ConsoleSession ConsoleSessions::Create(std::string actor) {
  const Clock::time_point now = options_.now();
  Entry e{.session = {.id = RandomHandle() + RandomHandle(),
                      .csrf = RandomHandle() + RandomHandle(),
                      .actor = std::move(actor)},
          .created = now,
          .last_used = now};
  e.session.expires = ExpiresAt(e);
  std::lock_guard lock(mu_);
  DropExpired(now);
  while (sessions_.size() >= options_.max_sessions && !sessions_.empty()) {
    auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](auto& a, auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    sessions_.erase(oldest);
  }
  ConsoleSession out = e.session;
  sessions_.emplace(out.id, std::move(e));
  return out;
}

std::optional<ConsoleSession> ConsoleSessions::Find(const std::string& id) {
  const Clock::time_point now = options_.now();
  std::lock_guard lock(mu_);
  DropExpired(now);
  // A map lookup compares bytes in order and stops at the first difference; the ids are
  // 256 random bits, but the match is confirmed in constant time all the same.
  auto it = sessions_.find(id);
  if (it == sessions_.end() || !ConstantTimeEquals(it->first, id)) return std::nullopt;
  it->second.last_used = now;
  it->second.session.expires = ExpiresAt(it->second);
  return it->second.session;
}

void ConsoleSessions::Remove(const std::string& id) {
  std::lock_guard lock(mu_);
  sessions_.erase(id);
}

std::size_t ConsoleSessions::size() {
  std::lock_guard lock(mu_);
  DropExpired(options_.now());
  return sessions_.size();
}

std::chrono::milliseconds ConsoleSessions::SignInClosedFor() {
  const Clock::time_point now = options_.now();
  std::lock_guard lock(mu_);
  if (closed_until_ <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(closed_until_ - now);
}

void ConsoleSessions::SignInFailed() {
  const Clock::time_point now = options_.now();
  std::lock_guard lock(mu_);
  auto wait = options_.backoff_first;
  for (int i = 0; i < failures_ && wait < options_.backoff_max; ++i) wait *= 2;
  failures_ = std::min(failures_ + 1, 30);
  closed_until_ = now + std::min(wait, options_.backoff_max);
}

void ConsoleSessions::SignInSucceeded() {
  std::lock_guard lock(mu_);
  failures_ = 0;
}

}  // namespace sluiced
