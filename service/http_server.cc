#include "service/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <charconv>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>

#include "service/json_api.h"

namespace sluiced {
namespace http_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;
// The stream's executor is the connection's strand, typed (no type-erased executor on
// every completion).
using Stream = beast::basic_stream<tcp, Strand>;

using HttpListener = Listener<Session, HttpContext>;

// How long a drain keeps a connection that is idle when it starts (see Session::Drain).
constexpr auto kDrainIdleGrace = std::chrono::seconds(1);

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpListener::Socket socket, std::shared_ptr<HttpListener> listener)
      : strand_(socket.get_executor()),
        stream_(std::move(socket)),
        listener_(std::move(listener)),
        options_(listener_->context.options) {}

  ~Session() {
    SetBusy(false);
    listener_->Forget(this);
  }

  // Once, registered, from the acceptor's strand.
  void Start() {
    asio::dispatch(strand_, [self = shared_from_this()] { self->Read(); });
  }

  // From any thread: the server drains. A request being read or answered now is
  // finished (it counts as busy until its response is written); every response from
  // now on says `Connection: close` and closes its connection. An idle kept-alive
  // connection counts as busy for kDrainIdleGrace more: a request its client sent just
  // before it heard of the drain (already on its way) is answered, also with
  // `Connection: close`; then it is closed.
  void Drain() {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->closed_ || !self->reading_) return;
      self->SetBusy(true);
      beast::error_code ec;
      const bool started = self->buffer_.size() > 0 || self->parser_->got_some() ||
                           self->stream_.socket().available(ec) > 0;
      if (started) return;
      self->drain_timer_.expires_after(kDrainIdleGrace);
      self->drain_timer_.async_wait([self](beast::error_code failed) {
        if (failed || self->closed_ || !self->reading_) return;
        if (self->buffer_.size() > 0 || self->parser_->got_some()) return;  // a request came
        self->Close();
      });
    });
  }

  // From any thread: closes the connection on its strand.
  void Shutdown() {
    asio::post(strand_, [self = shared_from_this()] { self->Close(); });
  }

 private:
  void Read() {
    if (closed_) return;
    if (listener_->stopped()) return Close();
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    parser_->header_limit(static_cast<std::uint32_t>(options_.header_limit));
    stream_.expires_after(options_.read_timeout);
    reading_ = true;
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnHeader(ec); });
  }

  // The header is read, the body not yet: an `Expect` is answered first (RFC 9110
  // 10.1.1): `100-continue` with 100 Continue, or at once 413 when the declared body is
  // over the limit; any other expectation with 417. HTTP/1.0 requests' are ignored.
  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    const HttpRequest& request = parser_->get();
    const auto expect_field = request[http::field::expect];
    std::string_view expect(expect_field.data(), expect_field.size());
    if (expect.empty() || request.version() < 11) return ReadBody();
    while (!expect.empty() && (expect.front() == ' ' || expect.front() == '\t'))
      expect.remove_prefix(1);
    while (!expect.empty() && (expect.back() == ' ' || expect.back() == '\t'))
      expect.remove_suffix(1);
    if (!beast::iequals(beast::string_view(expect.data(), expect.size()), "100-continue")) {
      reading_ = false;
      SetBusy(true);
      version_ = request.version();
      return Fail(http::status::expectation_failed,
                  "unsupported expectation '" + std::string(expect) +
                      "' (only 100-continue is): send the request without it");
    }
    const auto length = parser_->content_length();
    if (length && *length > options_.body_limit) {
      reading_ = false;
      SetBusy(true);
      version_ = request.version();
      return Fail(http::status::payload_too_large,
                  "request body larger than " + std::to_string(options_.body_limit) + " bytes");
    }
    // A client that sent its body without waiting needs no 100.
    if (parser_->is_done() || buffer_.size() > 0) return ReadBody();
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    auto& socket = stream_.socket();
    beast::error_code send_error;
    if (!socket.native_non_blocking()) socket.native_non_blocking(true, send_error);
    std::size_t sent = 0;
    if (!send_error) sent = socket.send(asio::buffer(kContinue), 0, send_error);
    if (send_error && send_error != asio::error::would_block &&
        send_error != asio::error::try_again)
      return Close();
    if (sent == kContinue.size()) return ReadBody();
    asio::async_write(stream_, asio::buffer(kContinue) + sent,
                      [self = shared_from_this()](beast::error_code failed, std::size_t) {
                        if (failed) return self->Close();
                        self->ReadBody();
                      });
  }

  // The body: what came with the header is parsed here (no further read operation for
  // the usual small request), the rest is read.
  void ReadBody() {
    beast::error_code parsed;
    while (!parser_->is_done() && buffer_.size() > 0) {
      const std::size_t n = parser_->put(buffer_.data(), parsed);
      buffer_.consume(n);
      if (parsed == http::error::need_more) {
        parsed = {};
        break;
      }
      if (parsed || n == 0) break;
    }
    if (parsed || parser_->is_done()) return OnRead(parsed);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    reading_ = false;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof || closed_) {
      return Close();
    }
    SetBusy(true);  // until the response is written
    if (ec == http::error::body_limit) {
      return Fail(http::status::payload_too_large,
                  "request body larger than " + std::to_string(options_.body_limit) + " bytes");
    }
    if (ec == http::error::header_limit) {
      return Fail(http::status::request_header_fields_too_large,
                  "request header larger than " + std::to_string(options_.header_limit) + " bytes");
    }
    if (ec) return Fail(http::status::bad_request, "malformed HTTP request: " + ec.message());
    HttpRequest request = parser_->release();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    stream_.expires_never();
    auto self = shared_from_this();
    const uint64_t answering = ++requests_;
    answering_ = answering;
    listener_->context.handler(
        std::move(request),
        Respond(
            [self](HttpResponse response) {
              // On the connection's strand: at once when the answer comes on it (a
              // handler that answered inline), else queued to it. On the store client's
              // I/O thread (sluiced), the queue is that thread's own: no other thread is
              // woken.
              asio::dispatch(self->strand_, [self, response = std::move(response)]() mutable {
                self->Write(std::move(response));
              });
            },
            [self, answering](std::function<void()> gone) {
              asio::dispatch(self->strand_, [self, answering, gone = std::move(gone)]() mutable {
                self->WatchClientGone(answering, std::move(gone));
              });
            }));
  }

  // Respond::OnClientGone for request `answering`. Nothing reads the socket while a
  // request is decided, so the socket turns readable only for a FIN, a reset or the
  // client's next request: the first two call `gone` and close the connection, the last
  // ends the watch (its bytes are left for the next read). A client whose next request
  // was read already is there: no watch.
  void WatchClientGone(uint64_t answering, std::function<void()> gone) {
    if (closed_ || answering != answering_ || buffer_.size() > 0) return;
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), answering,
                                 gone = std::move(gone)](beast::error_code ec) mutable {
          if (ec || self->closed_ || answering != self->answering_) return;
          char byte;
          const ssize_t n =
              ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n > 0) return;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return self->WatchClientGone(answering, std::move(gone));
          self->Close();
          gone();
        });
  }

  void Fail(http::status status, const std::string& message) {
    keep_alive_ = false;
    Write(MakeResponse(status, ErrorJson(message)));
  }

  // The response is written as one buffer built here (status line, fields, body) in a
  // string the session keeps for its next responses: no serializer, no allocation once
  // the string has grown to the usual response size.
  void Write(HttpResponse response) {
    answering_ = 0;
    if (closed_) return;
    if (listener_->draining()) keep_alive_ = false;
    response.version(version_);
    response.keep_alive(keep_alive_);
    response.prepare_payload();
    out_.clear();
    out_ += "HTTP/";
    out_ += static_cast<char>('0' + version_ / 10);
    out_ += '.';
    out_ += static_cast<char>('0' + version_ % 10);
    out_ += ' ';
    char code[8];
    const auto end = std::to_chars(code, code + sizeof code, response.result_int()).ptr;
    out_.append(code, end);
    out_ += ' ';
    const auto reason = response.reason();
    out_.append(reason.data(), reason.size());
    out_ += "\r\n";
    for (const auto& field : response) {
      const auto name = field.name_string();
      const auto value = field.value();
      out_.append(name.data(), name.size());
      out_ += ": ";
      out_.append(value.data(), value.size());
      out_ += "\r\n";
    }
    out_ += "\r\n";
    out_ += response.body();
    // Most responses fit the socket's buffer: one non-blocking send, no write operation,
    // timer or reactor round. What does not fit is written asynchronously, with the
    // write timeout.
    auto& socket = stream_.socket();
    beast::error_code send_error;
    if (!socket.native_non_blocking()) socket.native_non_blocking(true, send_error);
    std::size_t sent = 0;
    if (!send_error) sent = socket.send(asio::buffer(out_), 0, send_error);
    if (send_error && send_error != asio::error::would_block &&
        send_error != asio::error::try_again)
      return Close();
    if (sent == out_.size()) {
      SetBusy(false);
      if (!keep_alive_) return Close();
      return Read();
    }
    stream_.expires_after(options_.write_timeout);
    asio::async_write(stream_, asio::buffer(out_) + sent,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->SetBusy(false);
                        if (ec || !self->keep_alive_) return self->Close();
                        self->Read();
                      });
  }

  // Whether a request is in progress on this connection (the server's drain waits for
  // none to be).
  void SetBusy(bool busy) {
    if (busy == busy_) return;
    busy_ = busy;
    listener_->AddBusy(busy ? 1 : -1);
  }

  void Close() {
    SetBusy(false);
    if (closed_) return;
    closed_ = true;
    drain_timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  Strand strand_;
  Stream stream_;
  asio::basic_waitable_timer<std::chrono::steady_clock,
                             asio::wait_traits<std::chrono::steady_clock>, Strand>
      drain_timer_{strand_};
  std::shared_ptr<HttpListener> listener_;
  const HttpServerOptions& options_;  // listener_'s
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string out_;  // the response being written
  bool keep_alive_ = false;
  bool closed_ = false;
  bool reading_ = false;    // a request is being read
  bool busy_ = false;       // counted in the listener's busy()
  uint64_t requests_ = 0;   // requests handed to the handler so far
  uint64_t answering_ = 0;  // the one being decided (its number), or 0
  unsigned version_ = 11;
};

}  // namespace http_detail

