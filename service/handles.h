// service/handles.h — what sluiced hands to callers to name something later: random
// handles (an RLQS stream's client id), lease handles and reservation handles.
//
// A lease handle names a lease that lives in Redis only (docs/design.md §4): the rule's
// limiter name (stable across reloads at the rule's path) and the library's reference to
// the lease (sluice::Lease::Detach: the id and the lease's member, whose 128-bit random
// token is the secret). Any sluiced with the same configuration can heartbeat or release
// it; no instance keeps anything of it. Handles are base64url without padding (safe in a
// URL path), at most kMaxLeaseHandleBytes; the id inside is the caller's own descriptor's.
//
// Thread-safety: free functions on values.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluiced {

// 128 bits from the kernel's CSPRNG (getrandom), as 22 base64url characters. A handle
// must not be derivable from the handles other callers were given (a seeded PRNG's
// outputs are: its state can be rebuilt from a few hundred of them).
std::string RandomHandle();

// 1 (version) + 1 (name size) + a 64-byte limiter name + 2 (reference size) + a
// 256-byte lease reference, as base64url: 434 characters, rounded up.
inline constexpr std::size_t kMaxLeaseHandleBytes = 440;

struct LeaseHandle {
  std::string limiter_name;
  std::string lease_ref;  // sluice::Lease::Detach's
};

// The handle of `lease_ref`, a lease of the limiter `limiter_name` (1-64 bytes).
std::string EncodeLeaseHandle(std::string_view limiter_name, std::string_view lease_ref);
// nullopt for anything EncodeLeaseHandle never writes: not base64url, too long, another
// version, a name or reference of the wrong size. (Whether the reference names a live
// lease is the store's to say.)
std::optional<LeaseHandle> DecodeLeaseHandle(std::string_view handle);

// A reservation handle names a reservation that lives in Redis only, as a lease handle
// names a lease: per limit it covers (one per descriptor a rate limit applies to), the
// rule's limiter name and the library's reference (sluice::Reservation::ref: a 128-bit
// random token, the secret, and the id). Any sluiced with the same configuration settles
// it. Base64url without padding, at most kMaxReservationHandleBytes.
inline constexpr std::size_t kMaxReservationHandleBytes = 2048;
inline constexpr std::size_t kMaxReservationLimits = 8;

struct ReservedLimit {
  std::string limiter_name;
  std::string reservation_ref;  // sluice::Reservation::ref
};

// The handle of `limits` (1 to kMaxReservationLimits, names of 1-64 bytes, refs of 1-65535
// bytes); nullopt when it would be longer than kMaxReservationHandleBytes.
std::optional<std::string> EncodeReservationHandle(const std::vector<ReservedLimit>& limits);
// nullopt for anything EncodeReservationHandle never writes (whether each reference names
// a reservation still held is the store's to say).
std::optional<std::vector<ReservedLimit>> DecodeReservationHandle(std::string_view handle);

}  // namespace sluiced
