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
  // Waiting acquires: take (or refresh) a ticket in the id's queue, or a lease once fewer
  // tickets are ahead than slots are free; leave the queue. Sent alone, never batched.
  kWait = 6,
  kLeave = 7,
};

struct LeaseArgs {
  LeaseOp op = LeaseOp::kAcquire;
  std::string token;          // acquire: the new lease's random token; heartbeat/release: member
  int64_t limit = 0;          // acquire
  int64_t ttl_ms = 0;         // acquire, heartbeat, wait
  int64_t ticket_ttl_ms = 0;  // wait: how long the ticket stays believable without a re-check
  int64_t max_waiters = 0;    // wait: the most tickets per id (a newcomer past it: code 3)
};

struct LeaseRow {
  std::string member;  // "<acquired at ms>:<token>"
  int64_t expires_at_ms = 0;
  bool operator==(const LeaseRow&) const = default;
};

struct LeaseReply {
  // acquire: 1 granted, 0 refused; heartbeat: 1 live, 0 gone; wait: 1 granted, 2 waiting
  // (the ticket taken or kept), 3 refused (the queue is full)
  int code = 0;
  // acquire: live leases (after granting); release all: removed; wait: the tickets ahead
  // of this one (code 2), in the queue (code 3); leave: the tickets left
  int64_t count = 0;
  int64_t now_ms = 0;  // the store's clock when it decided
  // granted/heartbeat: the lease's expiry; refused and waiting: the earliest live lease's
  // (0 when none)
  int64_t expires_at_ms = 0;
  std::vector<LeaseRow> rows;  // list
  bool operator==(const LeaseReply&) const = default;
};

// The member a lease granted at `now_ms` with `token` is stored under.
std::string LeaseMember(int64_t now_ms, const std::string& token);

// A waiter's place in an id's queue.
struct LeaseTicket {
  // Its arrival, the queue's order: the store ms it was taken times 1024, or one more
  // than the latest arrival in the queue when that is higher (strict arrival order).
  int64_t arrival = 0;
  int64_t expires_at_ms = 0;  // believable while now < expiry; moved at each re-check
  bool operator==(const LeaseTicket&) const = default;
};

// One id's leases: member → expiry ms (live while now < expiry), and its waiters' queue.
struct LeaseSetState {
  std::map<std::string, int64_t> members;
  std::map<std::string, LeaseTicket> tickets;  // token → ticket
  // The queue keys' expiry without the model clock's grace: the latest ticket expiry
  // written since the queue was last empty (0 when it is).
  int64_t queue_expires_at_ms = 0;
  // The latest expiry of any member: the lease set key's own expiry follows it.
  int64_t LeaseMaxExpiry() const;
  // When the whole state expires: the lease set's or the queue's expiry, the later.
  int64_t MaxExpiry() const;
  bool empty() const { return members.empty() && tickets.empty(); }
};

// The twin of concurrency.lua (and of ZREM for kRelease).
LeaseReply LeaseStep(LeaseSetState& state, const LeaseArgs& args, int64_t now_ms);

// The acquisition time (ms) of a lease member "<acquired at ms>:<token>"; nullopt when
// the member is not of that form.
std::optional<int64_t> LeaseAcquiredAt(std::string_view member);

}  // namespace sluice::internal
