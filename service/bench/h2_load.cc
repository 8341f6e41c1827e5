// h2_load: a load generator for sluiced's ShouldRateLimit (bench/service.sh) on the lean
// HTTP/2 client (bench/h2_client.h): one thread, --connections connections, each call for
// one of --ids distinct ids (requests serialized once, up front), for --seconds. Closed
// loop by default (--concurrency calls in flight in all); with --rate, open loop: calls
// start on a fixed schedule (at most --concurrency in flight; calls the schedule could not
// start are counted as unsent) and latency counts from each call's scheduled start, so a
// server that falls behind is not hidden. Prints checks/s and latency percentiles in
// grpc_load's format. It costs a fraction of a grpc++ client's CPU, so on a shared box
// the figure measures sluiced rather than the client.
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "service/bench/h2_client.h"
#include "service/bench/load_report.h"
#include "service/grpc_wire.h"

namespace rls = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;
using sluiced::bench::H2Call;
using sluiced::bench::H2Client;

namespace {

const std::string kPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

// RateLimitResponse.overall_code (field 1, a varint, serialized first): 1 OK, 2 OVER_LIMIT.
int OverallCode(const std::string& message) {
  if (message.size() < 2 || message[0] != 0x08) return 0;
  return static_cast<unsigned char>(message[1]);
}

struct Options {
  sluiced::bench::LoadOptions load;
  std::string grpc_timeout;
  double rate = 0;  // calls per second, open loop; 0: closed loop
  std::string host;
  int port = 0;
};

// The command line; nullopt (after printing why, or the help) when the program exits
// with `exit_code`.
std::optional<Options> ParseOptions(int argc, char** argv, int& exit_code) {
  CLI::App app{"h2_load: closed-loop load on ShouldRateLimit over a lean HTTP/2 client"};
  Options o;
  sluiced::bench::AddLoadOptions(app, o.load);
  app.add_option("--rate", o.rate, "calls per second, open loop (0: closed loop)");
  app.add_option("--grpc-timeout", o.grpc_timeout, "grpc-timeout header to send (e.g. 20m)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e);
    return std::nullopt;
  }
  const auto colon = o.load.target.rfind(':');
  if (colon == std::string::npos || o.load.connections < 1 || o.load.concurrency < 1 ||
      o.load.ids < 1) {
    std::fprintf(stderr, "h2_load: bad --target, --connections, --concurrency or --ids\n");
    exit_code = 2;
    return std::nullopt;
  }
  o.host = o.load.target.substr(0, colon);
  o.port = std::stoi(o.load.target.substr(colon + 1));
  return o;
}

// One request per id, serialized and framed once, up front.
std::vector<std::string> RequestBodies(const std::string& domain, int ids) {
  std::vector<std::string> bodies;
  for (int i = 0; i < ids; ++i) {
    rls::RateLimitRequest request;
    request.set_domain(domain);
    auto* e = request.add_descriptors()->add_entries();
    e->set_key("user");
    e->set_value("u" + std::to_string(i));
    std::string framed;
    sluiced::AppendGrpcMessage(framed, request.SerializeAsString());
    bodies.push_back(std::move(framed));
  }
  return bodies;
}

// --connections connections; none when one cannot be made.
std::vector<std::unique_ptr<H2Client>> Connect(const Options& o) {
  std::vector<std::unique_ptr<H2Client>> clients;
  for (int c = 0; c < o.load.connections; ++c) {
    std::string error;
    auto client = H2Client::Connect(o.host, o.port, error);
    if (!client) {
      std::fprintf(stderr, "h2_load: cannot connect to %s: %s\n", o.load.target.c_str(),
                   error.c_str());
      return {};
    }
    clients.push_back(std::move(client));
  }
  return clients;
}

// The calls over the connections for --seconds, and what came of them.
class Load {
 public:
  Load(const Options& o, std::vector<std::unique_ptr<H2Client>> clients)
      : o_(o), clients_(std::move(clients)), bodies_(RequestBodies(o.load.domain, o.load.ids)) {
    if (!o.grpc_timeout.empty()) extra_.emplace_back("grpc-timeout", o.grpc_timeout);
    latencies_us_.reserve(1 << 20);
    for (auto& client : clients_) {
      H2Client* c = client.get();
      c->on_close = [this, c](H2Call& call) { OnClose(*c, call); };
    }
  }

  void Run() {
    start_ = Clock::now();
    end_ = start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(o_.load.seconds));
    if (!open_loop()) {
      for (int i = 0; i < o_.load.concurrency; ++i)
        Submit(*clients_[static_cast<std::size_t>(i % o_.load.connections)]);
    }
    while (Step()) {
    }
    // Calls still open when the wait for them ran out were never answered either.
    for (auto& c : clients_) lost_ += c->open() ? c->open_calls() : 0;
    elapsed_s_ = std::chrono::duration<double>(Clock::now() - start_).count();
  }

