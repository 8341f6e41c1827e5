#include "service/http_server.h"

#include <charconv>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>

#include "service/json_api.h"

namespace sluiced {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, asio::io_context& io, const HttpServerOptions& options,
          std::shared_ptr<const HttpHandler> handler)
      : stream_(std::move(socket)), io_(io), options_(options), handler_(std::move(handler)) {}

  void Run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->Read(); });
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    parser_->header_limit(static_cast<std::uint32_t>(options_.header_limit));
    stream_.expires_after(options_.read_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof) {
      return Close();
    }
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
    (*handler_)(std::move(request), [self](HttpResponse response) {
      // To the connection's own thread (its io_context's executor, not the type-erased
      // one of the stream: cheaper to post to).
      asio::post(self->io_, [self, response = std::move(response)]() mutable {
        self->Write(std::move(response));
      });
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
      if (!keep_alive_) return Close();
      return Read();
    }
    stream_.expires_after(options_.write_timeout);
    asio::async_write(stream_, asio::buffer(out_) + sent,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec || !self->keep_alive_) return self->Close();
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  asio::io_context& io_;
  const HttpServerOptions& options_;
  std::shared_ptr<const HttpHandler> handler_;
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string out_;  // the response being written
  bool keep_alive_ = false;
  unsigned version_ = 11;
};

}  // namespace

HttpResponse MakeResponse(http::status status, std::string body, std::string_view content_type) {
  HttpResponse response{status, 11};
  response.set(http::field::server, "sluiced");
  response.set(http::field::content_type, std::string(content_type));
  response.body() = std::move(body);
  return response;
}

namespace {
std::vector<std::unique_ptr<asio::io_context>> MakeContexts(int threads) {
  std::vector<std::unique_ptr<asio::io_context>> ios;
  for (int i = 0; i < std::max(1, threads); ++i)
    ios.push_back(std::make_unique<asio::io_context>(1));
  return ios;
}
}  // namespace

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : options_(std::move(options)),
      handler_(std::make_shared<const HttpHandler>(std::move(handler))),
      ios_(MakeContexts(options_.threads)),
      acceptor_(*ios_[0]) {
  for (auto& io : ios_) work_.push_back(asio::make_work_guard(*io));
}

sluice::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                                HttpHandler handler) {
  beast::error_code ec;
  const auto address = asio::ip::make_address(options.host, ec);
  if (ec)
    return sluice::InvalidArgumentError("bad listen address '" + options.host +
                                        "': " + ec.message());
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options), std::move(handler)));
  const tcp::endpoint endpoint(address, server->options_.port);
  auto& acceptor = server->acceptor_;
  if (acceptor.open(endpoint.protocol(), ec); !ec)
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return sluice::UnavailableError("cannot listen on " + server->options_.host + ":" +
                                    std::to_string(server->options_.port) + ": " + ec.message());
  }
  server->port_ = acceptor.local_endpoint().port();
  server->Accept();
  for (auto& io : server->ios_) {
    server->threads_.emplace_back([io = io.get()] { io->run(); });
  }
  return server;
}

void HttpServer::Accept() {
  asio::io_context& io = *ios_[next_++ % ios_.size()];
  acceptor_.async_accept(io, [this, &io](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), io, options_, handler_)->Run();
    }
    Accept();
  });
}

void HttpServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  asio::post(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
  });
  work_.clear();
  for (auto& io : ios_) io->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

HttpServer::~HttpServer() {
  Stop();
}

}  // namespace sluiced
