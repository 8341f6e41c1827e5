// Reservations (Limiter::Reserve, Limiter::Settle) traced through reservation.lua on a
// real redis-server and through its twin (src/algo/reservation.h) on the embedded store,
// for every algorithm, with debits and checks mixed in: the same decisions, the same
// settle outcomes (settled, already settled, not held once expired, forged tokens).
#include <gtest/gtest.h>

#include "differential.h"

namespace sluice {
namespace {

class ReservationDifferential : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new testing::RedisServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static testing::RedisServer* server_;
};
testing::RedisServer* ReservationDifferential::server_ = nullptr;

TEST_F(ReservationDifferential, FixedWindow) {
  testing::RunReservationTraces(*server_, Algorithm::kFixedWindow);
}

TEST_F(ReservationDifferential, SlidingWindow) {
  testing::RunReservationTraces(*server_, Algorithm::kSlidingWindow);
}

TEST_F(ReservationDifferential, SlidingLog) {
  testing::RunReservationTraces(*server_, Algorithm::kSlidingLog, /*vary_window=*/false);
}

TEST_F(ReservationDifferential, TokenBucket) {
  testing::RunReservationTraces(*server_, Algorithm::kTokenBucket);
}

TEST_F(ReservationDifferential, Gcra) {
  testing::RunReservationTraces(*server_, Algorithm::kGcra);
}

}  // namespace
}  // namespace sluice
