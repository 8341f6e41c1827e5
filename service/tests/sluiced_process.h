// Test fixtures for sluiced end to end: a sluiced child process on free loopback ports
// (every listener on port 0; the ports are read from its "serving" log line), a temporary
// config directory, and a minimal blocking HTTP/1.1 client. Only pids started here are
// ever signalled.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluiced::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sluiced_test_XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::string& text) const {
    const std::string tmp = path_ + "/." + name + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path_ + "/" + name);  // atomic: a reload never sees half a file
  }

 private:
  std::string path_;
};

class Sluiced {
 public:
  // Starts build/bin/sluiced with `args` (plus listeners on port 0 and --watch-ms 200,
  // each unless `args` gives that flag) and waits until it serves; fails the test (and
  // stops the child) when it does not within 10 s. `env` ("NAME=value") is set in the
  // child's environment over what this process has.
  Sluiced(const std::string& config_dir, const std::string& redis_url,
          std::vector<std::string> args = {}, bool expect_start = true,
          std::vector<std::string> env = {})
      : log_path_(log_dir_.path() + "/sluiced.log") {
    std::vector<std::string> argv = {SLUICED_PATH,
                                     "--config",
                                     config_dir,
                                     "--redis",
                                     redis_url,
                                     "--audit-log",
                                     log_dir_.path() + "/audit.log"};
    for (const auto& [flag, value] :
         {std::pair{"--http-listen", "127.0.0.1:0"}, std::pair{"--grpc-listen", "127.0.0.1:0"},
          std::pair{"--admin-listen", "127.0.0.1:0"}, std::pair{"--metrics-listen", "127.0.0.1:0"},
          std::pair{"--watch-ms", "200"}}) {
      if (std::find(args.begin(), args.end(), flag) == args.end())
        argv.insert(argv.end(), {flag, value});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    // Built before fork: the child allocates nothing before exec (testing/processes.h).
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<char*> cenv;
    for (auto& e : env) cenv.push_back(e.data());
    for (char** e = environ; *e; ++e) {
      const std::string_view entry(*e);
      const std::string_view name = entry.substr(0, entry.find('='));
      bool overridden = false;
      for (const auto& mine : env) overridden |= mine.substr(0, mine.find('=')) == name;
      if (!overridden) cenv.push_back(*e);
    }
    cenv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // sluiced dies with the test process, even when the test aborts or is killed (the
      // parent may have died before the request took effect: then it exits at once).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(SLUICED_PATH, cargv.data(), cenv.data());
      ::_exit(127);
    }
    if (!expect_start) return;
    const std::regex serving(
        R"(serving http=[^:]+:(\d+) grpc=[^:]+:(\d+) admin=[^:]+:(\d+) metrics=[^:]+:(\d+))");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string log = ReadAll(log_path_);
      if (std::regex_search(log, m, serving)) {
        http_port_ = std::stoi(m[1]);
        grpc_port_ = std::stoi(m[2]);
        admin_port_ = std::stoi(m[3]);
        metrics_port_ = std::stoi(m[4]);
        return;
      }
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        ADD_FAILURE() << "sluiced exited before serving:\n" << log;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "sluiced did not serve within 10 s:\n" << ReadAll(log_path_);
  }

  // A sluiced that was serving must stop cleanly on SIGTERM (exit 0: under ASan, also no
  // error and no leak).
  ~Sluiced() {
    const bool was_running = pid_ > 0;
    const int code = Stop();
    if (was_running) {
      EXPECT_EQ(code, 0) << "sluiced did not exit cleanly:\n" << log();
    }
  }

  // SIGTERM, then SIGKILL after 5 s; returns the exit status (-1 when killed).
  int Stop() {
    if (pid_ <= 0) return exit_code_;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        ADD_FAILURE() << "sluiced did not stop on SIGTERM within 5 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_code_;
  }

  // Waits for the child to exit by itself (start-up refusals); returns its exit code.
  int WaitExit(std::chrono::seconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline) return Stop(), -2;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Waits (up to `within`) until the log contains `text`; false when it does not, or
  // when the child exits first.
  bool WaitForLog(const std::string& text,
                  std::chrono::milliseconds within = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (log().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline || !running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }
  int admin_port() const { return admin_port_; }
  int metrics_port() const { return metrics_port_; }
  std::string log() const { return ReadAll(log_path_); }
  std::string audit_log() const { return ReadAll(audit_log_path()); }
  std::string audit_log_path() const { return log_dir_.path() + "/audit.log"; }

 private:
  TempDir log_dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int http_port_ = 0, grpc_port_ = 0, admin_port_ = 0, metrics_port_ = 0;
};

struct HttpReply {
  int status = 0;                              // 0: no reply (connection closed or timed out)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One TCP connection to 127.0.0.1:port with a receive timeout.
class Connection {
 public:
  explicit Connection(int port, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Connection() { ::close(fd_); }
  bool connected() const { return connected_; }

  bool Send(const std::string& data) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Reads one response (Content-Length framed); status 0 when the peer closed first.
  HttpReply Read() {
    HttpReply reply;
    std::size_t header_end;
    while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return reply;
    }
    std::istringstream head(buffer_.substr(0, header_end));
    std::string line;
    std::getline(head, line);
    if (line.size() < 12) return reply;
    reply.status = std::stoi(line.substr(9, 3));
    while (std::getline(head, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      reply.headers[name] = value;
    }
    const std::size_t length =
        reply.headers.count("content-length") ? std::stoul(reply.headers["content-length"]) : 0;
    while (buffer_.size() < header_end + 4 + length) {
      if (!Fill()) return HttpReply{};
    }
    reply.body = buffer_.substr(header_end + 4, length);
    buffer_.erase(0, header_end + 4 + length);
    return reply;
  }

  // True when the peer closed the connection (read returns 0 or a reset).
  bool ClosedByPeer() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  bool Fill() {
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

inline std::string Request(const std::string& method, const std::string& path,
                           const std::string& body = "", const std::string& extra_headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers +
         (body.empty() && method == "GET" ? ""
                                          : "Content-Type: application/json\r\nContent-Length: " +
                                                std::to_string(body.size()) + "\r\n") +
         "\r\n" + body;
}

inline HttpReply Call(int port, const std::string& method, const std::string& path,
                      const std::string& body = "", const std::string& extra_headers = "") {
  Connection c(port);
  if (!c.connected() || !c.Send(Request(method, path, body, extra_headers))) return {};
  return c.Read();
}

// `promtool check metrics` on a metrics page: true when it passes; `output`, what
// promtool said.
inline bool PromtoolAccepts(const std::string& page, std::string& output) {
  TempDir dir;
  dir.Write("metrics.txt", page);
  const std::string cmd =
      "promtool check metrics < " + dir.path() + "/metrics.txt > " + dir.path() + "/out.txt 2>&1";
  const bool passed = std::system(cmd.c_str()) == 0;
  output = ReadAll(dir.path() + "/out.txt");
  return passed;
}

}  // namespace sluiced::testing
