// Lease and reservation handles (service/handles.h): what the encoders write decodes to
// what they were given, and nothing else decodes: every truncation, every extension,
// every single altered character that breaks the layout, another version, over-long input.
#include "service/handles.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace sluiced {
namespace {

const std::string kRef = "s1733400000123:AbCdEfGhIjKlMnOpQrStUv|account=dana";

TEST(LeaseHandle, RoundTrips) {
  for (const std::string& name :
       {std::string("a"), std::string("shop.streams.account"), std::string(64, 'n')}) {
    for (const std::string& ref : {kRef, std::string("o|x"), std::string(256, 'r')}) {
      const std::string handle = EncodeLeaseHandle(name, ref);
      EXPECT_LE(handle.size(), kMaxLeaseHandleBytes);
      EXPECT_EQ(handle.find_first_not_of(
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                std::string::npos);
      auto decoded = DecodeLeaseHandle(handle);
      ASSERT_TRUE(decoded) << handle;
      EXPECT_EQ(decoded->limiter_name, name);
      EXPECT_EQ(decoded->lease_ref, ref);
    }
  }
}

TEST(LeaseHandle, NothingButWhatWasWrittenDecodes) {
  const std::string handle = EncodeLeaseHandle("shop.streams.account", kRef);
  for (std::size_t n = 0; n < handle.size(); ++n)
    EXPECT_FALSE(DecodeLeaseHandle(handle.substr(0, n))) << "truncated to " << n;
  for (const char* tail : {"A", "AA", "AAA", "AAAA", "QUFB"})
    EXPECT_FALSE(DecodeLeaseHandle(handle + tail)) << "extended by " << tail;
  EXPECT_FALSE(DecodeLeaseHandle(std::string(kMaxLeaseHandleBytes + 1, 'A')));
  EXPECT_FALSE(DecodeLeaseHandle(handle + "="));            // padding is not written
  EXPECT_FALSE(DecodeLeaseHandle("B" + handle.substr(1)));  // version 4
  EXPECT_FALSE(DecodeLeaseHandle(EncodeLeaseHandle("", kRef)));
  EXPECT_FALSE(DecodeLeaseHandle(EncodeLeaseHandle(std::string(65, 'n'), kRef)));
  EXPECT_FALSE(DecodeLeaseHandle(EncodeLeaseHandle("n", std::string(257, 'r'))));
  for (const char bad : {'+', '/', '.', '%', ' ', '\0'}) {
    std::string altered = handle;
    altered[5] = bad;
    EXPECT_FALSE(DecodeLeaseHandle(altered)) << "with " << int(bad);
  }
}

TEST(ReservationHandle, RoundTripsAndNothingElseDecodes) {
  const std::vector<ReservedLimit> limits = {
      {"shop.ai.account", "AbCdEfGhIjKlMnOpQrStUvaccount=dana"},
      {std::string(64, 'n'), std::string(300, 'r')}};
  const std::optional<std::string> handle = EncodeReservationHandle(limits);
  ASSERT_TRUE(handle);
  auto decoded = DecodeReservationHandle(*handle);
  ASSERT_TRUE(decoded);
  ASSERT_EQ(decoded->size(), 2u);
  EXPECT_EQ((*decoded)[1].limiter_name, limits[1].limiter_name);
  EXPECT_EQ((*decoded)[1].reservation_ref, limits[1].reservation_ref);
  EXPECT_EQ((*decoded)[0].reservation_ref, limits[0].reservation_ref);
  for (std::size_t n = 0; n < handle->size(); ++n)
    EXPECT_FALSE(DecodeReservationHandle(handle->substr(0, n))) << "truncated to " << n;
  for (const char* tail : {"A", "AA", "AAA", "AAAA", "QUFB"})
    EXPECT_FALSE(DecodeReservationHandle(*handle + tail)) << "extended by " << tail;
  // A lease handle is not a reservation handle, nor the other way round.
  EXPECT_FALSE(DecodeReservationHandle(EncodeLeaseHandle("shop.ai.account", kRef)));
  EXPECT_FALSE(DecodeLeaseHandle(*handle));
  EXPECT_FALSE(EncodeReservationHandle({}));
  EXPECT_FALSE(EncodeReservationHandle({{"n", std::string(2000, 'r')}})) << "too long";
  EXPECT_FALSE(EncodeReservationHandle(std::vector<ReservedLimit>(9, limits[0])));
}

TEST(RandomHandle, Is128BitsOfBase64UrlAndNeverRepeats) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    const std::string h = RandomHandle();
    EXPECT_EQ(h.size(), 22u);
    EXPECT_TRUE(seen.insert(h).second);
  }
}

}  // namespace
}  // namespace sluiced
