// service/h2_server.h — sluiced's own gRPC server: HTTP/2 over cleartext TCP (h2c with
// prior knowledge, as gRPC clients connect) on libnghttp2 and Boost.Asio. It speaks the
// gRPC wire format (length-prefixed messages, `grpc-status` / `grpc-message` trailers,
// `grpc-timeout`) for three kinds of methods: unary ones answered asynchronously from any
// thread (UnaryReply), streaming ones answered message by message on the connection's
// thread (StreamHandler), and asynchronous streaming ones whose server side sends at any
// time from any thread (StreamCall, StreamWriter: a long-lived call whose replies wait
// for the store).
//
// Bounds: concurrent streams and header list size per connection (advertised in SETTINGS
// and enforced), message size, request bytes buffered (per connection and per server),
// calls in flight per connection, response bytes queued (per call and per server), the
// state calls keep (per connection and per server, service/h2_budget.h), and timeouts
// for the connection preface, for each request (first header to end of stream), for
// each write, for a call whose queued replies do not move, and for idle connections. A client that
// breaks the protocol has its connection closed; a handler never runs for it.
//
// Thread-safety: Start/Stop from one thread. Handlers run on the server's threads, or on
// a given executor's (GrpcServerOptions::executor), each connection on a strand (its
// handlers never run concurrently); a UnaryReply may be finished, and a StreamWriter used,
// from any thread (what they send is handed to the connection's strand).
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "service/grpc_wire.h"
#include "service/listener.h"
#include "sluice/status.h"

namespace sluiced {

namespace h2internal {
class Connection;
}  // namespace h2internal

// The answer to one unary call: call Finish once, from any thread. A call whose client
// went away (stream reset, connection closed, grpc-timeout passed) ignores it.
class UnaryReply {
 public:
  UnaryReply(std::shared_ptr<h2internal::Connection> connection, int32_t stream_id);
  // OK with `message` (a serialized protobuf), or an error status (no message).
  void Finish(std::string message);
  void Fail(GrpcStatus status);

 private:
  std::shared_ptr<h2internal::Connection> connection_;
  int32_t stream_id_;
};

// The server's handle on one open asynchronous streaming call (copyable, thread-safe).
// It holds the connection (not the call): a writer kept after its call ended, or its
// connection closed, costs the connection's memory until it is dropped, nothing else; it
// must be dropped before the io_context the connection runs on is destroyed.
class StreamWriter {
 public:
  StreamWriter(std::shared_ptr<h2internal::Connection> connection, int32_t stream_id);
  // Queues `message` (a serialized protobuf) on the call, after the ones sent before; from
  // any thread. Dropped once the call has ended. Bytes queued and not taken by HTTP/2
  // (its flow control, a client that does not read) beyond
  // GrpcServerOptions::max_stream_queued_bytes, or the server's max_server_queued_bytes,
  // end the call RESOURCE_EXHAUSTED; a queue that has not moved for stalled_reply_timeout
  // resets it.
  void Send(std::string message);
  // Ends the call with `status` after the messages queued before; from any thread. Later
  // Sends and Finishes are dropped.
  void Finish(GrpcStatus status);
  // The call's state (what it keeps between messages: its own bookkeeping, requests
  // waiting for answers) charged to its connection's and the server's state budgets
  // (GrpcServerOptions::max_connection_state_bytes, max_server_state_bytes): false, and
  // nothing charged, when `bytes` more would go over either. The call gives back what it
  // charged (Uncharge) when it no longer holds it, at the latest in OnClose.
  bool Charge(std::size_t bytes);
  void Uncharge(std::size_t bytes);
  // The state budgets, for a refusal's message.
  std::string BudgetText() const;

