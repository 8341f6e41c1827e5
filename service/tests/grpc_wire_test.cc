// gRPC's wire format (service/grpc_wire.h): message prefixes, status trailers,
// grpc-timeout and content-type, byte by byte.
#include "service/grpc_wire.h"

#include <gtest/gtest.h>

namespace sluiced {
namespace {

using namespace std::chrono_literals;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (const int b : bytes) out += static_cast<char>(b);
  return out;
}

TEST(GrpcWire, AppendedMessageHasItsPrefix) {
  std::string out = "before";
  AppendGrpcMessage(out, "");
  AppendGrpcMessage(out, std::string(300, 'x'));
  EXPECT_EQ(out.substr(0, 11), "before" + Bytes({0, 0, 0, 0, 0}));
  EXPECT_EQ(out.substr(11, 5), Bytes({0, 0, 0, 1, 44}));
  EXPECT_EQ(out.size(), 6 + 5 + 5 + 300u);
}

TEST(GrpcWire, PrefixIsReadBigEndianOnceComplete) {
  EXPECT_FALSE(ReadGrpcPrefix(""));
  EXPECT_FALSE(ReadGrpcPrefix(Bytes({0, 0, 0, 1})));
  const auto p = ReadGrpcPrefix(Bytes({0, 1, 2, 3, 4, 'm'}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->flags, 0);
  EXPECT_EQ(p->length, 0x01020304u);
  const auto max = ReadGrpcPrefix(Bytes({0xff, 0xff, 0xff, 0xff, 0xff}));
  ASSERT_TRUE(max);
  EXPECT_EQ(max->flags, 0xff);
  EXPECT_EQ(max->length, 0xffffffffu);
  // What AppendGrpcMessage writes reads back.
  std::string framed;
  AppendGrpcMessage(framed, std::string(70000, 'x'));
  EXPECT_EQ(ReadGrpcPrefix(framed)->length, 70000u);
}

TEST(GrpcWire, CompressedMessagesAreUnimplemented) {
  const auto refused = CheckGrpcPrefix({.flags = 1, .length = 3}, 100);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, GrpcCode::kUnimplemented);
  EXPECT_EQ(refused->message,
            "compressed messages are not supported (grpc-encoding identity only)");
}

TEST(GrpcWire, OtherFlagsAreMalformed) {
  for (const uint8_t flags : {2, 3, 0x80, 0xff}) {
    const auto refused = CheckGrpcPrefix({.flags = flags, .length = 0}, 100);
    ASSERT_TRUE(refused) << int{flags};
    EXPECT_EQ(refused->code, GrpcCode::kInvalidArgument);
    EXPECT_EQ(refused->message,
              "malformed gRPC message prefix (flags byte " + std::to_string(flags) + ")");
  }
}

TEST(GrpcWire, MessagesUpToTheLimitAreTaken) {
  EXPECT_FALSE(CheckGrpcPrefix({.flags = 0, .length = 0}, 100));
  EXPECT_FALSE(CheckGrpcPrefix({.flags = 0, .length = 100}, 100));
  const auto over = CheckGrpcPrefix({.flags = 0, .length = 101}, 100);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->code, GrpcCode::kResourceExhausted);
  EXPECT_EQ(over->message, "request message of 101 bytes is larger than the 100-byte limit");
  const auto largest = CheckGrpcPrefix({.flags = 0, .length = 0xffffffff}, 1 << 20);
  ASSERT_TRUE(largest);
  EXPECT_EQ(largest->message,
            "request message of 4294967295 bytes is larger than the 1048576-byte limit");
}

TEST(GrpcWire, PercentEncodingKeepsPrintableAsciiButPercent) {
  EXPECT_EQ(PercentEncode(""), "");
  EXPECT_EQ(PercentEncode("plain text ~!"), "plain text ~!");
  EXPECT_EQ(PercentEncode("100%"), "100%25");
  EXPECT_EQ(PercentEncode("%25"), "%2525");  // not taken for an encoding already done
  EXPECT_EQ(PercentEncode("a\nb%\xff"), "a%0Ab%25%FF");
  EXPECT_EQ(PercentEncode(std::string("\0\x1f\x7f", 3)), "%00%1F%7F");
  // Non-ASCII text is encoded byte by byte (its UTF-8).
  EXPECT_EQ(PercentEncode("caf\xc3\xa9 \xe2\x82\xac"), "caf%C3%A9 %E2%82%AC");
}

