// sluiced's own counters: the per-descriptor series of detailed_metric limits and their
// bound; the bound on the library's per-id lease gauges.
#include "service/metrics.h"

#include <chrono>
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
  const std::string text = m.Format();
  EXPECT_NE(text.find("sluiced_descriptor_decisions_total{domain=\"d\",limit=\"per_user\","
                      "descriptor=\"_other\",outcome=\"over_limit\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("sluiced_descriptor_decisions_total{domain=\"d\",limit=\"per_user\","
                      "descriptor=\"user=0\",outcome=\"allowed\"} 1"),
            std::string::npos);
  EXPECT_EQ(text.find("descriptor=\"user=5\""), std::string::npos) << "no series of zeros";
}

// Bucket bounds and the sum are the shortest decimals that read back exactly: le="0.00025",
// not printf's %.17g "0.00025000000000000001".
TEST(Metrics, HistogramBoundsArePrintedShortestAndExact) {
  Metrics m;
  m.ObserveStoreLatency(std::chrono::microseconds(300));
  m.ObserveStoreLatency(std::chrono::microseconds(1200));
  const std::string text = m.Format();
  for (const char* le : {"0.0001", "0.00025", "0.0005", "0.001", "0.002", "0.003", "0.005", "0.01",
                         "0.025", "0.05", "0.1", "0.25", "+Inf"}) {
    EXPECT_NE(text.find(std::string("sluiced_store_latency_seconds_bucket{le=\"") + le + "\"}"),
              std::string::npos)
        << le << "\n"
        << text;
  }
  EXPECT_NE(text.find("sluiced_store_latency_seconds_bucket{le=\"0.0005\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("sluiced_store_latency_seconds_sum 0.0015\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("0000000"), std::string::npos) << text;
}

// The library's lease gauges (three series per id): at most max_ids ids keep series of
// their own, the ids holding most leases first; the others are summed per limiter
// under id="_other". Other samples are untouched.
TEST(Metrics, LeaseSeriesAreCappedPerIdAndTheRestSummedAsOther) {
  std::vector<sluice::MetricSample> samples;
  samples.push_back({"sluice_breaker_state", sluice::MetricType::kGauge, "state", {}, 1});
  auto add_id = [&samples](const std::string& limiter, const std::string& id, double held,
                           double live) {
    const std::vector<std::pair<std::string, std::string>> labels = {{"limiter", limiter},
                                                                     {"id", id}};
    samples.push_back({"sluice_leases_held", sluice::MetricType::kGauge, "held", labels, held});
    samples.push_back({"sluice_leases_live", sluice::MetricType::kGauge, "live", labels, live});
    samples.push_back(
        {"sluice_leases_live_max_1m", sluice::MetricType::kGauge, "max", labels, live + 1});
  };
  add_id("a", "k=1", 1, 1);
  add_id("a", "k=2", 5, 5);  // holds the most: kept
  add_id("a", "k=3", 1, 7);  // then the most live: kept
  add_id("b", "k=1", 1, 1);
  add_id("b", "k=4", 0, 2);
  auto untouched = samples;
  EXPECT_EQ(CapLeaseSeries(untouched, 5), 0u);
  EXPECT_EQ(untouched.size(), samples.size());
  EXPECT_EQ(CapLeaseSeries(samples, 2), 3u);
  const std::string page = sluice::FormatPrometheus(samples);
  EXPECT_NE(page.find("sluice_breaker_state 1\n"), std::string::npos) << page;
  EXPECT_NE(page.find("sluice_leases_held{limiter=\"a\",id=\"k=2\"} 5\n"), std::string::npos);
  EXPECT_NE(page.find("sluice_leases_live{limiter=\"a\",id=\"k=3\"} 7\n"), std::string::npos);
  EXPECT_EQ(page.find("id=\"k=1\""), std::string::npos) << page;
  EXPECT_EQ(page.find("id=\"k=4\""), std::string::npos) << page;
  EXPECT_NE(page.find("sluice_leases_held{limiter=\"a\",id=\"_other\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("sluice_leases_held{limiter=\"b\",id=\"_other\"} 1\n"), std::string::npos);
  EXPECT_NE(page.find("sluice_leases_live{limiter=\"b\",id=\"_other\"} 3\n"), std::string::npos);
  EXPECT_NE(page.find("sluice_leases_live_max_1m{limiter=\"b\",id=\"_other\"} 5\n"),
            std::string::npos);
  // One HELP per name: the "_other" series sit with their name's others.
  EXPECT_EQ(page.find("# HELP sluice_leases_held"), page.rfind("# HELP sluice_leases_held"));
  EXPECT_NE(Metrics().Format(3).find("\nsluiced_lease_ids_folded 3\n"), std::string::npos);
}

// Descriptor values may be any bytes (gRPC takes them as bytes): the exposition stays
// UTF-8, as Prometheus' text format requires.
TEST(Metrics, DescriptorLabelsAreValidUtf8) {
  Metrics m;
  m.ForDescriptor("d", "per_user", "user=caf\xc3\x28\xff")->decisions[0].fetch_add(1);
  m.ForDescriptor("d", "per_user", "user=caf\xc3\xa9")->decisions[0].fetch_add(1);
  m.ForDescriptor("d", "per_user", "user=\xed\xa0\x80\xf0\x9f\x98")->decisions[0].fetch_add(1);
  const std::string text = m.Format();
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
  EXPECT_EQ(m.Format().find("sluiced_descriptor_decisions_total"), std::string::npos);
}

}  // namespace
}  // namespace sluiced
