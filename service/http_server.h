// service/http_server.h — a small HTTP/1.1 server on Boost.Beast: keep-alive, bounded
// header and body sizes, a deadline on reading each request (a slow or idle client is
// disconnected), and asynchronous handlers (a handler answers later, from any thread).
// It runs on threads of its own, or on an executor it is given (sluiced's public
// listener: the store client's I/O threads, sluice::IoExecutor), each connection on a
// strand.
//
// Thread-safety: Start/Stop from one thread; handlers run on the server's threads.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

#include "service/listener.h"
#include "sluice/status.h"

namespace sluiced {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

// How a handler answers its request: once, from any thread. A handler that may take long
// (a waiting acquire) can also ask to hear of a client that leaves before its answer.
class Respond {
 public:
  Respond() = default;
  // From any callable taking the response (tests; a wrapper that adds headers): its
  // OnClientGone never calls back.
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Respond> &&
                                                    std::is_invocable_v<F&, HttpResponse>>>
  Respond(F send) : send_(std::move(send)) {}
  Respond(std::function<void(HttpResponse)> send, std::function<void(std::function<void()>)> watch)
      : send_(std::move(send)), watch_(std::move(watch)) {}

  void operator()(HttpResponse response) const { send_(std::move(response)); }
  explicit operator bool() const { return static_cast<bool>(send_); }
  // `gone` runs at most once, on the connection's strand, if the client closes or resets
  // the connection while the answer is being decided (the connection is closed then, and
  // the answer, when it comes, is dropped). A client that sent its next request already
  // (pipelined) is there: then never. Costs nothing for a request that does not ask.
  void OnClientGone(std::function<void()> gone) const {
    if (watch_) watch_(std::move(gone));
  }

 private:
  std::function<void(HttpResponse)> send_;
  std::function<void(std::function<void()>)> watch_;
};
using HttpHandler = std::function<void(HttpRequest&&, Respond)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see HttpServer::port)
  // Threads of its own; ignored when `executor` is set.
  int threads = 2;
  // Run on this executor's threads instead (no threads of its own): sluiced passes the
  // store client's (sluice::IoExecutor), so a response is written from the callback of
  // the store's reply, on the thread that read it. Stop() closes every connection.
  std::optional<boost::asio::io_context::executor_type> executor;
  std::size_t body_limit = 64 * 1024;
  std::size_t header_limit = 8 * 1024;
  // Reading one request (from the first byte, or from the end of the previous response
  // on a kept-alive connection) must finish within this. Default: 10 s.
  std::chrono::milliseconds read_timeout{10000};
  // Writing one response. Default: 10 s.
  std::chrono::milliseconds write_timeout{10000};
};

namespace http_detail {
class Session;
// What every connection of one server shares.
struct HttpContext {
  HttpServerOptions options;
  HttpHandler handler;
};
}  // namespace http_detail

class HttpServer {
 public:
  // Binds and starts serving; InvalidArgument for a bad host, Unavailable when the
  // address cannot be bound.
  static sluice::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                             HttpHandler handler);
  ~HttpServer();
  uint16_t port() const { return port_; }
  // Stops accepting (new connections are refused) and finishes the requests in
  // progress: each response from now on says `Connection: close` and closes its
  // connection. Stop() closes what is left.
  void Drain();
  // Requests being read, decided or written (what a drain waits for).
  int requests_in_flight() const;
  // Stops accepting and closes every connection (a response still being decided is
  // dropped with its connection). Not from one of the server's own threads.
  void Stop();

 private:
  HttpServer() = default;

  // One io_context per own thread (none when running on a given executor).
  std::vector<std::unique_ptr<boost::asio::io_context>> ios_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  // The acceptor and the connections: shared with their handlers, which may outlive
  // this object on a given executor.
  std::shared_ptr<Listener<http_detail::Session, http_detail::HttpContext>> listener_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

// A response with a JSON (or other) body.
HttpResponse MakeResponse(http::status status, std::string body,
                          std::string_view content_type = "application/json");

}  // namespace sluiced
