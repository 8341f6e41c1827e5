// A private redis-server for one test: started on a free loopback port (and a unix
// socket in a temporary directory), stopped by its pid when the object goes away.
// Also blocking commands (through src/redis/'s BlockingClient) to seed and inspect keys.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "redis/blocking_client.h"
#include "redis/reply.h"

namespace sluice::testing {

// A server that speaks TLS only (--port 0 --tls-port <port>), with the files of
// testing/tls_certificates.h.
struct RedisTlsFiles {
  std::string ca_file, cert_file, key_file;
  // tls-auth-clients yes: a client must present a certificate signed by ca_file (the
  // fixture's own client, and url(), present client_cert_file / client_key_file).
  bool require_client_cert = false;
  std::string client_cert_file, client_key_file;
};

struct RedisServerOptions {
  std::string requirepass;              // sets requirepass when not empty
  std::vector<std::string> extra_args;  // appended to the command line
  std::optional<RedisTlsFiles> tls;     // TLS only, on port()
  // Not empty: run as a Sentinel (redis-server <conf> --sentinel) with these lines of
  // configuration after the port, bind, dir and logfile the fixture writes (with `tls`:
  // TLS only, to clients and to the data nodes); extra_args, requirepass and the unix
  // socket do not apply.
  std::string sentinel_config;
  // The directory its own temporary directory (data, config, log, socket) is made in.
  // Default: /tmp.
  std::string parent_dir = "/tmp";
};

// One reply, owned (internal::Reply: type, integer, str, elements), for assertions.
using RedisValue = internal::Reply;

class RedisServer {
 public:
  // Starts redis-server; aborts the test binary with a clear message when it cannot
  // (a missing redis-server is a set-up error, never a reason to skip).
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& unix_path() const { return unix_path_; }
  // redis://[:requirepass@]127.0.0.1:<port>, or with TLS
  // rediss://[:requirepass@]127.0.0.1:<port>?ca=<file>[&cert=<file>&key=<file>]
  std::string url() const;

  // SIGSTOP / SIGCONT: a server that is alive but silent.
  void Pause();
  void Resume();
  // SIGKILL and wait; Start() again brings it back on the same port (empty).
  void Kill();
  void Start();
  bool running() const { return pid_ > 0; }

  // Runs one command (authenticated) on the fixture's own connection, made at Start and
  // again when the server was restarted or the connection lost. Aborts the test when
  // the server cannot be reached or does not answer within 10 s.
  RedisValue Command(const std::vector<std::string>& args) const;
  // The server's clock (TIME), in ms.
  int64_t NowMs() const;
  // A connection of the caller's own (for a test that must not share the fixture's);
  // aborts the test when it cannot connect.
  std::unique_ptr<internal::BlockingClient> Connect() const;
  // Closes the fixture's own connection: its I/O thread and Asio's resolver thread end.
  // The next Command() opens a new one. testing::Fork() closes every fixture's.
  void CloseClient() const;
  // CloseClient() on every RedisServer alive in this process.
  static void CloseAllClients();
  // All keys matching `pattern` (SCAN), and those among them with no expiry.
  std::vector<std::string> Keys(const std::string& pattern) const;
  std::vector<std::string> KeysWithoutTtl(const std::string& pattern) const;
  // How many times Redis ran `command` (lower case, e.g. "zrem"; inside scripts too)
  // since it started or the last CONFIG RESETSTAT: INFO commandstats' calls=, 0 when
  // it never ran.
  int64_t CommandCalls(const std::string& command) const;

 private:
  RedisServerOptions options_;
  std::string dir_;
  std::string unix_path_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
  mutable internal::Mutex client_mu_;
  mutable std::shared_ptr<internal::BlockingClient> client_ SLUICE_GUARDED_BY(client_mu_);
};

// A free TCP port on 127.0.0.1, below the kernel's ephemeral range (see redis_server.cc).
uint16_t FreeLoopbackPort();

// The server program every fixture starts, and its command-line client: redis-server
// and redis-cli from PATH, or, when the environment variable SLUICE_TEST_SERVER_DIR
// names a directory, the redis-server (else valkey-server) and redis-cli (else
// valkey-cli) in it, so the whole suite runs against the server one deploys. Aborts
// the test binary when that directory holds neither.
const std::string& ServerProgram();
const std::string& CliProgram();

}  // namespace sluice::testing
