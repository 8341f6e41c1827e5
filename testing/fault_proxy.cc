#include "testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>

#include "testing/redis_server.h"

namespace sluice::testing {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "fault proxy: %s (errno %d)\n", what.c_str(), errno);
  std::abort();
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Closes with a RST instead of a FIN.
void CloseWithReset(int fd) {
  if (fd < 0) return;
  linger l{.l_onoff = 1, .l_linger = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  return addr;
}

// A connected non-blocking socket to 127.0.0.1:port, or -1 (refused, or no answer
// within 500 ms).
int ConnectUpstream(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = Loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, 500) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0) {
      ::close(fd);
      return -1;
    }
  }
  NoDelay(fd);
  return fd;
}

}  // namespace

// One direction of one connection: bytes read from one side, held until they may go.
struct FaultProxy::Flow {
  struct Chunk {
    std::string bytes;
    std::size_t offset = 0;
    steady_clock::time_point due;
  };
  Faults faults;
  std::deque<Chunk> chunks;
  std::size_t buffered = 0;
  steady_clock::time_point last_due{};
  bool eof = false;         // the sending side closed
  bool want_write = false;  // the receiving side's socket was full
  double tokens = 0;
  steady_clock::time_point refilled{};

  bool Stalled(steady_clock::time_point now) const { return now < faults.stall_until; }
  // Bytes a write may take now under the bandwidth cap (refilled first); -1: no cap.
  int64_t Allowance(steady_clock::time_point now) {
    if (faults.bandwidth <= 0) return -1;
    const double rate = static_cast<double>(faults.bandwidth);
    const double burst = std::max(1.0, rate / 10);
    if (refilled.time_since_epoch().count() == 0) {
      tokens = 0;
    } else {
      tokens += rate * std::chrono::duration<double>(now - refilled).count();
    }
    tokens = std::min(tokens, burst);
    refilled = now;
    return static_cast<int64_t>(tokens);
  }
  // The smallest write worth waking up for under the cap (about 50 writes a second).
  int64_t Threshold(std::size_t pending) const {
    return std::min<int64_t>(static_cast<int64_t>(pending),
                             std::max<int64_t>(1, faults.bandwidth / 50));
  }
};

struct FaultProxy::Connection {
  int id = 0;
  int fd[2] = {-1, -1};  // [0]: the client's socket, [1]: the upstream's
  Flow flow[2];          // [0]: to the server (read from fd[0]), [1]: to the client
  bool blackholed = false;
  bool reset_requested = false;
  bool closed = false;
  std::size_t poll_index[2] = {0, 0};
  bool polled[2] = {false, false};
};

FaultProxy::FaultProxy(uint16_t upstream_port, FaultProxyOptions options)
    : upstream_port_(upstream_port), options_(options), rng_(options.seed) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) Fatal("eventfd() failed");
  {
    internal::MutexLock lock(mu_);
    for (int attempt = 0; attempt < 20 && listen_fd_ < 0; ++attempt) {
      port_ = FreeLoopbackPort();
      Listen();
    }
    if (listen_fd_ < 0) Fatal("could not listen on a free loopback port");
  }
  thread_ = std::thread([this] { Run(); });
}

FaultProxy::~FaultProxy() {
  Stop();
  ::close(wake_fd_);
}

std::string FaultProxy::address() const {
  return "127.0.0.1:" + std::to_string(port_);
}

bool FaultProxy::Listen() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = Loopback(port_);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
    ::close(fd);
    return false;
  }
  listen_fd_ = fd;
  return true;
}

