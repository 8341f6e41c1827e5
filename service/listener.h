// service/listener.h — what both of sluiced's servers (HTTP, gRPC) do with their
// listening socket: accept on a strand of its own; hand each connection, on a strand of
// the next executor (round robin), to the server's `Open`; keep a registry of the open
// connections, so that Stop closes them all (also on an executor that runs on after the
// server is gone: sluiced's store client's); and back off from accept errors that
// retrying at once cannot clear (accept_backoff.h).
//
// A Connection has Start() (called once, on the acceptor's strand, after it is
// registered: it moves onto its own strand), Drain() (from any thread: on its strand, it
// finishes what it has in progress and takes no new calls), Shutdown() (from any
// thread: closes it on its strand) and calls Forget(this) from its destructor. `Context` is what
// every connection shares (options, handlers). Connections and pending handlers hold the Listener:
// it lives as long as one of them does.
#pragma once

#include "sluice/boost_first.h"  // before any Boost header

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "service/accept_backoff.h"

namespace sluiced {

template <typename Connection, typename Context>
class Listener : public std::enable_shared_from_this<Listener<Connection, Context>> {
 public:
  using Executor = boost::asio::io_context::executor_type;
  using Strand = boost::asio::strand<Executor>;
  using Socket = boost::asio::basic_stream_socket<boost::asio::ip::tcp, Strand>;
  // The connection for an accepted socket, or null to drop it.
  using Open =
      std::function<std::shared_ptr<Connection>(Socket, std::shared_ptr<Listener> listener)>;

  // `name` goes into the log lines ("http", "grpc"); `executors` must not be empty.
  Listener(std::string name, Context shared, std::vector<Executor> executors, Open open)
      : context(std::move(shared)),
        name_(std::move(name)),
        executors_(std::move(executors)),
        open_(std::move(open)),
        acceptor_(boost::asio::make_strand(executors_.front())),
        accept_backoff_(acceptor_.get_executor()) {}

  // Binds and listens (before Start).
  boost::system::error_code Listen(const boost::asio::ip::tcp::endpoint& endpoint) {
    boost::system::error_code ec;
    if (acceptor_.open(endpoint.protocol(), ec); !ec)
      acceptor_.set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(boost::asio::socket_base::max_listen_connections, ec);
    return ec;
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

  void Start() {
    boost::asio::post(acceptor_.get_executor(),
                      [self = this->shared_from_this()] { self->Accept(); });
  }

  // Stops accepting (new connections are refused: the socket no longer listens) and
  // asks every connection to drain (asynchronously, each on its strand). Not from the
  // acceptor's strand; waits until the acceptor is closed.
  // The connections the kernel has already completed (in the listen backlog) are taken
  // and drained too: closing the socket would reset them.
  void Drain() {
    CloseAcceptor(/*take_backlog=*/true);
    draining_.store(true);
    for (auto& connection : OpenConnections()) connection->Drain();
  }

  // Stops accepting and closes every connection (asynchronously, each on its strand).
  // Not from the acceptor's strand; waits until the acceptor is closed.
  void Stop() {
    stopped_.store(true);
    CloseAcceptor(/*take_backlog=*/false);
    for (auto& connection : OpenConnections()) connection->Shutdown();
  }

  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  bool draining() const { return draining_.load(std::memory_order_relaxed); }

  // Connections not destroyed yet.
  std::size_t open_connections() {
    std::lock_guard lock(mu_);
    return connections_.size();
  }
  // Calls in progress, as the connections count them (AddBusy) for the drain.
  void AddBusy(int delta) { busy_.fetch_add(delta, std::memory_order_relaxed); }
  int busy() const { return busy_.load(std::memory_order_relaxed); }

  // From a connection's destructor.
  void Forget(const Connection* connection) {
    std::lock_guard lock(mu_);
    connections_.erase(connection);
  }

  // The connections not destroyed yet.
  std::vector<std::shared_ptr<Connection>> OpenConnections() {
    std::vector<std::shared_ptr<Connection>> open;
    std::lock_guard lock(mu_);
    for (auto& [_, weak] : connections_) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
    return open;
  }

  const Context context;

 private:
  void CloseAcceptor(bool take_backlog) {
    if (acceptor_closed_.exchange(true)) return;
    std::promise<void> closed;
    boost::asio::post(acceptor_.get_executor(), [this, &closed, take_backlog] {
      boost::system::error_code ignored;
      if (take_backlog && acceptor_.is_open() && !accept_failing_) {
        acceptor_.non_blocking(true, ignored);
        for (int i = 0; i < 4096; ++i) {
          Socket socket(boost::asio::make_strand(executors_[next_++ % executors_.size()]));
          boost::system::error_code ec;
          acceptor_.accept(socket, ec);
          if (ec) break;
          Adopt(std::move(socket));
        }
      }
      acceptor_.close(ignored);
      accept_backoff_.cancel();
      closed.set_value();
    });
    closed.get_future().wait();
  }

  void Accept() {
    const Strand strand = boost::asio::make_strand(executors_[next_++ % executors_.size()]);
    acceptor_.async_accept(
        strand, [self = this->shared_from_this()](boost::system::error_code ec, Socket socket) {
          if (ec == boost::asio::error::operation_aborted || !self->acceptor_.is_open() ||
              self->stopped())
            return;
          NoteAcceptResult(self->name_, ec, self->accept_failing_);
          if (AcceptNeedsBackoff(ec)) return self->AcceptLater();
          if (!ec) self->Adopt(std::move(socket));
          self->Accept();
        });
  }

  // An accepted socket: its connection is registered and started (on the acceptor's
  // strand).
  void Adopt(Socket socket) {
    boost::system::error_code ignored;
    socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
    if (auto connection = open_(std::move(socket), this->shared_from_this())) {
      {
        std::lock_guard lock(mu_);
        connections_.emplace(connection.get(), connection);
      }
      connection->Start();
    }
  }

  void AcceptLater() {
    accept_backoff_.expires_after(kAcceptBackoff);
    accept_backoff_.async_wait([self = this->shared_from_this()](boost::system::error_code ec) {
      if (ec || !self->acceptor_.is_open() || self->stopped()) return;
      self->Accept();
    });
  }

  const std::string name_;
  const std::vector<Executor> executors_;  // connections go round robin
  const Open open_;
  boost::asio::ip::tcp::acceptor acceptor_;   // on its own strand; touched only there
  boost::asio::steady_timer accept_backoff_;  // on the acceptor's strand
  bool accept_failing_ = false;               // on the acceptor's strand
  std::size_t next_ = 0;                      // on the acceptor's strand
  std::atomic<bool> stopped_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> acceptor_closed_{false};  // CloseAcceptor ran
  std::atomic<int> busy_{0};
  std::mutex mu_;  // guards connections_
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> connections_;
};

}  // namespace sluiced
