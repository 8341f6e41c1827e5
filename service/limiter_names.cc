#include "service/limiter_names.h"

#include <cctype>
#include <cstdint>
#include <cstdio>

namespace sluiced {
namespace {

bool NameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string NodePiece(std::string_view key, std::string_view config_value) {
  std::string piece(key);
  if (!config_value.empty()) {
    piece += '_';
    piece += config_value;
  }
  return piece;
}

std::string LimiterName(const std::vector<std::string>& pieces) {
  std::string joined;
  bool clean = true;
  std::string exact;
  for (const auto& p : pieces) {
    if (!joined.empty()) joined += '.';
    for (char c : p) {
      if (NameChar(c)) {
        joined += c;
      } else {
        joined += '_';
        clean = false;
      }
    }
    if (p.empty()) clean = false;
    exact += p;
    exact += '\0';
  }
  if (clean && joined.size() <= 64) return joined;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Fnv1a(exact)));
  return joined.substr(0, 47) + "." + hex;
}

std::string DescriptorId(const Entries& entries) {
  std::string id;
  for (const auto& [k, v] : entries) {
    if (!id.empty()) id += ',';
    for (const std::string* s : {&k, &v}) {
      for (char c : *s) {
        if (c == '\\' || c == ',' || c == '=') id += '\\';
        id += c;
      }
      if (s == &k) id += '=';
    }
  }
  return id;
}

}  // namespace sluiced
