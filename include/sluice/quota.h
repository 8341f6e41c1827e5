// sluice/quota.h — one rate shared among the clients of a bucket in proportion to their
// demand (the assignments of Envoy's Rate Limit Quota Service, docs/library.md).
//
//   auto shares = *client->MakeQuotaShares("api");
//   auto grant = shares.AssignSync({.id = "tenant:7", .client = stream_id,
//                                   .demand_milli = 40'000, .rate_milli = 100'000,
//                                   .hold = std::chrono::seconds(11)});
//   // grant->grant_milli: what this client may use now, in milli-requests per second.
//
// Each bucket (`id`) is one hash in the store, one field per client holding its demand,
// its grant and when the grant ends (the store's clock: now + hold), the sums over them,
// and an index of the expiries (a sorted set in the same slot). A call costs the store the
// same whatever the bucket's clients. Every call, atomically (one script): folds out at
// most 8 clients whose hold ran out (earliest first; until then a client counts as
// recorded, its grant against the rate), then gives the caller, with the reserve
// V = floor(rate / 64) and S = rate - V,
//   D = the recorded clients' demand, this one's included;
//   want = S * demand / D (0 when D is 0), and when D < S at most
//          headroom_percent * demand / 100 (room to grow, not the whole idle rate);
//   grant = floor(min(want, room)), never below 0, where room is
//           rate - the other clients' grants for a client that holds nothing (new, or
//           granted 0 last time): it may take the reserve;
//           S - the other clients' grants for the others, but at least half of what the
//           client held while the rate allows (a holder squeezed back to S after
//           newcomers took the reserve gives back at most half a renewal, never all);
// and records it. So at every instant the recorded grants of a bucket sum to at most its
// rate: a client that wants more than is left gets what is left, and gets its full share
// once the others' grants are renewed (each renewal moves toward the proportional split
// of S). The reserve is what a newcomer finds free when the holders want the whole rate:
// a lone client wanting everything is granted S, and the next one's first call is granted
// from V. With a rate lowered between calls, the grants made before keep their size until
// they are renewed or their hold ends: the sum is then at most the highest rate any live
// grant was made with.
// A bucket's clients count 160 + 2 * (client bytes) each against a budget of 32 MiB (at
// least 200,000 clients): a new client that does not fit gets 0, is not recorded, and the
// grant says `full`.
// A demand above 10^10 milli (10^7 requests per second) is recorded as 10^10.
// `release` gives the caller's grant back at once (a stream that ends). The bucket's keys
// expire with its latest grant: a bucket whose clients all stop calling leaves nothing.
// Rates are in milli-requests per second: 1 to 10^12 (10^9 requests per second).
//
// Thread-safety: QuotaShares is thread-safe and cheap to copy, like Limiter.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/client.h"
#include "sluice/status.h"

namespace sluice {

struct QuotaShareRequest {
  // The bucket: any bytes, not empty (escaped into the key as a limiter's id is).
  std::string id;
  // The client: 1-64 bytes, any bytes.
  std::string client;
  // The client's demand, milli-requests per second: 0 to 10^12.
  int64_t demand_milli = 0;
  // The bucket's global rate R, milli-requests per second: 1 to 10^12.
  int64_t rate_milli = 0;
  // How long the grant is held for the client without a newer call: 1 ms to 366 days.
  std::chrono::milliseconds hold{};
  // When the total demand is below R: at most this % of its demand. 100 to 10000.
  int64_t headroom_percent = 200;
  // Give the client's grant back (nothing granted). Only id and client are read.
  bool release = false;
};

// The bucket after the call. A released client, or a new one refused because the bucket
// is full, is not among its clients.
struct QuotaShareGrant {
  int64_t grant_milli = 0;         // what the client may use now
  int64_t total_demand_milli = 0;  // the recorded clients' demand, this one's included
  int64_t clients = 0;             // recorded clients of the bucket after this call
  int64_t assigned_milli = 0;      // the sum of their grants after this call (<= rate_milli)
  bool full = false;  // a new client refused: the bucket's budget holds no more clients
};

class QuotaShares {
 public:
  // Assigns (or, with request.release, gives back) the client's share of the bucket.
  // `done` is called exactly once with the result, on one of the client's I/O threads,
  // never inside Assign. Errors: InvalidArgument (an argument out of range, named in the
  // message), DeadlineExceeded (the store did not answer within ClientOptions::deadline),
  // Unavailable (the store cannot be reached), FailedPrecondition (in a child forked after
  // the Client was created). No failure policy applies: a store failure comes back as its
  // error, and the caller decides what the client may use meanwhile. A call that got
  // DeadlineExceeded may still have been recorded by the store; its grant then lasts
  // until the client's next call or its hold ends. `done` must neither block nor throw.
  void Assign(const QuotaShareRequest& request,
              std::function<void(StatusOr<QuotaShareGrant>)> done) const;

  // As Assign, blocking the calling thread for the result (at most the deadline plus
  // scheduling delay). FailedPrecondition when called on a client's I/O thread.
  StatusOr<QuotaShareGrant> AssignSync(const QuotaShareRequest& request) const;

  const std::string& name() const { return name_; }
  // The key of bucket `id`, or InvalidArgument for an empty id.
  StatusOr<std::string> KeyFor(std::string_view id) const;

 private:
  friend class Client;
  QuotaShares(std::shared_ptr<internal::ClientCore> core, std::string name);

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
  std::string key_head_;  // "<prefix>:{<name>:"
};

}  // namespace sluice
