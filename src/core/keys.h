// Key layout (docs/design.md §2): `<prefix>:{<limiter>:<id>}:<suffix>`.
//
// The suffix names the algorithm (fw2, sw, sl, tb, gcra; cc for concurrency leases; qs for
// a QuotaShares bucket; fw for fixed_window's earlier format, read by the admin API only),
// so a name used by a limiter and a QuotaShares never shares a key, and a limiter whose
// algorithm is changed in a config starts on a fresh key instead of reading another algorithm's
// state (and Redis answering WRONGTYPE); the old key expires on its own.
// The hash tag holds the limiter name and the id, so every key of one decision sits in
// one cluster slot. Limiter names and prefixes are restricted to [A-Za-z0-9_.-]; ids may
// be any bytes and are encoded:
//   - bytes outside the printable ASCII range and the bytes % { } # are written %XX, so
//     no id can open or close the hash tag and the encoding is reversible;
//   - an encoded id longer than kMaxEncodedIdBytes becomes `#` + SHA-256 hex of the raw
//     id. `#` never appears in an encoded id, so a hashed id cannot equal an encoded one.
// Two different ids therefore never share a key, and keys stay bounded in length.
//
// Co-location (docs/design.md §2 and §6; LimiterOptions::colocate): a limiter that names a
// separator writes `<prefix>:{@<tag>}:<limiter>:<id>:<suffix>`, tag and id encoded as
// above, where the tag is the part of the id before its first separator (the whole id
// when it has none, or when that part is empty). The hash tag is then `@<tag>`, so the
// keys of every co-located limiter whose ids share that part lie in one slot; the key
// still holds the limiter and the whole id, so it stays unique per limiter and id, and
// `@` (never a limiter name's first byte) keeps both forms apart.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/limits.h"
#include "sluice/status.h"

