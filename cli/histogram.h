// Latency histogram for the bench: 1 µs buckets below 10 ms, 100 µs buckets up to 1 s,
// one overflow bucket. Not thread-safe: one writer (the client's I/O thread).
#pragma once

#include <cstdint>
#include <vector>

namespace sluice::cli {

class Histogram {
 public:
  Histogram() : counts_(kFine + kCoarse + 1, 0) {}

  void Record(int64_t us) {
    if (us < 0) us = 0;
    const auto v = static_cast<size_t>(us);
    size_t bucket = v < kFine                   ? v
                    : v < kFine + kCoarse * 100 ? kFine + (v - kFine) / 100
                                                : kFine + kCoarse;
    ++counts_[bucket];
    ++total_;
  }
  uint64_t total() const { return total_; }
  // The raw buckets, to carry a histogram across processes (sluice bench --processes).
  const std::vector<uint64_t>& buckets() const { return counts_; }
  void AddToBucket(size_t bucket, uint64_t n) {
    if (bucket >= counts_.size()) bucket = counts_.size() - 1;
    counts_[bucket] += n;
    total_ += n;
  }
  // The smallest recorded value v with at least q of all records <= v (upper bucket edge).
  int64_t Quantile(double q) const {
    if (total_ == 0) return 0;
    uint64_t want = static_cast<uint64_t>(q * static_cast<double>(total_));
    if (want == 0) want = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= want) {
        return i < kFine ? static_cast<int64_t>(i)
                         : static_cast<int64_t>(kFine + (i - kFine + 1) * 100);
      }
    }
    return kFine + kCoarse * 100;
  }

 private:
  static constexpr size_t kFine = 10'000;
  static constexpr size_t kCoarse = 9'900;
  std::vector<uint64_t> counts_;
  uint64_t total_ = 0;
};

}  // namespace sluice::cli
