// KeyHashSet: which keys a scan has already reported, in bounded memory. SCAN may return
// a key more than once (when Redis resizes its table during the scan); counting each key
// once over millions of keys must not cost a copy of every key.
//
// It holds 64-bit hashes of keys in one open-addressing table (linear probing, at most
// three quarters full): 8 bytes a slot, 11–22 bytes a key (16 MiB for a million keys). Two distinct
// keys share a hash with probability about n²/2⁶⁵ for n keys (under 10⁻⁶ for 6 million): the second
// would be taken for a repeat.
//
// Thread-safety: none (one scan, one thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::internal {

class KeyHashSet {
 public:
  // Adds `key`; true when it was not there yet.
  bool Insert(std::string_view key) {
    uint64_t h = std::hash<std::string_view>{}(key);
    if (h == 0) h = 1;  // 0 marks an empty slot
    if (4 * (size_ + 1) > 3 * slots_.size()) Grow();
    return Place(h);
  }
  std::size_t size() const { return size_; }

 private:
  bool Place(uint64_t h) {
    const std::size_t mask = slots_.size() - 1;
    // The hash's high bits pick the slot (std::hash of a string is well mixed; the high
    // bits are independent of the low ones some hash tables use).
    for (std::size_t i = static_cast<std::size_t>(h >> 20) & mask;; i = (i + 1) & mask) {
      if (slots_[i] == h) return false;
      if (slots_[i] == 0) {
        slots_[i] = h;
        ++size_;
        return true;
      }
    }
  }
  void Grow() {
    std::vector<uint64_t> old(slots_.empty() ? 1024 : 2 * slots_.size(), 0);
    old.swap(slots_);
    size_ = 0;
    for (uint64_t h : old) {
      if (h != 0) Place(h);
    }
  }

  std::vector<uint64_t> slots_;
  std::size_t size_ = 0;
};

}  // namespace sluice::internal
