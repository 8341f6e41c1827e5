#include "service/matcher.h"

#include <algorithm>

namespace sluiced {

bool WildcardMatch(std::string_view pattern, std::string_view value) {
  const std::size_t first = pattern.find('*');
  if (first == std::string_view::npos) return pattern == value;
  const std::size_t last = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first), tail = pattern.substr(last + 1);
  if (value.size() < head.size() + tail.size()) return false;
  if (value.substr(0, head.size()) != head) return false;
  if (value.substr(value.size() - tail.size()) != tail) return false;
  // The literal parts between the first and the last '*', in order, each at its
  // leftmost place in what lies between the head and the tail.
  std::string_view rest = value.substr(head.size(), value.size() - head.size() - tail.size());
  std::string_view middle = pattern.substr(first + 1, last - first - (last > first ? 1 : 0));
  while (!middle.empty()) {
    const std::size_t star = middle.find('*');
    const std::string_view part = middle.substr(0, star);
    if (!part.empty()) {
      const std::size_t at = rest.find(part);
      if (at == std::string_view::npos) return false;
      rest.remove_prefix(at + part.size());
    }
    if (star == std::string_view::npos) break;
    middle.remove_prefix(star + 1);
  }
  return true;
}

Match MatchDescriptor(const DomainConfig& domain, const Entries& entries) {
  Match match;
  const std::vector<DescriptorNode>* level = &domain.descriptors;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& [key, value] = entries[i];
    const DescriptorNode* next = nullptr;
    for (const auto& node : *level) {
      if (node.key == key && node.value && !node.wildcard && *node.value == value) {
        next = &node;
        break;
      }
    }
    if (!next) {
      for (const auto& node : *level) {
        if (node.key != key || !node.wildcard) continue;
        if (WildcardMatch(*node.value, value)) {
          next = &node;
          break;
        }
      }
    }
    if (!next) {
      for (const auto& node : *level) {
        if (node.key == key && !node.value) {
          next = &node;
          break;
        }
      }
    }
    if (!next) break;
    if (i + 1 == entries.size()) match.rule = next->rule;
    if (next->children.empty()) break;
    level = &next->children;
  }
  if (match.rule) match.id = DescriptorId(entries);
  return match;
}

void ApplyReplaces(std::vector<Match>& matches) {
  std::vector<std::string> replaced;
  for (const auto& m : matches) {
    if (m.rule) replaced.insert(replaced.end(), m.rule->replaces.begin(), m.rule->replaces.end());
  }
  if (replaced.empty()) return;
  for (auto& m : matches) {
    if (m.rule && !m.rule->name.empty() &&
        std::find(replaced.begin(), replaced.end(), m.rule->name) != replaced.end()) {
      m.rule = nullptr;
      m.id.clear();
    }
  }
}

}  // namespace sluiced