 private:
  std::shared_ptr<h2internal::Connection> connection_;
  int32_t stream_id_;
};

// The per-call state of an asynchronous streaming method, created when the call's headers
// arrive. Inside its handlers (and inside GrpcMethod::open), a Finish, or a Send over the
// bound, takes effect when the handler returns: `message` stays valid until then.
class StreamCall {
 public:
  virtual ~StreamCall() = default;
  // Each request message, in order, on the connection's strand. A non-OK status ends the
  // call with it.
  virtual GrpcStatus OnMessage(std::string_view message) = 0;
  // The client half-closed (sent END_STREAM). Default: Finish with OK at once. A call with
  // replies still to come overrides it and finishes later.
  virtual void OnHalfClose(StreamWriter& writer) { writer.Finish({}); }
  // Exactly once when the call is over for any reason (finished by the server, reset by
  // the client, deadline, connection closed, server stopped or drained), on the
  // connection's strand; then the server drops the call. When a server with threads of
  // its own stops, the calls still open end on the thread calling H2GrpcServer::Stop,
  // after the server's threads have stopped. Sends and Finishes from here are dropped.
  virtual void OnClose() {}
};

// A unary method: `request` is the request message (valid during the call only).
using UnaryHandler = std::function<void(std::string_view request, UnaryReply reply)>;
// A streaming method: called on the connection's thread for each request message; the
// replies it appends are sent in order. A non-OK status ends the call with it.
using StreamHandler =
    std::function<GrpcStatus(std::string_view request, std::vector<std::string>& replies)>;

struct GrpcMethod {
  std::string path;  // "/package.Service/Method"
  UnaryHandler unary;
  StreamHandler stream;  // set for streaming methods (then unary is empty)
  // Set for asynchronous streaming methods (then unary and stream are empty): makes the
  // call's state. It runs on the connection's strand, before the call's first message; a
  // null state ends the call INTERNAL.
  std::function<std::shared_ptr<StreamCall>(StreamWriter writer)> open;
  // Streaming methods (`stream`): end the call with OK when the client half-closes. False
  // keeps it open until the client cancels (server-streaming watches). Default: true.
  // Asynchronous ones decide in StreamCall::OnHalfClose instead.
  bool finish_on_half_close = true;
  // Streaming methods that stay open (finish_on_half_close false): when the server
  // drains, this message (when not empty) is sent on each such call, which then ends
  // UNAVAILABLE, so that the client goes elsewhere. Asynchronous streaming calls end
  // UNAVAILABLE too (after the messages queued), whatever this says.
  std::string drain_reply;
};

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see H2GrpcServer::port)
  // Threads, each with its own connections; ignored when `executor` is set. Default: 2.
  int threads = 2;
  // Run on this executor's threads instead (no threads of its own): sluiced passes the
  // store client's (sluice::IoExecutor), so a call is read, its check started, the
  // store's reply read and the answer written on one thread, with no hand-off between
  // threads. Stop() closes every connection.
  std::optional<boost::asio::io_context::executor_type> executor;
  // SETTINGS_MAX_CONCURRENT_STREAMS per connection. Default: 100.
  uint32_t max_concurrent_streams = 100;
  // SETTINGS_MAX_HEADER_LIST_SIZE: a request whose header list is larger is reset (and
  // its connection closed). Default: 16 KiB.
  std::size_t max_header_list_bytes = 16 * 1024;
  // A larger message is answered RESOURCE_EXHAUSTED. Default: 1 MiB.
  std::size_t max_message_bytes = 1 << 20;
  // Request bytes held on one connection: every stream's buffers as allocated (the
  // bytes of a message not complete yet, a unary call's message until its request
  // ends), from their first byte until the stream is answered, reset or closed. The
  // stream whose bytes would go over is answered RESOURCE_EXHAUSTED at once (and its
  // DATA dropped); the connection's other calls go on. Default: 8 MiB.
  std::size_t max_connection_buffer_bytes = 8 << 20;
  // The same bytes, counted over every connection of the server together (a bound
  // that many connections cannot multiply); the stream that would go over is answered
  // RESOURCE_EXHAUSTED as well. Default: 64 MiB.
  std::size_t max_server_buffer_bytes = 64 << 20;
  // Response bytes queued on one asynchronous streaming call and not yet taken by HTTP/2
  // (the client's flow-control window is closed, or its connection does not take them):
  // a Send that would go over ends the call RESOURCE_EXHAUSTED and frees its queue (but
  // the rest of a message HTTP/2 has begun to send: the framing must stay whole), so a
  // client that stops reading costs at most this. Default: 1 MiB.
  std::size_t max_stream_queued_bytes = 1 << 20;
  // The same bytes over every call of the server together: a Send that would go over
  // ends its call the same way. Default: 64 MiB.
  std::size_t max_server_queued_bytes = 64 << 20;
  // A call whose queued response bytes have not moved (none taken by HTTP/2) for this
  // long is reset (RST_STREAM CANCEL: its status cannot pass a closed window) and its
  // queue freed. Default: 30 s.
  std::chrono::milliseconds stalled_reply_timeout{30000};
  // The state asynchronous streaming calls keep (StreamWriter::Charge), per connection
  // and over every connection of the server. Default: 16 MiB and 256 MiB.
  std::size_t max_connection_state_bytes = 16 << 20;
  std::size_t max_server_state_bytes = 256 << 20;
  // Unary calls handed to handlers and not answered yet, per connection; more are
  // answered RESOURCE_EXHAUSTED (bounds work queued by clients that reset streams).
  // Default: 1024.
  std::size_t max_calls_in_flight = 1024;
  // The client's connection preface and first SETTINGS. Default: 10 s.
  std::chrono::milliseconds handshake_timeout{10000};
  // One request, from its first header to its end of stream (the stream is reset
  // after). Default: 10 s.
  std::chrono::milliseconds read_timeout{10000};
  // One blocked write (a client that stops reading is disconnected). Default: 10 s.
  std::chrono::milliseconds write_timeout{10000};
  // A connection without streams and without input for this long is closed (GOAWAY).
  // Default: 5 min.
  std::chrono::milliseconds idle_timeout{300000};
};