void FaultProxy::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void FaultProxy::Sync() {
  uint64_t target;
  {
    internal::MutexLock lock(mu_);
    if (stopping_) return;
    target = loops_ + 1;
  }
  Wake();
  const auto until = steady_clock::now() + std::chrono::seconds(5);
  while (steady_clock::now() < until) {
    {
      internal::MutexLock lock(mu_);
      if (loops_ >= target || stopping_) return;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  Fatal("the proxy's thread did not come round within 5 s");
}

void FaultProxy::Stop() {
  {
    internal::MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  internal::MutexLock lock(mu_);
  for (auto& c : connections_) CloseConnection(*c, /*reset=*/false);
  connections_.clear();
  stats_.live = 0;
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

std::vector<int> FaultProxy::Connections() const {
  internal::MutexLock lock(mu_);
  std::vector<int> ids;
  for (const auto& c : connections_)
    if (!c->closed) ids.push_back(c->id);
  return ids;
}

FaultProxyStats FaultProxy::stats() const {
  internal::MutexLock lock(mu_);
  return stats_;
}

template <typename F>
void FaultProxy::ForEach(int connection, int directions, F f) {
  for (int d = 0; d < 2; ++d) {
    if ((directions & (1 << d)) == 0) continue;
    if (connection == kAllConnections) f(defaults_[d]);
    for (auto& c : connections_)
      if (connection == kAllConnections || c->id == connection) f(c->flow[d].faults);
  }
}

void FaultProxy::AddLatency(Direction direction, milliseconds latency, milliseconds jitter,
                            int connection) {
  {
    internal::MutexLock lock(mu_);
    ForEach(connection, static_cast<int>(direction), [&](Faults& f) {
      f.latency = latency;
      f.jitter = jitter;
    });
  }
  Sync();
}

void FaultProxy::Stall(Direction direction, milliseconds duration, int connection) {
  const auto until =
      duration.count() == 0 ? steady_clock::time_point::max() : steady_clock::now() + duration;
  {
    internal::MutexLock lock(mu_);
    ForEach(connection, static_cast<int>(direction), [&](Faults& f) { f.stall_until = until; });
  }
  Sync();
}

void FaultProxy::Blackhole(int connection) {
  {
    internal::MutexLock lock(mu_);
    if (connection == kAllConnections) blackhole_new_ = true;
    for (auto& c : connections_) {
      if (connection != kAllConnections && c->id != connection) continue;
      c->blackholed = true;
      for (Flow& f : c->flow) {
        stats_.bytes_dropped += static_cast<int64_t>(f.buffered);
        f.chunks.clear();
        f.buffered = 0;
      }
    }
  }
  Sync();
}

void FaultProxy::Reset(int connection) {
  {
    internal::MutexLock lock(mu_);
    for (auto& c : connections_)
      if (connection == kAllConnections || c->id == connection) c->reset_requested = true;
  }
  Sync();
}

void FaultProxy::CloseAfter(Direction direction, int64_t bytes, int connection) {
  {
    internal::MutexLock lock(mu_);
    ForEach(connection, static_cast<int>(direction), [&](Faults& f) { f.close_after = bytes; });
  }
  Sync();
}

void FaultProxy::LimitBandwidth(Direction direction, int64_t bytes_per_second, int connection) {
  {
    internal::MutexLock lock(mu_);
    ForEach(connection, static_cast<int>(direction),
            [&](Faults& f) { f.bandwidth = bytes_per_second; });
  }
  Sync();
}

void FaultProxy::RefuseNewConnections(bool refuse) {
  {
    internal::MutexLock lock(mu_);
    refuse_ = refuse;
  }
  Sync();
}

void FaultProxy::Heal() {
  {
    internal::MutexLock lock(mu_);
    refuse_ = false;
    blackhole_new_ = false;
    defaults_[0] = defaults_[1] = Faults{};
    for (auto& c : connections_) {
      for (Flow& f : c->flow) {
        f.faults = Faults{};
        f.last_due = {};
        for (Flow::Chunk& chunk : f.chunks) chunk.due = {};
      }
      if (c->blackholed) c->reset_requested = true;
    }
  }
  Sync();
}

void FaultProxy::CloseConnection(Connection& c, bool reset) {
  if (c.closed) return;
  c.closed = true;
  for (int& fd : c.fd) {
    if (fd < 0) continue;
    if (reset) {
      CloseWithReset(fd);
    } else {
      ::close(fd);
    }
    fd = -1;
  }
  if (reset) ++stats_.resets;
  --stats_.live;
}

void FaultProxy::Accept() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    ++stats_.accepted;
    if (stats_.live >= options_.max_connections) {
      CloseWithReset(fd);
      ++stats_.resets;
      continue;
    }
    NoDelay(fd);
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->fd[0] = fd;
    c->flow[0].faults = defaults_[0];
    c->flow[1].faults = defaults_[1];
    if (blackhole_new_) {
      c->blackholed = true;
    } else {
      c->fd[1] = ConnectUpstream(upstream_port_);
      if (c->fd[1] < 0) {
        CloseWithReset(fd);
        ++stats_.upstream_fails;
        continue;
      }
    }
    ++stats_.live;
    connections_.push_back(std::move(c));
  }
}

bool FaultProxy::ReadSide(Connection& c, int dir, steady_clock::time_point now) {
  Flow& flow = c.flow[dir];
  char buf[65536];
  while (!flow.eof && flow.buffered < options_.max_buffered) {
    const std::size_t room = std::min(sizeof buf, options_.max_buffered - flow.buffered);
    const ssize_t n = ::read(c.fd[dir], buf, room);
    if (n == 0) {
      flow.eof = true;
      break;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    if (c.blackholed) {
      stats_.bytes_dropped += n;
      continue;
    }
    milliseconds delay = flow.faults.latency;
    if (flow.faults.jitter.count() > 0)
      delay +=
          milliseconds(std::uniform_int_distribution<int64_t>(0, flow.faults.jitter.count())(rng_));
    Flow::Chunk chunk{std::string(buf, static_cast<std::size_t>(n)), 0,
                      std::max(flow.last_due, now + delay)};
    flow.last_due = chunk.due;
    flow.buffered += static_cast<std::size_t>(n);
    flow.chunks.push_back(std::move(chunk));
  }
  return true;
}

bool FaultProxy::WriteSide(Connection& c, int dir, steady_clock::time_point now) {
  Flow& flow = c.flow[dir];
  const int to = c.fd[1 - dir];
  flow.want_write = false;
  if (c.blackholed || to < 0) return true;
  while (!flow.chunks.empty()) {
    if (flow.faults.close_after == 0) return false;
    if (flow.Stalled(now)) break;
    Flow::Chunk& front = flow.chunks.front();
    if (front.due > now) break;
    int64_t size = static_cast<int64_t>(front.bytes.size() - front.offset);
    const int64_t allowance = flow.Allowance(now);
    if (allowance >= 0) {
      if (allowance < flow.Threshold(static_cast<std::size_t>(size))) break;
      size = std::min(size, allowance);
    }
    if (flow.faults.close_after > 0) size = std::min(size, flow.faults.close_after);
    const ssize_t n =
        ::send(to, front.bytes.data() + front.offset, static_cast<std::size_t>(size), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        flow.want_write = true;
        break;
      }
      if (errno == EINTR) continue;
      return false;
    }
    (dir == 0 ? stats_.bytes_to_server : stats_.bytes_to_client) += n;
    if (allowance >= 0) flow.tokens -= static_cast<double>(n);
    front.offset += static_cast<std::size_t>(n);
    flow.buffered -= static_cast<std::size_t>(n);
    if (front.offset == front.bytes.size()) flow.chunks.pop_front();
    if (flow.faults.close_after > 0) {
      flow.faults.close_after -= n;
      if (flow.faults.close_after == 0) return false;
    }
  }
  return true;
}

void FaultProxy::Run() {
  std::vector<pollfd> fds;
  mu_.lock();
  for (;;) {
    // What to wait for, and until when.
    auto now = steady_clock::now();
    auto next = now + milliseconds(100);
    fds.clear();
    fds.push_back({.fd = wake_fd_, .events = POLLIN, .revents = 0});
    const bool listening = listen_fd_ >= 0;
    if (listening) fds.push_back({.fd = listen_fd_, .events = POLLIN, .revents = 0});
    for (auto& c : connections_) {
      short events[2] = {0, 0};
      for (int d = 0; d < 2; ++d) {
        Flow& f = c->flow[d];
        if (c->fd[d] >= 0 && !f.eof && f.buffered < options_.max_buffered) events[d] |= POLLIN;
        if (f.want_write && c->fd[1 - d] >= 0) events[1 - d] |= POLLOUT;
        if (f.chunks.empty() || c->blackholed) continue;
        if (f.Stalled(now)) {
          next = std::min(next, f.faults.stall_until);
        } else if (f.chunks.front().due > now) {
          next = std::min(next, f.chunks.front().due);
        } else if (f.faults.bandwidth > 0) {
          const auto& front = f.chunks.front();
          const double need = static_cast<double>(f.Threshold(front.bytes.size() - front.offset));
          const double wait_s =
              std::max(0.0, need - f.tokens) / static_cast<double>(f.faults.bandwidth);
          next = std::min(next, now + std::chrono::duration_cast<steady_clock::duration>(
                                          std::chrono::duration<double>(wait_s)));
        }
      }
      for (int s = 0; s < 2; ++s) {
        c->polled[s] = c->fd[s] >= 0;
        if (!c->polled[s]) continue;
        c->poll_index[s] = fds.size();
        fds.push_back({.fd = c->fd[s], .events = events[s], .revents = 0});
      }
    }
    const auto wait = std::chrono::ceil<milliseconds>(next - now).count();
    mu_.unlock();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait)));
    mu_.lock();
    if (stopping_) {
      mu_.unlock();
      return;
    }

    uint64_t drained;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &drained, sizeof drained);
    if (listening && refuse_) {
      ::close(listen_fd_);
      listen_fd_ = -1;
    } else if (listening && (fds[1].revents & POLLIN) != 0) {
      Accept();
    } else if (!listening && !refuse_) {
      Listen();
    }
    now = steady_clock::now();
    for (auto& cp : connections_) {
      Connection& c = *cp;
      if (c.closed) continue;
      if (c.reset_requested) {
        CloseConnection(c, /*reset=*/true);
        continue;
      }
      bool alive = true;
      for (int d = 0; d < 2 && alive; ++d) {
        if (c.polled[d] && fds[c.poll_index[d]].revents != 0) alive = ReadSide(c, d, now);
      }
      if (!alive) {
        CloseConnection(c, /*reset=*/true);
        continue;
      }
      bool closing = false;
      for (int d = 0; d < 2 && alive; ++d) {
        const int64_t before = c.flow[d].faults.close_after;
        alive = WriteSide(c, d, now);
        if (!alive && (before >= 0 && c.flow[d].faults.close_after == 0)) closing = true;
      }
      if (!alive) {
        if (closing) ++stats_.closed_after;
        CloseConnection(c, /*reset=*/!closing);
        continue;
      }
      for (int d = 0; d < 2; ++d) {
        const Flow& f = c.flow[d];
        if (f.faults.close_after == 0) {
          ++stats_.closed_after;
          CloseConnection(c, /*reset=*/false);
          break;
        }
        // The sender closed: close once what it sent went out (or at once when it can
        // never go out).
        if (f.eof && (f.chunks.empty() || c.blackholed)) {
          CloseConnection(c, /*reset=*/false);
          break;
        }
      }
    }
    std::erase_if(connections_, [](const auto& c) { return c->closed; });
    ++loops_;
  }
}

}  // namespace sluice::testing
