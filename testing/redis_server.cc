#include "testing/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <set>
#include <thread>

namespace sluice::testing {
namespace {

[[noreturn]] void Fatal(const std::string& what) {
  std::fprintf(stderr, "redis test fixture: %s\n", what.c_str());
  std::abort();
}

// `dir`/`name` for the first of `names` that is an executable file there.
std::string ProgramIn(const std::string& dir, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const std::string path = dir + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  std::string all;
  for (const char* name : names) all += std::string(all.empty() ? "" : " or ") + name;
  Fatal("SLUICE_TEST_SERVER_DIR=" + dir + " holds no executable " + all);
}

std::string FromServerDir(const char* on_path, std::initializer_list<const char*> names) {
  const char* dir = std::getenv("SLUICE_TEST_SERVER_DIR");
  if (dir == nullptr || *dir == '\0') return on_path;
  return ProgramIn(dir, names);
}

}  // namespace

const std::string& ServerProgram() {
  static const std::string program =
      FromServerDir("redis-server", {"redis-server", "valkey-server"});
  return program;
}

const std::string& CliProgram() {
  static const std::string program = FromServerDir("redis-cli", {"redis-cli", "valkey-cli"});
  return program;
}

namespace {

// The first port of the kernel's ephemeral range (outgoing connections and bind(0) take
// their local ports from it).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (in >> low && low > 0) return low;
  return 32768;
}

bool CanBind(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// Below the ephemeral range: a server killed and restarted on its port (Kill, Start)
// must find the port still free, and every client connection made in between (tests
// reconnect every few ms) takes an ephemeral local port, which would otherwise be
// this one now and then. bind(0) only when that range is too small.
uint16_t FreeLoopbackPort() {
  const int high = EphemeralLow() - 1;
  const int low = 10000;
  if (high - low >= 1000) {
    static internal::Mutex mu;
    static std::mt19937 rng SLUICE_GUARDED_BY(mu)(
        static_cast<uint32_t>(::getpid()) * 2654435761u ^
        static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    internal::MutexLock lock(mu);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const auto port = static_cast<uint16_t>(
          low + static_cast<int>(rng() % static_cast<uint32_t>(high - low + 1)));
      if (CanBind(port)) return port;
    }
  }
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Fatal("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Fatal("bind() failed");
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {
// Every live fixture, for CloseAllClients (testing::Fork).
internal::Mutex g_servers_mu;
std::set<const RedisServer*>& Servers() SLUICE_REQUIRES(g_servers_mu) {
  static auto* servers = new std::set<const RedisServer*>();
  return *servers;
}
}  // namespace

void RedisServer::CloseClient() const {
  std::shared_ptr<internal::BlockingClient> closing;
  {
    internal::MutexLock lock(client_mu_);
    closing = std::move(client_);
  }
  // The last reference: its destructor joins its threads here.
}

void RedisServer::CloseAllClients() {
  internal::MutexLock lock(g_servers_mu);
  for (const RedisServer* server : Servers()) server->CloseClient();
}

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options)) {
  {
    internal::MutexLock lock(g_servers_mu);
    Servers().insert(this);
  }
  std::string tmpl = options_.parent_dir + "/sluice-redis-XXXXXX";
  if (!::mkdtemp(tmpl.data())) Fatal("mkdtemp failed in " + options_.parent_dir);
  dir_ = tmpl;
  unix_path_ = dir_ + "/redis.sock";
  for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
    port_ = FreeLoopbackPort();
    Start();
  }
  if (pid_ <= 0) Fatal("could not start redis-server after 5 attempts");
}

RedisServer::~RedisServer() {
  {
    internal::MutexLock lock(g_servers_mu);
    Servers().erase(this);
  }
  if (pid_ > 0) Kill();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string RedisServer::url() const {
  std::string auth = options_.requirepass.empty() ? "" : ":" + options_.requirepass + "@";
  if (!options_.tls) return "redis://" + auth + "127.0.0.1:" + std::to_string(port_);
  std::string url =
      "rediss://" + auth + "127.0.0.1:" + std::to_string(port_) + "?ca=" + options_.tls->ca_file;
  if (options_.tls->require_client_cert) {
    url += "&cert=" + options_.tls->client_cert_file + "&key=" + options_.tls->client_key_file;
  }
  return url;
}

void RedisServer::Start() {
  const std::string& program = ServerProgram();
  std::vector<std::string> args = {program,
                                   "--port",
                                   options_.tls ? "0" : std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   dir_,
                                   "--unixsocket",
                                   unix_path_,
                                   "--unixsocketperm",
                                   "700",
                                   "--daemonize",
                                   "no",
                                   "--loglevel",
                                   "warning",
                                   "--logfile",
                                   dir_ + "/redis.log"};
  if (options_.tls) {
    for (const std::string& a :
         {std::string("--tls-port"), std::to_string(port_), std::string("--tls-cert-file"),
          options_.tls->cert_file, std::string("--tls-key-file"), options_.tls->key_file,
          std::string("--tls-ca-cert-file"), options_.tls->ca_file,
          std::string("--tls-auth-clients"),
          std::string(options_.tls->require_client_cert ? "yes" : "no")}) {
      args.push_back(a);
    }
  }
  if (!options_.requirepass.empty()) {
    args.push_back("--requirepass");
    args.push_back(options_.requirepass);
  }
  for (const auto& a : options_.extra_args) args.push_back(a);
  if (!options_.sentinel_config.empty()) {
    // A fresh file at every start: the sentinel rewrites it with what it learnt.
    const std::string conf = dir_ + "/sentinel.conf";
    std::ofstream out(conf, std::ios::trunc);
    if (options_.tls) {
      // TLS only, to clients and to the data nodes (tls-replication).
      out << "port 0\ntls-port " << port_ << "\ntls-cert-file " << options_.tls->cert_file
          << "\ntls-key-file " << options_.tls->key_file << "\ntls-ca-cert-file "
          << options_.tls->ca_file << "\ntls-auth-clients no\ntls-replication yes\n";
    } else {
      out << "port " << port_ << "\n";
    }
    out << "bind 127.0.0.1\ndir " << dir_ << "\nlogfile " << dir_
        << "/redis.log\nloglevel warning\ndaemonize no\n"
        << options_.sentinel_config << "\n";
    if (!out) Fatal("cannot write " + conf);
    args = {program, conf, "--sentinel"};
  }
  // argv is built before fork: the child of a process with other threads must not
  // allocate (an allocator lock another thread held at fork stays held in the child:
  // glibc's malloc guards against it, the address sanitizer's allocator does not).
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = ::fork();
  if (child < 0) Fatal("fork failed");
  if (child == 0) {
    // The server dies with the test process, even when the test aborts or is killed.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr,
                 "redis test fixture: cannot exec %s (is it installed? run scripts/setup.sh; "
                 "or set SLUICE_TEST_SERVER_DIR)\n",
                 argv[0]);
    ::_exit(127);
  }
  pid_ = child;
  paused_ = false;
  // Ready when PING answers; give up after 5 s.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken or not installed
      pid_ = -1;
      return;
    }
    auto endpoint = internal::ParseRedisUrl(url());
    if (!endpoint.ok()) Fatal(endpoint.status().ToString());
    auto client = internal::BlockingClient::Connect(
        std::move(*endpoint), {.connect_timeout = std::chrono::milliseconds(200),
                               .command_timeout = std::chrono::seconds(10)});
    if (client.ok()) {
      internal::MutexLock lock(client_mu_);
      client_ = std::move(*client);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Fatal("redis-server on port " + std::to_string(port_) +
        " did not accept a connection within 5 s");
}

void RedisServer::Pause() {
  if (pid_ > 0 && !paused_) {
    ::kill(pid_, SIGSTOP);
    paused_ = true;
  }
}

void RedisServer::Resume() {
  if (pid_ > 0 && paused_) {
    ::kill(pid_, SIGCONT);
    paused_ = false;
  }
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  {
    internal::MutexLock lock(client_mu_);
    client_.reset();
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  paused_ = false;
}

std::unique_ptr<internal::BlockingClient> RedisServer::Connect() const {
  auto endpoint = internal::ParseRedisUrl(url());
  if (!endpoint.ok()) Fatal(endpoint.status().ToString());
  auto client = internal::BlockingClient::Connect(
      std::move(*endpoint),
      {.connect_timeout = std::chrono::seconds(2), .command_timeout = std::chrono::seconds(10)});
  if (!client.ok()) {
    Fatal("cannot connect to the test redis on port " + std::to_string(port_) + ": " +
          client.status().ToString());
  }
  return std::move(*client);
}

int64_t RedisServer::NowMs() const {
  const RedisValue t = Command({"TIME"});
  return std::stoll(t.elements[0].str) * 1000 + std::stoll(t.elements[1].str) / 1000;
}

RedisValue RedisServer::Command(const std::vector<std::string>& args) const {
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<internal::BlockingClient> client;
    {
      internal::MutexLock lock(client_mu_);
      if (!client_ || (attempt > 0)) client_ = Connect();
      client = client_;
    }
    StatusOr<RedisValue> reply = client->Command(args);
    if (reply.ok()) return *std::move(reply);
    // A connection that broke since the last command (the server restarted, or a test
    // killed clients): the command was never sent, so it is sent once more on a new one.
    const bool never_sent = reply.status().code() == StatusCode::kUnavailable &&
                            reply.status().message().find("is not connected") != std::string::npos;
    if (!never_sent || attempt > 0) {
      Fatal("command " + (args.empty() ? std::string() : args[0]) +
            " failed on the test redis: " + reply.status().ToString());
    }
  }
}

std::vector<std::string> RedisServer::Keys(const std::string& pattern) const {
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    RedisValue page = Command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (page.type != RedisValue::Type::kArray || page.elements.size() != 2) Fatal("bad SCAN reply");
    cursor = page.elements[0].str;
    for (const auto& k : page.elements[1].elements) keys.push_back(k.str);
  } while (cursor != "0");
  return keys;
}

int64_t RedisServer::CommandCalls(const std::string& command) const {
  const std::string stats = Command({"INFO", "commandstats"}).str;
  const std::string head = "cmdstat_" + command + ":calls=";
  const size_t at = stats.find(head);
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + head.size()));
}

std::vector<std::string> RedisServer::KeysWithoutTtl(const std::string& pattern) const {
  std::vector<std::string> leaked;
  for (const auto& key : Keys(pattern)) {
    if (Command({"PTTL", key}).integer == -1) leaked.push_back(key);
  }
  return leaked;
}

}  // namespace sluice::testing
