// Reservations on a real redis-server through the public API, on Redis's own clock: a
// reserve holds its estimate like a check of that cost; a settle below it refunds the
// difference, above it debits it into the bounded debt; a second settle changes nothing;
// a reservation never settled stays charged until its window ends, and its key expires
// then (no reaper); a settle after that refunds nothing into the new window; a ref with a
// token Reserve never gave settles nothing. Every key keeps its expiry (the fixture checks
// the whole prefix after each test). The step-by-step decisions, every algorithm on a
// model clock, are held to the twin by tests/differential*_test.cc (reservations).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "redis/crc16.h"
#include "sluice/sluice.h"
#include "testing/redis_fixture.h"
#include "testing/status_matchers.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using testing::IsOk;

constexpr Algorithm kAll[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingLog, Algorithm::kTokenBucket, Algorithm::kGcra};

class ReservationRedis : public testing::RedisAlgorithmTest {
 protected:
  ReservationRedis() : RedisAlgorithmTest("rsvtest", testing::ScriptOptions()) {}

  // A limiter of `algorithm`, 10 per `window` (buckets: 10 tokens, 10 back per window).
  Limiter Make(Algorithm algorithm, milliseconds window = milliseconds(60'000)) {
    if (!client_) client_ = Connect();
    auto limiter = client_->MakeLimiter(std::string(AlgorithmName(algorithm)),
                                        {.algorithm = algorithm, .limit = 10, .window = window});
    EXPECT_THAT(limiter, IsOk());
    return *std::move(limiter);
  }

  // What is left for `id` now, spending nothing.
  static int64_t Remaining(const Limiter& limiter, const std::string& id) {
    const StatusOr<Decision> d = limiter.Peek(id);
    EXPECT_THAT(d, IsOk());
    return d.ok() ? d->remaining : -1;
  }

  std::string ReservationKey(const Limiter& limiter, const Reservation& r) {
    return *limiter.KeyFor(r.ref.substr(22)) + ":r:" + r.ref.substr(0, 22);
  }

  std::shared_ptr<Client> client_;
};

TEST_F(ReservationRedis, SettlingLessRefundsTheDifference) {
  for (Algorithm algorithm : kAll) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    const Limiter limiter = Make(algorithm);
    StatusOr<Reservation> r = limiter.Reserve("less", 6);
    ASSERT_THAT(r, IsOk());
    ASSERT_TRUE(r->decision.allowed) << r->decision.ToString();
    EXPECT_EQ(r->decision.remaining, 4);
    EXPECT_EQ(r->ref.size(), 22u + 4u);
    EXPECT_GT(Pttl(ReservationKey(limiter, *r)), 0) << "held, with its expiry";
    EXPECT_EQ(Remaining(limiter, "less"), 4) << "the estimate is charged while held";
    StatusOr<Decision> s = limiter.Settle(r->ref, 2);
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ(s->settle, SettleOutcome::kSettled);
    EXPECT_EQ(s->settled_cost, 2);
    EXPECT_TRUE(s->allowed);
    EXPECT_EQ(s->debt, 0);
    EXPECT_EQ(s->remaining, 8) << s->ToString();
    EXPECT_EQ(Remaining(limiter, "less"), 8) << "the refund is visible to every check";
    ASSERT_THAT(limiter.Reset("less"), IsOk());
  }
}

TEST_F(ReservationRedis, SettlingMoreDebitsTheDifferenceIntoTheBoundedDebt) {
  for (Algorithm algorithm : kAll) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    const Limiter limiter = Make(algorithm);
    StatusOr<Reservation> r = limiter.Reserve("more", 6);
    ASSERT_THAT(r, IsOk());
    ASSERT_TRUE(r->decision.allowed);
    StatusOr<Decision> s = limiter.Settle(r->ref, 13);
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ(s->settle, SettleOutcome::kSettled);
    EXPECT_FALSE(s->allowed) << s->ToString();
    EXPECT_EQ(s->debt, 3) << "13 against 10";
    EXPECT_GT(s->retry_after.count(), 0);
    const StatusOr<Decision> next = limiter.Check("more");
    ASSERT_THAT(next, IsOk());
    EXPECT_FALSE(next->allowed) << "refused until the debt is recovered";
    // Far over: the debt stops at the limit, as a Debit's does.
    r = limiter.Reserve("far", 1);
    ASSERT_THAT(r, IsOk());
    s = limiter.Settle(r->ref, kMaxLimit);
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ(s->debt, 10);
  }
}

