#include "redis/slot_map.h"

#include <charconv>

#include "redis/crc16.h"

namespace sluice::internal {
namespace {

template <typename T>
bool ParseNumber(std::string_view text, T& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// "host:port" (the last colon splits, so an IPv6 host keeps its own colons).
bool ParseHostPort(std::string_view text, std::string_view asked_host, std::string& host,
                   uint16_t& port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  unsigned p = 0;
  if (!ParseNumber(text.substr(colon + 1), p) || p == 0 || p > 65535) return false;
  host = std::string(text.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "?") host = std::string(asked_host);
  port = static_cast<uint16_t>(p);
  return true;
}

}  // namespace

StatusOr<std::vector<SlotRange>> ParseClusterSlots(const Reply& reply,
                                                   std::string_view asked_host) {
  const auto bad = [](std::string_view what) {
    return InternalError("unexpected reply to CLUSTER SLOTS: " + std::string(what));
  };
  if (reply.type == Reply::Type::kError) {
    return FailedPreconditionError("CLUSTER SLOTS failed (is this server in cluster mode?): " +
                                   reply.str);
  }
  if (reply.type != Reply::Type::kArray) return bad("not an array");
  std::vector<SlotRange> ranges;
  for (const Reply& row : reply.elements) {
    if (row.type != Reply::Type::kArray || row.elements.size() < 3) return bad("a short row");
    const Reply& first = row.elements[0];
    const Reply& last = row.elements[1];
    const Reply& node = row.elements[2];
    if (first.type != Reply::Type::kInteger || last.type != Reply::Type::kInteger ||
        first.integer < 0 || last.integer < first.integer || last.integer >= kClusterSlots) {
      return bad("a slot range out of bounds");
    }
    if (node.type != Reply::Type::kArray || node.elements.size() < 2 ||
        node.elements[0].type != Reply::Type::kString ||
        node.elements[1].type != Reply::Type::kInteger || node.elements[1].integer <= 0 ||
        node.elements[1].integer > 65535) {
      return bad("a node without host and port");
    }
    SlotRange range;
    range.first = static_cast<uint16_t>(first.integer);
    range.last = static_cast<uint16_t>(last.integer);
    range.host = node.elements[0].str;
    if (range.host.empty() || range.host == "?") range.host = std::string(asked_host);
    range.port = static_cast<uint16_t>(node.elements[1].integer);
    ranges.push_back(std::move(range));
  }
  return ranges;
}

std::optional<ClusterError> ParseClusterError(std::string_view error, std::string_view asked_host) {
  ClusterError out;
  const auto word = [&error](std::string_view w) {
    return error.starts_with(w) && (error.size() == w.size() || error[w.size()] == ' ');
  };
  if (word("MOVED") || word("ASK")) {
    out.kind = word("MOVED") ? ClusterError::Kind::kMoved : ClusterError::Kind::kAsk;
    std::string_view rest = error.substr(error.find(' ') + 1);
    const size_t space = rest.find(' ');
    if (space == std::string_view::npos) return std::nullopt;
    unsigned slot = 0;
    if (!ParseNumber(rest.substr(0, space), slot) || slot >= kClusterSlots) return std::nullopt;
    out.slot = static_cast<uint16_t>(slot);
    std::string_view address = rest.substr(space + 1);
    address = address.substr(0, address.find(' '));
    if (!ParseHostPort(address, asked_host, out.host, out.port)) return std::nullopt;
    return out;
  }
  if (word("TRYAGAIN")) {
    out.kind = ClusterError::Kind::kTryAgain;
  } else if (word("CLUSTERDOWN")) {
    out.kind = ClusterError::Kind::kClusterDown;
  } else if (word("READONLY")) {
    out.kind = ClusterError::Kind::kReadOnly;
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<ClusterError> ClusterErrorOf(const Status& status, std::string_view asked_host) {
  if (status.ok()) return std::nullopt;
  constexpr std::string_view kAnswered = " answered: ";
  std::string_view message = status.message();
  const size_t at = message.find(kAnswered);
  if (at == std::string_view::npos) return std::nullopt;
  return ParseClusterError(message.substr(at + kAnswered.size()), asked_host);
}

}  // namespace sluice::internal
