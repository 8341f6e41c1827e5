// Concurrency leases (docs/design.md §4): the script contract of src/algo/concurrency.lua
// and its in-memory twin. The twin takes the same arguments and returns the same reply
// on an explicit lease set; the differential test holds both to identical replies.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::internal {

enum class LeaseOp : int {
  kAcquire = 0,     // prune expired leases, grant one if fewer than `limit` are live
  kHeartbeat = 1,   // move a live lease's expiry forward; never revive a gone one
  kRelease = 2,     // remove one lease (Redis: a plain ZREM); idempotent
  kReleaseAll = 3,  // remove every lease of the id; reports how many were live
  kList = 4,        // the live leases, by expiry
};

struct LeaseArgs {
  LeaseOp op = LeaseOp::kAcquire;
  std::string token;   // acquire: the new lease's random token; heartbeat/release: member
  int64_t limit = 0;   // acquire
  int64_t ttl_ms = 0;  // acquire, heartbeat
};

struct LeaseRow {
  std::string member;  // "<acquired at ms>:<token>"
  int64_t expires_at_ms = 0;
  bool operator==(const LeaseRow&) const = default;
};

struct LeaseReply {
  int code = 0;                // acquire: 1 granted, 0 refused; heartbeat: 1 live, 0 gone
  int64_t count = 0;           // acquire: live leases (after granting); release all: removed
  int64_t now_ms = 0;          // the store's clock when it decided
  int64_t expires_at_ms = 0;   // granted/heartbeat: the lease's expiry; refused: earliest
  std::vector<LeaseRow> rows;  // list
  bool operator==(const LeaseReply&) const = default;
};

// The member a lease granted at `now_ms` with `token` is stored under.
std::string LeaseMember(int64_t now_ms, const std::string& token);

// One id's leases: member → expiry ms (live while now < expiry).
struct LeaseSetState {
  std::map<std::string, int64_t> members;
  // The latest expiry of any member: the key's own expiry follows it.
  int64_t MaxExpiry() const;
  bool empty() const { return members.empty(); }
};

// The twin of concurrency.lua (and of ZREM for kRelease).
LeaseReply LeaseStep(LeaseSetState& state, const LeaseArgs& args, int64_t now_ms);

// The acquisition time (ms) of a lease member "<acquired at ms>:<token>"; nullopt when
// the member is not of that form.
std::optional<int64_t> LeaseAcquiredAt(std::string_view member);

}  // namespace sluice::internal