TEST_F(ReservationRedis, ASecondSettleChangesNothing) {
  for (Algorithm algorithm : kAll) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    const Limiter limiter = Make(algorithm);
    StatusOr<Reservation> r = limiter.Reserve("twice", 8);
    ASSERT_THAT(r, IsOk());
    ASSERT_THAT(limiter.Settle(r->ref, 1), IsOk());
    EXPECT_EQ(Remaining(limiter, "twice"), 9);
    const StatusOr<Decision> again = limiter.Settle(r->ref, 0);
    ASSERT_THAT(again, IsOk());
    EXPECT_EQ(again->settle, SettleOutcome::kAlreadySettled);
    EXPECT_EQ(again->settled_cost, 1) << "the first settle's actual";
    EXPECT_EQ(Remaining(limiter, "twice"), 9) << "refunded once only";
  }
}

// The holder is killed: nothing settles. The estimate stays charged to the window's end,
// the reservation's key expires with it, and a late settle refunds nothing into the new
// window.
TEST_F(ReservationRedis, NeverSettledStaysChargedUntilTheWindowEnds) {
  const milliseconds window(400);
  const Limiter limiter = Make(Algorithm::kFixedWindow, window);
  StatusOr<Reservation> r = limiter.Reserve("killed", 10);
  ASSERT_THAT(r, IsOk());
  ASSERT_TRUE(r->decision.allowed);
  const std::string key = ReservationKey(limiter, *r);
  EXPECT_GT(Pttl(key), 0);
  // The counter's read first: time passing between the two reads only lowers the second.
  const int64_t counter_ttl = Pttl(*limiter.KeyFor("killed"));
  EXPECT_LE(Pttl(key), counter_ttl) << "it ends with the window";
  StatusOr<Decision> check = limiter.Check("killed");
  ASSERT_THAT(check, IsOk());
  EXPECT_FALSE(check->allowed) << "the estimate is charged";
  std::this_thread::sleep_for(check->retry_after + milliseconds(5));
  EXPECT_EQ(Pttl(key), -2) << "expired with the window: nothing to reap";
  check = limiter.Check("killed", {.cost = 3});  // the new window: 7 left
  ASSERT_THAT(check, IsOk());
  ASSERT_TRUE(check->allowed) << check->ToString();
  const StatusOr<Decision> late = limiter.Settle(r->ref, 0);
  ASSERT_THAT(late, IsOk());
  EXPECT_EQ(late->settle, SettleOutcome::kNotHeld);
  EXPECT_EQ(Remaining(limiter, "killed"), 7) << "no refund into the new window";
}

TEST_F(ReservationRedis, ARefusedReserveHoldsNothing) {
  const Limiter limiter = Make(Algorithm::kTokenBucket);
  StatusOr<Reservation> r = limiter.Reserve("full", 11);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->decision.allowed);
  EXPECT_EQ(r->decision.reason, RefusalReason::kCostExceedsLimit);
  EXPECT_TRUE(r->ref.empty());
  ASSERT_THAT(limiter.Check("full", {.cost = 8}), IsOk());
  r = limiter.Reserve("full", 3);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->decision.allowed);
  EXPECT_EQ(r->decision.reason, RefusalReason::kOverLimit);
  EXPECT_TRUE(r->ref.empty());
  EXPECT_EQ(Remaining(limiter, "full"), 2);
}