  // The result line; the exit code (1 when a call failed or was lost).
  int Report() {
    sluiced::bench::PrintLoadReport(ok_, over_, errors_, elapsed_s_, latencies_us_,
                                    " unsent=" + std::to_string(unsent_) +
                                        " refused=" + std::to_string(refused_) +
                                        " lost=" + std::to_string(lost_));
    if (!first_error_.empty()) std::printf("first error: %s\n", first_error_.c_str());
    return errors_ > 0 || lost_ > 0 ? 1 : 0;
  }

 private:
  bool open_loop() const { return o_.rate > 0; }

  int32_t Submit(H2Client& client) {
    return client.Submit(kPath, bodies_[rng_() % bodies_.size()], extra_);
  }

  void OnClose(H2Client& client, H2Call& call) {
    latencies_us_.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - call.started).count());
    const int code = call.GrpcStatus() == 0 ? OverallCode(call.Message()) : 0;
    if (code == 1) {
      ++ok_;
    } else if (code == 2) {
      ++over_;
    } else if (call.reset_code == 7) {  // NGHTTP2_REFUSED_STREAM
      ++refused_;
    } else {
      ++errors_;
      if (first_error_.empty())
        first_error_ = "grpc-status " + std::to_string(call.GrpcStatus()) + " " +
                       call.GrpcMessage() + " rst " + std::to_string(call.reset_code);
    }
    // After a GOAWAY (the server stops gracefully) no new call goes to it.
    if (running_ && !open_loop() && !client.goaway_received()) Submit(client);
  }

  // Open loop: starts the calls whose scheduled time has come (latency counts from it).
  void StartDue(Clock::time_point now) {
    const auto due =
        static_cast<uint64_t>(std::chrono::duration<double>(now - start_).count() * o_.rate);
    std::size_t in_flight = 0;
    for (auto& c : clients_) in_flight += c->open_calls();
    for (; scheduled_ < due; ++scheduled_) {
      if (in_flight >= static_cast<std::size_t>(o_.load.concurrency)) {
        ++unsent_;
        continue;
      }
      H2Client& c = *clients_[next_client_++ % clients_.size()];
      const int32_t id = Submit(c);
      if (id > 0)
        c.call(id)->started =
            start_ + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(static_cast<double>(scheduled_) / o_.rate));
      ++in_flight;
    }
  }

  // One turn of the loop: false once the run is over (no connection left, or the time
  // is up and every call is answered, or 5 s more have passed).
  bool Step() {
    const auto now = Clock::now();
    if (running_ && now >= end_) running_ = false;
    if (running_ && open_loop()) StartDue(now);
    std::size_t open = 0, connected = 0;
    for (auto& c : clients_) {
      open += c->open() ? c->open_calls() : 0;
      connected += c->open() ? 1 : 0;
    }
    if (connected == 0 || (!running_ && (open == 0 || now >= end_ + std::chrono::seconds(5))))
      return false;
    return Poll();
  }

  // Sends what each connection has to send, waits for input and reads it.
  bool Poll() {
    fds_.resize(clients_.size());
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (!clients_[i]->open()) {
        fds_[i] = {-1, 0, 0};
        continue;
      }
      clients_[i]->Flush();
      fds_[i] = {clients_[i]->fd(),
                 static_cast<short>(POLLIN | (clients_[i]->WantsWrite() ? POLLOUT : 0)), 0};
    }
    // Open loop: wake at least every 100 us to keep the schedule.
    const timespec wait{0, open_loop() ? 100'000 : 50'000'000};
    if (::ppoll(fds_.data(), fds_.size(), &wait, nullptr) < 0) return false;
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if ((fds_[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0 || clients_[i]->OnReadable())
        continue;
      if (clients_[i]->goaway_received() && clients_[i]->open_calls() == 0)
        continue;  // closed after its GOAWAY with every call answered
      // Calls sent and never answered: counted (a stop under load must show none).
      lost_ += clients_[i]->open_calls();
      std::fprintf(stderr, "h2_load: connection %zu closed with %zu call(s) open\n", i,
                   clients_[i]->open_calls());
    }
    return true;
  }

  const Options& o_;
  std::vector<std::unique_ptr<H2Client>> clients_;
  const std::vector<std::string> bodies_;
  std::vector<std::pair<std::string, std::string>> extra_;  // request headers
  std::mt19937_64 rng_{1234};
  Clock::time_point start_, end_;
  bool running_ = true;
  uint64_t scheduled_ = 0, unsent_ = 0;
  std::size_t next_client_ = 0;
  std::vector<pollfd> fds_;
  // refused: calls the server refused unprocessed (REFUSED_STREAM, after its GOAWAY):
  // safe to retry elsewhere, not errors.
  // lost: calls sent and never answered (their connection closed, or the wait ran out).
  uint64_t ok_ = 0, over_ = 0, errors_ = 0, refused_ = 0, lost_ = 0;
  std::string first_error_;
  std::vector<double> latencies_us_;
  double elapsed_s_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<Options> options = ParseOptions(argc, argv, exit_code);
  if (!options) return exit_code;
  auto clients = Connect(*options);
  if (clients.empty()) return 1;
  Load load(*options, std::move(clients));
  load.Run();
  return load.Report();
}
