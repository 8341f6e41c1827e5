#include "service/h2_reply_queue.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "service/grpc_wire.h"

namespace sluiced {

void ReplyQueue::Append(std::string_view message) {
  AppendGrpcMessage(out_, message);
  Account();
}

std::size_t ReplyQueue::Take(uint8_t* buf, std::size_t length) {
  const std::size_t n = std::min(length, pending());
  std::memcpy(buf, out_.data() + taken_, n);
  taken_ += n;
  if (taken_ == out_.size()) {
    // All taken: a long-lived call keeps no large buffer from a burst.
    if (out_.capacity() > (64u << 10))
      std::string().swap(out_);
    else
      out_.clear();
    taken_ = 0;
  }
  Account();
  return n;
}

void ReplyQueue::DropUnsent() {
  std::size_t keep_to = 0;
  for (std::size_t at = 0; at < taken_;) {
    const std::optional<GrpcPrefix> prefix = ReadGrpcPrefix(std::string_view(out_).substr(at));
    if (!prefix) break;
    const std::size_t next = at + kGrpcPrefixBytes + prefix->length;
    if (next > taken_) {
      keep_to = next;
      break;
    }
    at = next;
  }
  if (keep_to == 0) return Clear();
  out_.resize(keep_to);
  out_.erase(0, taken_);
  out_.shrink_to_fit();
  taken_ = 0;
  Account();
}

void ReplyQueue::Clear() {
  std::string().swap(out_);
  taken_ = 0;
  Account();
}

void ReplyQueue::Account() {
  if (server_ == nullptr) return;
  const std::size_t now = pending();
  if (now < counted_ || counted_ == 0) moved_ = Clock::now();
  if (now >= counted_)
    server_->fetch_add(now - counted_, std::memory_order_relaxed);
  else
    server_->fetch_sub(counted_ - now, std::memory_order_relaxed);
  counted_ = now;
}

}  // namespace sluiced