// The reservation script runs the algorithm without a block's gate, so a limiter with a
// block refuses to hold one rather than let a blocked id reserve.
TEST_F(ReservationRedis, ALimiterWithABlockRefusesToReserve) {
  if (!client_) client_ = Connect();
  auto limiter = client_->MakeLimiter("blocking", {.limit = 10, .window = milliseconds(60'000)},
                                      {.block_for = milliseconds(60'000)});
  ASSERT_THAT(limiter, IsOk());
  const StatusOr<Reservation> r = limiter->Reserve("id", 3);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(Remaining(*limiter, "id"), 10) << "nothing was charged";
}

// A guessed token (right form, never handed out) settles nothing; a garbled ref is refused
// before any store call.
TEST_F(ReservationRedis, AForgedOrGarbledRefSettlesNothing) {
  const Limiter limiter = Make(Algorithm::kSlidingLog);
  StatusOr<Reservation> r = limiter.Reserve("victim", 9);
  ASSERT_THAT(r, IsOk());
  std::string forged = r->ref;
  forged[0] = forged[0] == 'A' ? 'B' : 'A';
  StatusOr<Decision> s = limiter.Settle(forged, 0);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->settle, SettleOutcome::kNotHeld);
  EXPECT_EQ(Remaining(limiter, "victim"), 1);
  for (const std::string& garbled : {std::string("victim"), std::string(22, '*') + "victim",
                                     r->ref.substr(0, 22), std::string()}) {
    s = limiter.Settle(garbled, 0);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << garbled;
  }
  EXPECT_EQ(limiter.Settle(r->ref, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Remaining(limiter, "victim"), 1);
  s = limiter.Settle(r->ref, 0);  // the holder's own ref still works
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->settle, SettleOutcome::kSettled);
  EXPECT_EQ(Remaining(limiter, "victim"), 10);
}

// The reservation's key lies in its counter's hash slot (one script touches both on a Redis
// Cluster), plain and co-located alike; a co-located limiter reserves and settles too.
TEST_F(ReservationRedis, TheReservationKeyIsInItsCountersSlot) {
  client_ = Connect();
  auto colocated =
      client_->MakeLimiter("tenant_users", {.limit = 10, .window = milliseconds(60'000)},
                           {.colocate = LimiterOptions::Colocate{.separator = '/'}});
  ASSERT_THAT(colocated, IsOk());
  const Limiter plain = Make(Algorithm::kGcra);
  for (const Limiter* limiter : {&plain, static_cast<const Limiter*>(&*colocated)}) {
    StatusOr<Reservation> r = limiter->Reserve("acme/dana", 4);
    ASSERT_THAT(r, IsOk());
    ASSERT_TRUE(r->decision.allowed);
    const std::string key = ReservationKey(*limiter, *r);
    EXPECT_GT(Pttl(key), 0) << key;
    EXPECT_EQ(internal::KeySlot(key), internal::KeySlot(*limiter->KeyFor("acme/dana"))) << key;
    const StatusOr<Decision> s = limiter->Settle(r->ref, 4);
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ(s->settle, SettleOutcome::kSettled);
  }
}

// The ref is all a settle needs: another client (another process) settles it.
TEST_F(ReservationRedis, AnotherClientSettlesItAsync) {
  const Limiter limiter = Make(Algorithm::kGcra);
  std::promise<StatusOr<Reservation>> reserved;
  limiter.ReserveAsync("moved", 5, {}, [&](StatusOr<Reservation> r) { reserved.set_value(r); });
  const StatusOr<Reservation> r = reserved.get_future().get();
  ASSERT_THAT(r, IsOk());
  ASSERT_TRUE(r->decision.allowed);
  const std::shared_ptr<Client> other = Connect();
  auto elsewhere = other->MakeLimiter("gcra", limiter.limit());
  ASSERT_THAT(elsewhere, IsOk());
  std::promise<StatusOr<Decision>> settled;
  elsewhere->SettleAsync(r->ref, 1, {}, [&](StatusOr<Decision> d) { settled.set_value(d); });
  const StatusOr<Decision> s = settled.get_future().get();
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->settle, SettleOutcome::kSettled);
  EXPECT_EQ(Remaining(limiter, "moved"), 9);
}

}  // namespace
}  // namespace sluice
