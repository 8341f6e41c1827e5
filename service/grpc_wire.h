// service/grpc_wire.h — gRPC's wire format over HTTP/2, without the HTTP/2: the status
// codes, the 5-byte length prefix of each message, the `grpc-status` / `grpc-message`
// trailer values and the `grpc-timeout` and `content-type` request headers
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md). Pure functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluiced {

// gRPC's status codes (the subset sluiced answers with).
enum class GrpcCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

struct GrpcStatus {
  GrpcCode code = GrpcCode::kOk;
  std::string message;
  bool ok() const { return code == GrpcCode::kOk; }
};

// Each message is preceded by a flags byte (1: compressed) and its length, 4 bytes
// big-endian.
inline constexpr std::size_t kGrpcPrefixBytes = 5;

struct GrpcPrefix {
  uint8_t flags = 0;
  uint32_t length = 0;
};

// Appends `message` with its prefix (uncompressed).
void AppendGrpcMessage(std::string& out, std::string_view message);
// The prefix at the start of `bytes`; nullopt when fewer than 5 bytes are there.
std::optional<GrpcPrefix> ReadGrpcPrefix(std::string_view bytes);
// Why a message with this prefix is refused: compressed (UNIMPLEMENTED: only the
// identity encoding is spoken), other flags (INVALID_ARGUMENT), or longer than
// `max_message_bytes` (RESOURCE_EXHAUSTED); nullopt when it is taken.
std::optional<GrpcStatus> CheckGrpcPrefix(GrpcPrefix prefix, std::size_t max_message_bytes);

// gRPC's grpc-message encoding: bytes outside printable ASCII, and '%', as %XX.
std::string PercentEncode(std::string_view message);

// The values of a status's trailers: grpc-status in decimal, grpc-message percent-encoded
// (empty: no grpc-message is sent).
struct GrpcStatusFields {
  std::string code;
  std::string message;
};
GrpcStatusFields EncodeGrpcStatus(const GrpcStatus& status);

// grpc-timeout ("<1-8 digits><H|M|S|m|u|n>") in nanoseconds, at most 10^18 (about 30
// years: 99999999 hours does not fit in int64 nanoseconds); false when malformed.
bool ParseGrpcTimeout(std::string_view value, std::chrono::nanoseconds& out);

// Whether a request's content-type is gRPC's: "application/grpc", alone or followed by
// '+' (a message format, "+proto") or ';' (parameters).
bool IsGrpcContentType(std::string_view content_type);

}  // namespace sluiced