TEST(GrpcWire, StatusFieldsAreDecimalCodeAndEncodedMessage) {
  const GrpcStatusFields ok = EncodeGrpcStatus({});
  EXPECT_EQ(ok.code, "0");
  EXPECT_EQ(ok.message, "");
  const GrpcStatusFields failed =
      EncodeGrpcStatus({GrpcCode::kUnavailable, "shutting down: 100% \xc3\xa9"});
  EXPECT_EQ(failed.code, "14");
  EXPECT_EQ(failed.message, "shutting down: 100%25 %C3%A9");
}

TEST(GrpcWire, TimeoutUnits) {
  std::chrono::nanoseconds t{};
  ASSERT_TRUE(ParseGrpcTimeout("2H", t));
  EXPECT_EQ(t, 2h);
  ASSERT_TRUE(ParseGrpcTimeout("3M", t));
  EXPECT_EQ(t, 3min);
  ASSERT_TRUE(ParseGrpcTimeout("4S", t));
  EXPECT_EQ(t, 4s);
  ASSERT_TRUE(ParseGrpcTimeout("50m", t));
  EXPECT_EQ(t, 50ms);
  ASSERT_TRUE(ParseGrpcTimeout("1500u", t));
  EXPECT_EQ(t, 1500us);
  ASSERT_TRUE(ParseGrpcTimeout("7n", t));
  EXPECT_EQ(t, 7ns);
  ASSERT_TRUE(ParseGrpcTimeout("00000000S", t));  // eight digits, leading zeros
  EXPECT_EQ(t, 0ns);
  ASSERT_TRUE(ParseGrpcTimeout("99999999S", t));
  EXPECT_EQ(t, 99999999s);
}

TEST(GrpcWire, TimeoutsTooLongForInt64NanosecondsAreCapped) {
  constexpr std::chrono::nanoseconds kCap{1'000'000'000'000'000'000};
  std::chrono::nanoseconds t{};
  ASSERT_TRUE(ParseGrpcTimeout("99999999H", t));  // about 11400 years
  EXPECT_EQ(t, kCap);
  ASSERT_TRUE(ParseGrpcTimeout("99999999M", t));
  EXPECT_EQ(t, kCap);
  ASSERT_TRUE(ParseGrpcTimeout("277777H", t));  // just under the cap
  EXPECT_EQ(t, 277777h);
  ASSERT_TRUE(ParseGrpcTimeout("277778H", t));  // just over
  EXPECT_EQ(t, kCap);
}

TEST(GrpcWire, MalformedTimeouts) {
  std::chrono::nanoseconds t{};
  for (const char* bad : {"", "m", "S", "5", "5x", "5h", "5s", "123456789S", "-5S", "+5S", " 5S",
                          "5S ", "5.5S", "0x5S"})
    EXPECT_FALSE(ParseGrpcTimeout(bad, t)) << '"' << bad << '"';
}

TEST(GrpcWire, ContentType) {
  EXPECT_TRUE(IsGrpcContentType("application/grpc"));
  EXPECT_TRUE(IsGrpcContentType("application/grpc+proto"));
  EXPECT_TRUE(IsGrpcContentType("application/grpc;charset=utf-8"));
  EXPECT_FALSE(IsGrpcContentType(""));
  EXPECT_FALSE(IsGrpcContentType("application/grp"));
  EXPECT_FALSE(IsGrpcContentType("application/grpc-web"));
  EXPECT_FALSE(IsGrpcContentType("application/grpcx"));
  EXPECT_FALSE(IsGrpcContentType("text/plain"));
  EXPECT_FALSE(IsGrpcContentType("Application/grpc"));
}

}  // namespace
}  // namespace sluiced
