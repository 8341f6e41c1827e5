// service/console_sessions.h — the support console's sign-in state, kept by one sluiced
// (docs/operating.md, The support console): sessions, each with its CSRF token, and the
// backoff of wrong sign-in tokens. Nothing here is in the store: a session guards a user
// interface on one admin listener, never a slot or a counter, so losing them all (a
// restart) costs a sign-in and nothing else.
//
// Thread-safety: every member function may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace sluiced {

struct ConsoleSessionOptions {
  // A session unused for this long is over. Default: 30 min.
  std::chrono::seconds idle{30 * 60};
  // A session is over this long after sign-in, used or not. Default: 12 h.
  std::chrono::seconds absolute{12 * 60 * 60};
  // Sessions kept at once; a sign-in past it ends the least recently used one. Default: 64.
  std::size_t max_sessions = 64;
  // The first wrong sign-in token closes sign-in for this long; each further one (before a
  // right one) doubles it, up to backoff_max. Default: 1 s, 60 s.
  std::chrono::milliseconds backoff_first{1000};
  std::chrono::milliseconds backoff_max{60000};
  // The time (tests pass a fake one). Default: the steady clock.
  std::function<std::chrono::steady_clock::time_point()> now = [] {
    return std::chrono::steady_clock::now();
  };
};

struct ConsoleSession {
  std::string id;     // the cookie's value: 128 bits of the kernel's CSPRNG
  std::string csrf;   // the X-CSRF-Token every state-changing call carries: 128 more bits
  std::string actor;  // who signed in, as they named themselves (the audit log's actor)
  std::chrono::steady_clock::time_point expires;  // whichever comes first: idle or absolute
};

class ConsoleSessions {
 public:
  explicit ConsoleSessions(ConsoleSessionOptions options = {});

  // A new session for `actor` (the token was right: the caller checked it).
  ConsoleSession Create(std::string actor);
  // The live session `id` names (its idle time starts again), or nullopt: unknown, over,
  // or signed out. Compares in time independent of the id's bytes.
  std::optional<ConsoleSession> Find(const std::string& id);
  void Remove(const std::string& id);
  std::size_t size();

  // How long sign-in stays closed (0: open). A sign-in while closed is refused unread.
  std::chrono::milliseconds SignInClosedFor();
  // A wrong token: closes sign-in for the next backoff step. A right one opens it again.
  void SignInFailed();
  void SignInSucceeded();

 private:
  struct Entry {
    ConsoleSession session;
    std::chrono::steady_clock::time_point created, last_used;
  };
  void DropExpired(std::chrono::steady_clock::time_point now);  // holds mu_
  std::chrono::steady_clock::time_point ExpiresAt(const Entry& e) const;

  ConsoleSessionOptions options_;
  std::mutex mu_;
  std::map<std::string, Entry> sessions_;  // by id
  int failures_ = 0;
  std::chrono::steady_clock::time_point closed_until_{};
};

}  // namespace sluiced
