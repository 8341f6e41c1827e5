#include "service/grpc_wire.h"

namespace sluiced {

void AppendGrpcMessage(std::string& out, std::string_view message) {
  const auto n = static_cast<uint32_t>(message.size());
  const char prefix[kGrpcPrefixBytes] = {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                                         static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(prefix, kGrpcPrefixBytes);
  out.append(message);
}

std::optional<GrpcPrefix> ReadGrpcPrefix(std::string_view bytes) {
  if (bytes.size() < kGrpcPrefixBytes) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  return GrpcPrefix{p[0], (uint32_t{p[1]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 8) |
                              uint32_t{p[4]}};
}

std::optional<GrpcStatus> CheckGrpcPrefix(GrpcPrefix prefix, std::size_t max_message_bytes) {
  if (prefix.flags == 1)
    return GrpcStatus{GrpcCode::kUnimplemented,
                      "compressed messages are not supported (grpc-encoding identity only)"};
  if (prefix.flags != 0)
    return GrpcStatus{GrpcCode::kInvalidArgument, "malformed gRPC message prefix (flags byte " +
                                                      std::to_string(prefix.flags) + ")"};
  if (prefix.length > max_message_bytes)
    return GrpcStatus{GrpcCode::kResourceExhausted,
                      "request message of " + std::to_string(prefix.length) +
                          " bytes is larger than the " + std::to_string(max_message_bytes) +
                          "-byte limit"};
  return std::nullopt;
}

std::string PercentEncode(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

GrpcStatusFields EncodeGrpcStatus(const GrpcStatus& status) {
  return {std::to_string(static_cast<int>(status.code)), PercentEncode(status.message)};
}

bool ParseGrpcTimeout(std::string_view value, std::chrono::nanoseconds& out) {
  if (value.size() < 2 || value.size() > 9) return false;
  int64_t n = 0;
  for (const char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  long double unit_ns = 0;
  switch (value.back()) {
    case 'H': unit_ns = 3600e9L; break;
    case 'M': unit_ns = 60e9L; break;
    case 'S': unit_ns = 1e9L; break;
    case 'm': unit_ns = 1e6L; break;
    case 'u': unit_ns = 1e3L; break;
    case 'n': unit_ns = 1; break;
    default: return false;
  }
  constexpr int64_t kMaxNs = 1'000'000'000'000'000'000;
  const long double ns = static_cast<long double>(n) * unit_ns;
  out = std::chrono::nanoseconds(ns >= static_cast<long double>(kMaxNs) ? kMaxNs
                                                                        : static_cast<int64_t>(ns));
  return true;
}

bool IsGrpcContentType(std::string_view content_type) {
  constexpr std::string_view kGrpc = "application/grpc";
  if (content_type.substr(0, kGrpc.size()) != kGrpc) return false;
  return content_type.size() == kGrpc.size() || content_type[kGrpc.size()] == '+' ||
         content_type[kGrpc.size()] == ';';
}

}  // namespace sluiced
