// The audit log of a sluiced under test, one parsed record per line (the admin tests'
// reading of --audit-log).
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "service/tests/sluiced_process.h"

namespace sluiced::testing {

inline std::vector<nlohmann::json> AuditLines(const Sluiced& s) {
  std::vector<nlohmann::json> lines;
  std::stringstream in(s.audit_log());
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace sluiced::testing
