// sluiced's own counters: the per-descriptor series of detailed_metric limits and their
// bound.
#include "service/metrics.h"

#include <string>

#include <gtest/gtest.h>

namespace sluiced {
namespace {

TEST(Metrics, DescriptorSeriesAreBoundedAndTheRestCountedAsOther) {
  Metrics m;
  DescriptorCounters* first = m.ForDescriptor("d", "per_user", "user=0");
  EXPECT_EQ(m.ForDescriptor("d", "per_user", "user=0"), first) << "one series per descriptor";
  EXPECT_NE(m.ForDescriptor("d", "other_limit", "user=0"), first) << "per limit";
  for (std::size_t i = 2; i < Metrics::kMaxDescriptorSeries; ++i)
    m.ForDescriptor("d", "per_user", "user=" + std::to_string(i));
  // 10,000 named series: the next descriptors share one "_other" series.
  DescriptorCounters* other = m.ForDescriptor("d", "per_user", "user=new1");
  EXPECT_EQ(other->descriptor, "_other");
  EXPECT_EQ(m.ForDescriptor("d", "per_user", "user=new2"), other);
  EXPECT_NE(m.ForDescriptor("d", "second", "user=new3"), other) << "_other is per limit";
  EXPECT_EQ(m.ForDescriptor("d", "per_user", "user=7")->descriptor, "user=7")
      << "a known descriptor keeps its own series";
  other->decisions[1].fetch_add(2);
  first->decisions[0].fetch_add(1);
  const std::string text = m.Format(0);
  EXPECT_NE(text.find("sluiced_descriptor_decisions_total{domain=\"d\",limit=\"per_user\","
                      "descriptor=\"_other\",outcome=\"over_limit\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("sluiced_descriptor_decisions_total{domain=\"d\",limit=\"per_user\","
                      "descriptor=\"user=0\",outcome=\"allowed\"} 1"),
            std::string::npos);
  EXPECT_EQ(text.find("descriptor=\"user=5\""), std::string::npos) << "no series of zeros";
}

// Descriptor values may be any bytes (gRPC takes them as bytes): the exposition stays
// UTF-8, as Prometheus' text format requires.
TEST(Metrics, DescriptorLabelsAreValidUtf8) {
  Metrics m;
  m.ForDescriptor("d", "per_user", "user=caf\xc3\x28\xff")->decisions[0].fetch_add(1);
  m.ForDescriptor("d", "per_user", "user=caf\xc3\xa9")->decisions[0].fetch_add(1);
  m.ForDescriptor("d", "per_user", "user=\xed\xa0\x80\xf0\x9f\x98")->decisions[0].fetch_add(1);
  const std::string text = m.Format(0);
  EXPECT_NE(text.find("descriptor=\"user=caf\xEF\xBF\xBD(\xEF\xBF\xBD\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("descriptor=\"user=caf\xc3\xa9\""), std::string::npos) << "valid UTF-8 kept";
  // A surrogate and a truncated sequence: every byte replaced.
  EXPECT_NE(
      text.find("descriptor=\"user=\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                "\xEF\xBF\xBD\""),
      std::string::npos)
      << text;
}

TEST(Metrics, NoDescriptorFamilyWithoutDetailedLimits) {
  Metrics m;
  EXPECT_EQ(m.Format(0).find("sluiced_descriptor_decisions_total"), std::string::npos);
}

}  // namespace
}  // namespace sluiced
