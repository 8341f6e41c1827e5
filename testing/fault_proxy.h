// A TCP proxy on loopback for fault tests: it listens on a free 127.0.0.1 port and
// forwards every connection to an upstream port (a redis-server, a sentinel, a cluster
// node), and injects network faults per direction and per connection while traffic
// runs: added latency with jitter, a stall (bytes are held, the sockets stay open),
// a blackhole (connections accepted, nothing answered), a reset (RST), a close after N
// bytes, a bandwidth cap, and refused connections (nothing listens). Heal() ends every
// fault at once.
//
// The proxy forwards bytes, nothing else: a cluster node or a sentinel behind it still
// announces its own address, so only the first hop (a seed, a sentinel link) goes
// through the proxy.
//
// Bounds: at most `max_connections` live connections (more are reset at once) and at
// most `max_buffered` bytes held per direction and connection (past that it stops
// reading that side, so the sender's socket fills up: back-pressure, as on a slow
// link). One thread of its own polls every socket; the destructor (or Stop) ends it and
// closes every socket.
//
// Thread-safety: every member is thread-safe and takes effect on live connections at
// once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace sluice::testing {

// Bit set: which way a fault applies.
enum class Direction : int {
  kToServer = 1,  // bytes from the client to the upstream
  kToClient = 2,  // bytes from the upstream to the client
  kBoth = 3,
};

// The `connection` argument of the faults: every live connection and every new one.
inline constexpr int kAllConnections = 0;

struct FaultProxyOptions {
  int max_connections = 256;
  std::size_t max_buffered = 1 << 20;
  uint32_t seed = 1;  // of the jitter
};

struct FaultProxyStats {
  int64_t accepted = 0;      // connections accepted (blackholed ones too)
  int64_t live = 0;          // connections open now
  int64_t resets = 0;        // connections ended by a RST (Reset, at the cap, heal of a blackhole)
  int64_t closed_after = 0;  // connections closed by CloseAfter
  int64_t upstream_fails = 0;  // accepted connections whose upstream connect failed (reset)
  int64_t bytes_to_server = 0;
  int64_t bytes_to_client = 0;
  int64_t bytes_dropped = 0;  // read from a blackholed connection and thrown away
};

class FaultProxy {
 public:
  // Forwards 127.0.0.1:port() to 127.0.0.1:upstream_port. Aborts the test binary when
  // it cannot listen.
  explicit FaultProxy(uint16_t upstream_port, FaultProxyOptions options = {});
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  uint16_t port() const { return port_; }
  // "127.0.0.1:<port>", and redis://127.0.0.1:<port>.
  std::string address() const;
  std::string url() const { return "redis://" + address(); }

  // Ids of the connections open now (1, 2, ... in accept order), oldest first.
  std::vector<int> Connections() const;
  FaultProxyStats stats() const;

  // Each byte is held `latency` plus a uniform 0..`jitter` before it is forwarded (order
  // kept: a byte never overtakes an earlier one).
  void AddLatency(Direction direction, std::chrono::milliseconds latency,
                  std::chrono::milliseconds jitter = std::chrono::milliseconds(0),
                  int connection = kAllConnections);
  // Stops forwarding for `duration` (0: until Heal): bytes are read and held (up to
  // max_buffered), the sockets stay open, and everything held goes out when it ends.
  void Stall(Direction direction, std::chrono::milliseconds duration,
             int connection = kAllConnections);
  // Nothing is answered: bytes in both directions are read and thrown away. For
  // kAllConnections, new connections are accepted but never connected upstream. A
  // blackholed connection lost bytes, so it cannot resume: Heal() resets it.
  void Blackhole(int connection = kAllConnections);
  // Ends the connection(s) open now with a RST to the client (SO_LINGER 0) and to the
  // upstream.
  void Reset(int connection = kAllConnections);
  // After `bytes` more bytes in `direction` (each direction of kBoth counted on its
  // own), closes the connection (FIN both ways), so a reply can end mid-way.
  void CloseAfter(Direction direction, int64_t bytes, int connection = kAllConnections);
  // At most `bytes_per_second` forwarded in `direction` (0: no cap).
  void LimitBandwidth(Direction direction, int64_t bytes_per_second,
                      int connection = kAllConnections);
  // true: the listening socket is closed, so a connect() is refused (ECONNREFUSED) while
  // the connections open now carry on; false: it listens again on the same port.
  void RefuseNewConnections(bool refuse);
  // Every fault off, on every connection and for new ones: held bytes go out now,
  // blackholed connections are reset, the proxy listens again.
  void Heal();

  // Ends the thread and closes every socket (also done by the destructor).
  void Stop();

 private:
  struct Faults {
    std::chrono::milliseconds latency{0}, jitter{0};
    std::chrono::steady_clock::time_point stall_until{};
    int64_t bandwidth = 0;
    int64_t close_after = -1;  // bytes left before the close; -1: none
  };
  struct Flow;
  struct Connection;

  void Run();
  void Accept() SLUICE_REQUIRES(mu_);
  bool Listen() SLUICE_REQUIRES(mu_);
  // Reads what `from` has into the flow's buffer; false when the connection ended.
  bool ReadSide(Connection& c, int dir, std::chrono::steady_clock::time_point now)
      SLUICE_REQUIRES(mu_);
  bool WriteSide(Connection& c, int dir, std::chrono::steady_clock::time_point now)
      SLUICE_REQUIRES(mu_);
  void CloseConnection(Connection& c, bool reset) SLUICE_REQUIRES(mu_);
  template <typename F>
  void ForEach(int connection, int directions, F f) SLUICE_REQUIRES(mu_);
  void Wake();
  // Returns once the proxy's thread has been round its loop after the caller's change
  // (so a fault is in force when its setter returns).
  void Sync();

  const uint16_t upstream_port_;
  const FaultProxyOptions options_;
  uint16_t port_ = 0;
  int wake_fd_ = -1;
  std::thread thread_;

  mutable internal::Mutex mu_;
  int listen_fd_ SLUICE_GUARDED_BY(mu_) = -1;
  bool refuse_ SLUICE_GUARDED_BY(mu_) = false;
  bool blackhole_new_ SLUICE_GUARDED_BY(mu_) = false;
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  Faults defaults_[2] SLUICE_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Connection>> connections_ SLUICE_GUARDED_BY(mu_);
  uint64_t loops_ SLUICE_GUARDED_BY(mu_) = 0;
  int next_id_ SLUICE_GUARDED_BY(mu_) = 1;
  FaultProxyStats stats_ SLUICE_GUARDED_BY(mu_);
  std::mt19937 rng_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace sluice::testing
