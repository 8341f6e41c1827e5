#include "service/matcher.h"

#include <algorithm>

namespace sluiced {

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
        const std::string_view prefix(node.value->data(), node.value->size() - 1);
        if (std::string_view(value).substr(0, prefix.size()) == prefix) {
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