class H2GrpcServer {
 public:
  // Binds and starts serving `methods`; InvalidArgument for a bad host, Unavailable
  // when the address cannot be bound.
  static sluice::StatusOr<std::unique_ptr<H2GrpcServer>> Start(GrpcServerOptions options,
                                                               std::vector<GrpcMethod> methods);
  ~H2GrpcServer();
  uint16_t port() const { return port_; }
  // Request bytes held by all connections now (see max_server_buffer_bytes).
  std::size_t buffered_bytes() const;
  // A graceful stop: stops accepting (new connections are refused) and sends each
  // connection GOAWAY, first as a shutdown notice (last stream id 2^31-1) with a PING,
  // then, once the PING's acknowledgement is back (or after a second), with the last
  // stream id the connection took: streams up to it are served to their end, later ones
  // are refused (the client may retry them elsewhere). A connection closes once its
  // streams are done. Streaming calls that stay open (see GrpcMethod::drain_reply) and
  // asynchronous streaming calls end UNAVAILABLE.
  void Drain();
  // Response bytes queued on every asynchronous streaming call now, not yet taken by
  // HTTP/2 (see max_stream_queued_bytes).
  std::size_t queued_bytes() const;
  // State bytes charged by every call now (see max_server_state_bytes).
  std::size_t state_bytes() const;
  // Connections not closed yet (a drain is done when there are none).
  std::size_t open_connections() const;
  // Stops accepting and serving; unanswered calls are dropped (asynchronous streaming
  // calls end: StreamCall::OnClose). Idempotent.
  void Stop();

  struct Shared;

 private:
  H2GrpcServer() = default;

  // One io_context per own thread (none when running on a given executor).
  std::vector<std::unique_ptr<boost::asio::io_context>> ios_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  // The acceptor and the connections: shared with their handlers, which may outlive
  // this object on a given executor. After ios_: released before they are destroyed.
  std::shared_ptr<Listener<h2internal::Connection, std::shared_ptr<const Shared>>> listener_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

}  // namespace sluiced