using http_detail::HttpListener;
using http_detail::Session;
namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

HttpResponse MakeResponse(http::status status, std::string body, std::string_view content_type) {
  HttpResponse response{status, 11};
  response.set(http::field::server, "sluiced");
  response.set(http::field::content_type, std::string(content_type));
  response.body() = std::move(body);
  return response;
}

sluice::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                                HttpHandler handler) {
  beast::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec)
    return sluice::InvalidArgumentError("bad listen address '" + options.host +
                                        "': " + ec.message());
  std::unique_ptr<HttpServer> server(new HttpServer());
  std::vector<asio::io_context::executor_type> executors;
  if (options.executor) {
    executors.push_back(*options.executor);
  } else {
    // One io_context per thread: a connection's strand then never waits for another
    // thread.
    for (int i = 0; i < std::max(1, options.threads); ++i) {
      server->ios_.push_back(std::make_unique<asio::io_context>(1));
      CreateReactorNow(*server->ios_.back());
      executors.push_back(server->ios_.back()->get_executor());
      server->work_.push_back(asio::make_work_guard(*server->ios_.back()));
    }
  }
  const tcp::endpoint endpoint(address, options.port);
  const std::string where = (address.is_v6() ? "[" + options.host + "]" : options.host) + ":" +
                            std::to_string(options.port);
  auto listener = std::make_shared<HttpListener>(
      "http", http_detail::HttpContext{std::move(options), std::move(handler)},
      std::move(executors), [](HttpListener::Socket socket, std::shared_ptr<HttpListener> on) {
        return std::make_shared<Session>(std::move(socket), std::move(on));
      });
  if (ec = listener->Listen(endpoint); ec)
    return sluice::UnavailableError("cannot listen on " + where + ": " + ec.message());
  server->port_ = listener->port();
  server->listener_ = listener;
  listener->Start();
  for (auto& io : server->ios_) {
    server->threads_.emplace_back([io = io.get()] { io->run(); });
  }
  return server;
}

void HttpServer::Drain() {
  if (!stopped_) listener_->Drain();
}

int HttpServer::requests_in_flight() const {
  return listener_->busy();
}

void HttpServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // A server whose listener could not listen (Start failed) started no thread.
  if (!listener_) return;
  if (ios_.empty()) {
    // On a given executor: close the acceptor and every connection there; what is
    // still queued holds the listener until it has run.
    listener_->Stop();
    return;
  }
  // Before the work guards go: the acceptor's close is posted to one of these threads.
  listener_->Stop();
  work_.clear();
  for (auto& io : ios_) io->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

HttpServer::~HttpServer() {
  Stop();
}

}  // namespace sluiced
