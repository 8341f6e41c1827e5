// service/bench/h2_client.h — a lean HTTP/2 (h2c, prior knowledge) gRPC client on
// libnghttp2, for bench/service.sh's load generator (many calls in flight on a few
// connections, one thread, far cheaper than grpc++) and for the tests that must send
// what a well-behaved gRPC client never does (bad prefixes, truncated messages,
// garbage, a client that stops reading).
//
// Thread-safety: none; one thread drives a client (Pump, or Poll with its fd).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct nghttp2_session;

namespace sluiced::bench {

struct H2Call {
  int32_t stream_id = 0;
  std::chrono::steady_clock::time_point started;
  std::string body;  // what is sent (a framed message, or anything)
  std::size_t body_sent = 0;
  bool end_stream = true;  // END_STREAM after the body
  // What came back.
  std::map<std::string, std::string> headers;   // response headers (":status" included)
  std::map<std::string, std::string> trailers;  // trailers (or a Trailers-Only response)
  std::string data;                             // DATA bytes, framing included
  bool closed = false;
  uint32_t reset_code = 0;  // RST_STREAM's error code (0: closed normally)
  // grpc-status from the trailers (or the Trailers-Only headers); -1 when absent.
  int GrpcStatus() const;
  std::string GrpcMessage() const;
  // The first message of `data` without its 5-byte prefix ("" when none).
  std::string Message() const;
};

// `message` with gRPC's 5-byte prefix: `flags` (0: uncompressed), then its length, 4 bytes
// big-endian. Written apart from the server's own framing (service/grpc_wire.h) so that
// the tests and the load generator check the server against the protocol, not against
// itself; `flags` other than 0 make prefixes a server must refuse.
std::string GrpcFramed(std::string_view message, uint8_t flags = 0);

class H2Client {
 public:
  // Connects (blocking, up to 5 s) and queues the preface and SETTINGS; null and
  // `error` set when it cannot.
  static std::unique_ptr<H2Client> Connect(const std::string& host, int port, std::string& error);
  ~H2Client();
  H2Client(const H2Client&) = delete;
  H2Client& operator=(const H2Client&) = delete;

  // A POST of `body` to `path` with gRPC's headers and `extra` ones; END_STREAM after
  // the body unless end_stream is false. The stream id, or < 0 when nghttp2 refused.
  int32_t Submit(const std::string& path, std::string body,
                 const std::vector<std::pair<std::string, std::string>>& extra = {},
                 bool end_stream = true);
  // Cancels a call (RST_STREAM CANCEL).
  void Reset(int32_t stream_id);
  // Bytes written to the socket as they are, outside HTTP/2 (a misbehaving client).
  bool SendRaw(std::string_view bytes);

  // Sends what is queued, then waits up to `wait` for input and takes it in. False once
  // the connection is closed (by the server, or after a protocol error).
  bool Pump(std::chrono::milliseconds wait);
  // Pumps until `done` or the connection closes or `timeout` passes; returns done().
  bool PumpUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout);

  // For callers that poll many clients: the socket, whether there is output queued,
  // and the two halves of Pump.
  int fd() const { return fd_; }
  bool WantsWrite() const;
  bool OnReadable();  // reads what is there; false when closed
  bool Flush();       // writes what nghttp2 has; false when closed

  bool open() const { return open_; }
  // Stop reading from the socket (a client that stops reading its answers).
  void set_reading(bool reading) { reading_ = reading; }

  H2Call* call(int32_t stream_id);
  // Called when a call closes (then the call is erased); without it calls are kept.
  std::function<void(H2Call&)> on_close;
  std::size_t open_calls() const { return open_calls_; }
  bool goaway_received() const { return goaway_; }

 private:
  H2Client() = default;

  friend struct H2ClientCallbacks;
  int fd_ = -1;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, std::unique_ptr<H2Call>> calls_;
  std::size_t open_calls_ = 0;
  bool open_ = true;
  bool reading_ = true;
  bool goaway_ = false;
  std::string pending_;  // bytes nghttp2 produced that the socket did not take yet
};

}  // namespace sluiced::bench