namespace sluice::internal {

inline constexpr std::size_t kMaxEncodedIdBytes = 128;
inline constexpr std::size_t kMaxNameBytes = 64;

// OK when `name` is 1–64 bytes of [A-Za-z0-9_.-]; InvalidArgument naming `what` otherwise.
Status ValidateName(std::string_view what, std::string_view name);

// Whether `c` may appear in a limiter name or prefix ([A-Za-z0-9_.-]).
bool IsNameByte(unsigned char c);

// The id as it appears inside the hash tag (see above). Precondition: !id.empty().
std::string EncodeId(std::string_view id);

// EncodeId's inverse, for keys read back from Redis (the admin API): true and `id` set
// for an encoded id EncodeId can write; true and `id` reset for a hashed id (`#` + 64
// lower-case hex digits: the raw id is gone); false for anything EncodeId never writes
// (an escape of a byte that needs none, lower-case escape digits, a byte that needs one
// unescaped, too long), so a key that is not sluice's is not taken for one.
bool DecodeId(std::string_view encoded, std::optional<std::string>& id);

// "<prefix>:{<limiter>:" — the part shared by all keys of one limiter.
std::string KeyHead(std::string_view prefix, std::string_view limiter);

// "fw2", "sw", "sl", "tb", "gcra".
std::string_view AlgorithmSuffix(Algorithm algorithm);

// The suffix of a concurrency limiter's lease set.
inline constexpr std::string_view kLeaseSuffix = "cc";

// The suffixes of a lease set's queue of waiting acquires (src/algo/concurrency.lua,
// "Waiting acquires"): the lease set's key plus "w" (tickets by arrival) and "x" (by
// expiry), two sorted sets in its slot. Not among kKeySuffixes (Inspect reads the lease
// set); the admin API takes them for sluice's, so audit and repair count them.
inline constexpr std::string_view kLeaseQueueSuffix = "ccw";
inline constexpr std::string_view kLeaseTicketSuffix = "ccx";

// The suffix of a QuotaShares bucket (sluice/quota.h): one hash of its clients' grants.
// Not among kKeySuffixes (an id's keys, which Inspect reads): it is no limiter's state. The
// admin API takes it for sluice's (ParseKeyName: a hash), so audit and repair count it.
inline constexpr std::string_view kQuotaSuffix = "qs";
// The suffix of a QuotaShares bucket's expiry index: a sorted set beside the hash, in the
// same slot (the same hash tag); the admin API takes it for sluice's (a sorted set).
inline constexpr std::string_view kQuotaIndexSuffix = "qx";

// The runtime overrides of one limiter (src/algo/overrides.lua): one hash,
// "<prefix>:{overrides}:<limiter>". Every limiter's shares the hash tag `{overrides}` (which
// no limiter's key has: theirs hold a ':'), so one script call reads all of a client's.
// The admin API takes it for sluice's (ParseKeyName: suffix kOverridesSuffix, a hash).
inline constexpr std::string_view kOverridesSuffix = "ovr";
std::string MakeOverridesKey(std::string_view prefix, std::string_view limiter);

// The suffix fixed_window wrote before its v2 format ("<count>:<window end ms>", the
// window end in the value): no release writes it any more; the admin API still reads
// such keys until they expire (docs/design.md §2).
inline constexpr std::string_view kFixedWindowV1Suffix = "fw";

// The suffix of a concurrency limiter's per-minute history of live leases: a hash beside
// the lease set, written by concurrency.lua (its History comment has the format).
inline constexpr std::string_view kLeaseHistorySuffix = "ch";

// What a block (LimiterOptions::block_for, src/algo/block.lua) adds to its algorithm's
// key: `<key>.blk`, a string holding the block's end, in the same hash slot.
inline constexpr std::string_view kBlockSuffix = ".blk";
// A reservation (Limiter::Reserve, src/algo/reservation.lua) is its counter's key, then
// kReservationInfix and a token of kReservationTokenChars base64url characters (128 random
// bits): a string, written with its expiry. The admin API names it by its counter's suffix
// and kReservationSuffix (`fw2:r`), the token left out.
inline constexpr std::string_view kReservationInfix = ":r:";
inline constexpr std::size_t kReservationTokenChars = 22;
inline constexpr std::string_view kReservationSuffix = ":r";
// Every suffix of an id's keys: the algorithms' (AlgorithmSuffix), the lease set's and its
// history's, fixed_window's earlier one (read by the admin API, never written) and the
// algorithms' blocks.
inline constexpr std::string_view kKeySuffixes[] = {
    "fw2", "sw",      "sl",     "tb",     "gcra",   "cc",      "ch",
    "fw",  "fw2.blk", "sw.blk", "sl.blk", "tb.blk", "gcra.blk"};

// KeyHead + EncodeId(id) + "}:" + kLeaseSuffix.
std::string MakeLeaseKey(std::string_view key_head, std::string_view id);

// KeyHead + EncodeId(id) + "}:" + kQuotaSuffix.
std::string MakeQuotaKey(std::string_view key_head, std::string_view id);

// KeyHead + EncodeId(id) + "}:" + kQuotaIndexSuffix.
std::string MakeQuotaIndexKey(std::string_view key_head, std::string_view id);

// KeyHead + EncodeId(id) + "}:" + AlgorithmSuffix(algorithm).
std::string MakeKey(std::string_view key_head, std::string_view id, Algorithm algorithm);

// Whether `c` may separate a co-location tag from the rest of an id: printable ASCII
// other than a letter, a digit or a space.
bool IsSlotTagSeparator(unsigned char c);

// The co-location tag of `id` (see above). Precondition: !id.empty().
std::string_view SlotTagOf(std::string_view id, char separator);

// "<prefix>:{@" + EncodeId(SlotTagOf(id, separator)) + "}:<limiter>:" + EncodeId(id) + ":" +
// suffix. Preconditions: !id.empty(), IsSlotTagSeparator(separator).
std::string MakeColocatedKey(std::string_view prefix, std::string_view limiter, char separator,
                             std::string_view id, std::string_view suffix);
// The same with the tag given (the admin API reads every tag an id can have).
std::string MakeTaggedKey(std::string_view prefix, std::string_view limiter, std::string_view tag,
                          std::string_view id, std::string_view suffix);

}  // namespace sluice::internal
