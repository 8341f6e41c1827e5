// service/h2_reply_queue.h — one stream's response bytes on sluiced's HTTP/2 gRPC server
// (h2_server.h): framed gRPC messages appended by the call, taken by HTTP/2 as the client's
// flow-control window lets them go. For an asynchronous streaming call the bytes not taken
// are counted on the server (the bound on queued replies over every call), and the time
// they last moved is kept (a call whose replies do not move is reset).
//
// Thread-safety: one stream's queue is used on its connection's strand only; the server's
// count it adds to is atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluiced {

class ReplyQueue {
 public:
  using Clock = std::chrono::steady_clock;

  ReplyQueue() = default;
  ReplyQueue(const ReplyQueue&) = delete;
  ReplyQueue& operator=(const ReplyQueue&) = delete;
  ~ReplyQueue() { Clear(); }

  // From now on, the bytes not taken are counted in `server` (an asynchronous streaming
  // call's queue). Before anything is appended.
  void CountIn(std::atomic<std::size_t>* server) { server_ = server; }

  // Appends `message` with its gRPC prefix.
  void Append(std::string_view message);
  // Copies up to `length` bytes not taken yet into `buf`; returns how many.
  std::size_t Take(uint8_t* buf, std::size_t length);
  // Drops what waits but the rest of a message HTTP/2 has begun to send: a message cut
  // short would break the call's framing (the client would read the trailers' DATA as
  // the message's missing bytes). At most one message is kept.
  void DropUnsent();
  // Drops everything (the stream is gone).
  void Clear();

  bool empty() const { return out_.empty(); }
  // Bytes appended and not taken yet.
  std::size_t pending() const { return out_.size() - taken_; }
  // When the bytes not taken last fell, or rose from none.
  Clock::time_point moved() const { return moved_; }

 private:
  void Account();

  std::string out_;  // whole framed messages from offset 0
  std::size_t taken_ = 0;
  std::size_t counted_ = 0;  // in *server_, as last accounted
  std::atomic<std::size_t>* server_ = nullptr;
  Clock::time_point moved_{};
};

}  // namespace sluiced
