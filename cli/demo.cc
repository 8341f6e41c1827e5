// sluice demo: what `make run` shows a newcomer. Starts a private redis-server on a free
// loopback port when one is installed (else uses the embedded store), then walks a
// fixed-window "sign-in" limit of 5 per 10 s through 7 attempts and a cost-10 request,
// then a concurrency cap of 2 streams per user through three acquires and a release.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "sluice/sluice.h"

namespace sluice::cli {
namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Starts redis-server on a free port; returns its pid or -1.
pid_t StartRedis(int port) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      ::dup2(devnull, STDOUT_FILENO);
      ::dup2(devnull, STDERR_FILENO);
    }
    std::string p = std::to_string(port);
    ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save",
             "", "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Walks the limits on `client` (a store at `url`), then stops `redis` (the private
// server's pid, or -1).
int Walk(std::shared_ptr<Client> client, const std::string& url, pid_t redis) {
  auto stop = [&] {
    client.reset();
    if (redis > 0) {
      ::kill(redis, SIGTERM);
      ::waitpid(redis, nullptr, 0);
    }
  };
  std::printf("store: %s\n", RedactUrl(url).c_str());
  auto login = client->MakeLimiter("login", {.limit = 5, .window = std::chrono::seconds(10)});
  if (!login.ok()) {
    std::fprintf(stderr, "sluice demo: %s\n", login.status().ToString().c_str());
    stop();
    return kExitError;
  }
  std::printf("limiter \"login\": fixed_window, 5 attempts per 10 s per account\n");
  std::printf("key for account:101 = %s\n\n", login->KeyFor("account:101")->c_str());
  for (int i = 1; i <= 7; ++i) {
    auto d = login->Check("account:101");
    std::printf("attempt %d for account:101 -> %s\n", i,
                d.ok() ? d->ToString().c_str() : d.status().ToString().c_str());
  }
  auto other = login->Check("account:402");
  std::printf("attempt 1 for account:402 -> %s\n",
              other.ok() ? other->ToString().c_str() : other.status().ToString().c_str());
  auto big = login->Check("account:777", {.cost = 10});
  std::printf("a cost-10 request for account:777 -> %s\n",
              big.ok() ? big->ToString().c_str() : big.status().ToString().c_str());
  std::printf(
      "\nRefused attempts are not counted; each account has its own window, and its key\n"
      "expires when the window ends (the expiry is set by the same script that counts).\n");

  auto streams = client->MakeConcurrencyLimiter(
      "streams", {.limit = 2, .lease_ttl = std::chrono::seconds(30)});
  if (!streams.ok()) {
    std::fprintf(stderr, "sluice demo: %s\n", streams.status().ToString().c_str());
    stop();
    return kExitError;
  }
  std::printf(
      "\nlimiter \"streams\": at most 2 streams in flight per user, as 30 s leases that\n"
      "heartbeat every 5 s (key %s)\n\n",
      streams->KeyFor("user:42")->c_str());
  std::vector<Lease> held;
  auto show = [&](const char* what, const StatusOr<Acquisition>& a) {
    if (!a.ok()) {
      std::printf("%s -> %s\n", what, a.status().ToString().c_str());
    } else if (a->acquired) {
      std::printf("%s -> granted lease %s (%lld live)\n", what, a->lease.id().c_str(),
                  static_cast<long long>(a->live));
    } else {
      std::printf("%s -> refused: %lld live, earliest expires in %lld ms\n", what,
                  static_cast<long long>(a->live), static_cast<long long>(a->retry_after.count()));
    }
  };
  for (int i = 1; i <= 3; ++i) {
    auto a = streams->Acquire("user:42");
    show(("stream " + std::to_string(i) + " for user:42").c_str(), a);
    if (a.ok() && a->acquired) held.push_back(std::move(a->lease));
  }
  if (!held.empty()) {
    Status released = held.front().Release();
    std::printf("stream 1 ends: release -> %s\n",
                released.ok() ? "ok" : released.ToString().c_str());
  }
  auto again = streams->Acquire("user:42");
  show("stream 3 again", again);
  std::printf(
      "\nA holder that dies without releasing (SIGKILL on deploy) stops heartbeating; its\n"
      "slot is free again 30 s later, at the next acquire. No reaper, no finally.\n");
  for (Lease& lease : held) (void)lease.Release();
  if (again.ok()) (void)again->lease.Release();
  stop();
  return kExitOk;
}

int RunDemo(std::string url) {
  // A store the user named is used or refused, never swapped for another: a demo that
  // says it ran on Redis must have run on it.
  if (!url.empty()) {
    auto client = Client::Create({.url = url, .deadline = std::chrono::milliseconds(2000)});
    if (!client.ok()) {
      std::fprintf(stderr, "sluice demo: cannot use --redis %s: %s\n", RedactUrl(url).c_str(),
                   client.status().ToString().c_str());
      return kExitError;
    }
    return Walk(*client, url, -1);
  }
  // No --redis: a private redis-server on a free loopback port, or, when none can be
  // started, the embedded store — saying why.
  const int port = FreePort();
  pid_t redis = StartRedis(port);
  url = "redis://127.0.0.1:" + std::to_string(port);
  StatusOr<std::shared_ptr<Client>> client = UnavailableError("not started");
  std::string why = "it did not answer within 5 s";
  for (int attempt = 0; attempt < 50 && redis > 0; ++attempt) {
    int status = 0;
    if (::waitpid(redis, &status, WNOHANG) == redis) {
      why = WIFEXITED(status) && WEXITSTATUS(status) == 127
                ? "redis-server is not installed"
                : "redis-server exited at start (status " + std::to_string(status) + ")";
      redis = -1;
      break;
    }
    client = Client::Create({.url = url, .deadline = std::chrono::milliseconds(50)});
    if (client.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!client.ok()) {
    if (redis > 0) {
      ::kill(redis, SIGTERM);
      ::waitpid(redis, nullptr, 0);
      redis = -1;
    }
    std::printf("no private redis-server (%s): using the embedded store (memory://)\n",
                why.c_str());
    url = "memory://";
    client = Client::Create({.url = url, .deadline = std::chrono::milliseconds(50)});
  }
  if (!client.ok()) {
    std::fprintf(stderr, "sluice demo: %s\n", client.status().ToString().c_str());
    return kExitError;
  }
  return Walk(*client, url, redis);
}

}  // namespace

void AddDemo(CLI::App& app, int& exit_code) {
  auto url = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("demo",
                         "Walk a fixed-window sign-in limit through a few attempts (starts its own "
                         "redis-server unless --redis is given).");
  cmd->add_option("--redis", *url,
                  "Use this store instead of a private redis-server (one that cannot be "
                  "used is an error, exit 2)");
  cmd->callback([url, &exit_code] { exit_code = RunDemo(*url); });
}

}  // namespace sluice::cli
