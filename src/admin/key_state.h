// What an operator sees of one stored value: each algorithm's state, decoded by the
// decoder beside its script and twin (src/algo/<name>.h), described as KeyState fields
// (sluice/admin.h). No stored format is known here: the formats live with their
// scripts, and the differential traces hold each decoder to what its script writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "redis/reply.h"
#include "sluice/admin.h"

namespace sluice::internal {

// The string value of a `fw2`, `fw`, `sw`, `tb` or `gcra` key (`suffix`), at `now_ms` on the
// Redis clock, into `state` (fields, used, ends_at_ms; or `problem` when the value is
// not sluice's). A `fw2` key's window ends with the key: `state.ttl_ms` must hold its
// PTTL, read with the value.
void DescribeStringValue(std::string_view suffix, std::string_view value, int64_t now_ms,
                         KeyState& state);

// A sliding log from its oldest and newest entries (ZRANGE 0 0 / -1 -1 WITHSCORES);
// state.members must hold ZCARD.
void DescribeSlidingLog(const Reply& oldest, const Reply& newest, KeyState& state);

// A lease set from its first members with scores (ZRANGE 0 n WITHSCORES) and its newest
// (ZRANGE -1 -1 WITHSCORES); state.members must hold ZCARD.
void DescribeLeases(const Reply& range, const Reply& newest, int64_t now_ms, KeyState& state);

// A lease set's per-minute history (`ch`, HGETALL's reply; concurrency.lua's History
// comment has the format): one field per minute of the last 60 that has one, oldest first,
// named `max_live_at_<minute start ms>`, valued the most live leases seen in it; `used` is
// the highest of them ("most live leases in a minute").
void DescribeLeaseHistory(const Reply& all, int64_t now_ms, KeyState& state);

// A sorted-set score as Redis returns it (RESP2: a bulk string), floored to an integer.
std::optional<int64_t> ParseScore(const Reply& reply);

// When the state of a key with no expiry is over, from what the scan batch read of it
// (`value`: a string's bytes, or a sorted set's highest score), for `sluice repair`'s
// TTL: the exact end (fw, tb, gcra, cc: `is_bound` false) or an upper bound (sw, sl,
// fw2: true). nullopt when the value does not say.
std::optional<int64_t> StateEndsAt(std::string_view suffix, const Reply& value, int64_t now_ms,
                                   bool& is_bound);

}  // namespace sluice::internal
